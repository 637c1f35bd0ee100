"""Keep secrets out of traces: API keys, tokens, passwords, credentials in URLs.

A value is replaced by ``"[redacted]"`` when its key names a secret (``api_key``,
``Authorization``, ``access_token``, ``password``, ``cookie``, ...); inside any other string,
what looks like a key or a token (``sk-...``, ``Bearer ...``, GitHub, Slack, AWS and Google
keys, JWTs, ``user:password@`` in a URL) is replaced in place. Harmless names that merely
contain such a word (``max_tokens``, ``keyword``, ``author``) are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .._secrets import REDACTED, register_secret, scrub

__all__ = ["REDACTED", "is_secret_key", "redact", "redact_text", "register_secret"]

# a key is cut into words (snake_case, kebab-case, camelCase), then looked at as a whole
_SECRET_KEY = re.compile(
    r"""^(?:.*_)?(?:
        api_?key | apikey | secret(?:_.*)? | client_secret | passw(?:or)?d | passphrase | pwd
        | authorization | auth | proxy_authorization | cookie | set_cookie | credentials?
        | private_?key | access_?key(?:_id)? | secret_?key | session(?:_?id)? | signature
        | (?:access|refresh|id|auth|bearer|session|api|csrf|xsrf)?_?token
    )$""",
    re.VERBOSE,
)
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")

_SECRET_VALUES = re.compile(
    r"""
    \b(?:sk|pk|rk)-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}     # OpenAI / Anthropic / Stripe-style
    | (?<=[Bb]earer\s)[A-Za-z0-9._~+/=-]{8,}                # Authorization: Bearer <token>
    | (?<=[Bb]asic\s)[A-Za-z0-9+/=]{8,}                      # Authorization: Basic <b64>
    | \bgh[pousr]_[A-Za-z0-9]{20,}                           # GitHub
    | \bgithub_pat_[A-Za-z0-9_]{20,}
    | \bxox[abprs]-[A-Za-z0-9-]{10,}                         # Slack
    | \bAKIA[0-9A-Z]{16}\b                                   # AWS access key id
    | \bAIza[0-9A-Za-z_-]{35}                                # Google API key
    | \bhf_[A-Za-z0-9]{20,}                                  # Hugging Face
    | \beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+  # JWT
    """,
    re.VERBOSE,
)
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+(?=@)")
_QUERY_SECRET = re.compile(
    r"(?<=[?&])((?:api[_-]?key|access[_-]?token|token|key|secret|password|sig|signature)=)"
    r"[^&#\s]+",
    re.IGNORECASE,
)


def is_secret_key(key: str) -> bool:
    """Whether a mapping key (a kwarg's or a header's name) names a secret."""
    words = "_".join(w.lower() for w in _WORDS.findall(key))
    return bool(words) and _SECRET_KEY.match(words) is not None


def redact_text(text: str) -> str:
    """``text`` with the caller's secrets (their exact values, see :func:`register_secret`)
    and what looks like a key, a token or a URL password replaced."""
    text = scrub(text)
    if len(text) < 8:
        return text
    text = _SECRET_VALUES.sub(REDACTED, text)
    if "://" in text:
        text = _URL_USERINFO.sub(REDACTED, text)
    if "=" in text:
        text = _QUERY_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with its secrets replaced by ``"[redacted]"``.

    Mappings, lists and tuples are walked; the value of a key that names a secret is
    replaced whole (whatever its type); every other string is cleaned with
    :func:`redact_text`. Other values are returned as they are.
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            key: REDACTED
            if isinstance(key, str) and is_secret_key(key) and item not in (None, "")
            else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    return value
