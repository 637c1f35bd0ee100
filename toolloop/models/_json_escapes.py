"""Decoding JSON string escapes that may be cut anywhere by the stream."""

from __future__ import annotations

import re

__all__ = ["BadEscape", "decode_escape"]

_HEX = re.compile(r"[0-9a-fA-F]*").fullmatch
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}


class BadEscape(Exception):
    """An escape sequence that is not JSON; the reader turns it into a ModelOutputError."""

    def __init__(self, expected: str, got: str) -> None:
        super().__init__(expected, got)
        self.expected = expected
        self.got = got


def _check_hex(digits: str) -> None:
    if not _HEX(digits):
        bad = next(c for c in digits if c not in _HEX_DIGITS)
        raise BadEscape("4 hex digits after '\\u'", repr(bad))


def decode_escape(pending: str) -> tuple[str, int] | None:
    """Decode the escape sequence at the start of ``pending`` (which starts with ``\\``).

    Returns the character and how many characters of ``pending`` it used, or None when
    more characters are needed to decide. A high surrogate followed by an escaped low
    surrogate gives one character, as `json.loads` does; a lone surrogate is kept as is.
    """
    if len(pending) < 2:
        return None
    letter = pending[1]
    if letter != "u":
        char = _SIMPLE_ESCAPES.get(letter)
        if char is None:
            raise BadEscape("""one of '"\\/bfnrtu' after '\\'""", repr(letter))
        return char, 2
    digits = pending[2:6]
    _check_hex(digits)
    if len(digits) < 4:
        return None
    code = int(digits, 16)
    if not 0xD800 <= code <= 0xDBFF:
        return chr(code), 6
    # A high surrogate: one character with the next escape if that is a low surrogate.
    if len(pending) < 8:
        if len(pending) == 6 or pending[6] == "\\":
            return None
        return chr(code), 6
    if pending[6:8] != "\\u":
        return chr(code), 6
    low_digits = pending[8:12]
    _check_hex(low_digits)
    if len(low_digits) < 4:
        return None
    low = int(low_digits, 16)
    if 0xDC00 <= low <= 0xDFFF:
        return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), 12
    return chr(code), 6
