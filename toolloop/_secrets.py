"""The exact secrets a caller gave toolloop (an API key, whatever its shape): they never
appear in an error, a trace, a picture, a span or a log.

Pattern-based redaction (:mod:`toolloop.tracing`) catches what looks like a key; a key of
another shape (short, no prefix, with spaces) is only caught by its exact value, which is
why every place a caller hands toolloop a secret registers it here, and every message that
leaves toolloop is scrubbed of them.
"""

from __future__ import annotations

__all__ = ["MIN_SECRET_CHARS", "MIN_SHARED_SECRET_CHARS", "REDACTED", "register_secret", "scrub"]

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 3
"""A secret this short is not scrubbed at all (it cannot be told apart from letters)."""
MIN_SHARED_SECRET_CHARS = 8
"""A registered secret is scrubbed from every text of the process only from this length:
a shorter one (``"test"``, ``"dummy"``) would be mistaken for ordinary words. The component
that holds a shorter secret (e.g. the model adapter its key) scrubs it from its own errors."""

_SECRETS: set[str] = set()
_ORDERED: list[str] = []  # longest first, so a secret inside another is replaced after it


def register_secret(value: str | None) -> None:
    """Remember ``value`` (stripped) as a secret of this process: :func:`scrub` removes it
    from every text from now on. ``None``, empty and very short values are ignored."""
    if not value:
        return
    for secret in {value, value.strip()}:
        if len(secret) >= MIN_SHARED_SECRET_CHARS and secret not in _SECRETS:
            _SECRETS.add(secret)
            _ORDERED.append(secret)
            _ORDERED.sort(key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``"[redacted]"``."""
    for secret in _ORDERED:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
