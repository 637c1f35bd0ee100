"""What looks like a secret is scrubbed; what merely mentions a word like it is not."""

from __future__ import annotations

import pytest

from toolloop.tracing import REDACTED, is_secret_key, redact, redact_text


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "X-API-Key",
        "OPENAI_API_KEY",
        "Authorization",
        "proxy-authorization",
        "access_token",
        "refreshToken",
        "token",
        "password",
        "db_password",
        "client_secret",
        "secret",
        "Cookie",
        "aws_secret_access_key",
        "private_key",
        "credentials",
        "session_id",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    ["max_tokens", "tokens", "keyword", "author", "city", "key_points", "tokenizer", "passage"],
)
def test_harmless_keys(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("key sk-proj-AbCdEf0123456789xyzXYZ here", "sk-proj-AbCdEf0123456789xyzXYZ"),
        ("Authorization: Bearer eyJhbGciOi.abc.def-123456", "eyJhbGciOi.abc.def-123456"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ", "ghp_0123456789abcdefghijABCDEFGHIJ"),
        ("xoxb-123456789012-abcdefghij", "xoxb-123456789012-abcdefghij"),
        ("AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
        ("AIzaSyA-0123456789abcdefghijklmnopqrstu", "AIzaSyA-0123456789abcdefghijklmnopqrstu"),
        ("hf_abcdefghijklmnopqrstuvwx", "hf_abcdefghijklmnopqrstuvwx"),
        ("https://admin:s3cr3tpass@db.example/x", "s3cr3tpass"),
        ("https://api.example/v1?api_key=abc123456&q=1", "abc123456"),
        (
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ),
    ],
)
def test_secret_values_inside_text(text: str, secret: str) -> None:
    cleaned = redact_text(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


@pytest.mark.parametrize(
    "text",
    ["the weather in Lisbon", "risk-assessment-of-the-whole-quarter", "http://127.0.0.1:8000/v1"],
)
def test_plain_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_nested_values() -> None:
    value = {
        "city": "Lisbon",
        "headers": {"Authorization": "Bearer abc", "Accept": "json"},
        "items": [{"token": 123}, "sk-0123456789abcdefghijkl", ("a", {"password": "pw"})],
        "max_tokens": 100,
        "api_key": None,
    }
    assert redact(value) == {
        "city": "Lisbon",
        "headers": {"Authorization": REDACTED, "Accept": "json"},
        "items": [{"token": REDACTED}, REDACTED, ["a", {"password": REDACTED}]],
        "max_tokens": 100,
        "api_key": None,
    }
