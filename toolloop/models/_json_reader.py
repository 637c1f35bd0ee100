"""An incremental JSON reader for the streamed structured output of a model.

The model's text arrives in deltas cut at arbitrary points. `JSONStreamReader` is fed those
deltas and reports, as soon as the characters decide them:

- `StringDelta`: new characters of a string value (already unescaped), so a consumer can
  settle a choice such as ``next_action`` from its first letter (see `settle_choice`);
- `ValueDone`: a value is complete (scalar, string, object or array), with its Python value,
  so an item of ``execution_commands`` can be dispatched the moment its ``}`` arrives;
- `Done`: the top-level value is complete.

The reader keeps a stack of the containers under construction and reads each character a
bounded number of times, so feeding ``n`` characters costs O(n) however the text is cut.
Containers nest at most :data:`MAX_DEPTH` (256) levels deep: a structured plan never needs
more, and a deeper output (a model looping on ``[``) ends at once in a
:class:`~toolloop.errors.ModelOutputError`, so time and memory stay O(n) in the input's
length whatever its depth.
Runs of plain string characters, whitespace and number characters are scanned with
compiled regular expressions, and strings with escapes by the C scanner of `json.loads`,
rather than one Python step per character.
"""

from __future__ import annotations

import json.decoder
import re
from collections.abc import Callable
from typing import Any, TypeAlias, cast

from toolloop._errors import ModelOutputError

from ._json_escapes import BadEscape as _BadEscape
from ._json_escapes import decode_escape as _decode_escape
from ._json_events import (
    Done,
    JSONEvent,
    JSONPath,
    StringDelta,
    ValueDone,
    format_json_path,
)

__all__ = ["MAX_DEPTH", "JSONStreamReader"]

MAX_DEPTH = 256
"""How deep containers may nest in a streamed document."""

# States of the reader. `_VALUE`: a value is expected; `_FIRST_ITEM`: after ``[``;
# `_FIRST_KEY`: after ``{``; `_KEY`: after ``,`` in an object; `_AFTER`: after a value
# inside a container. `_VALUE` to `_AFTER` are the states between tokens (one range: they
# skip whitespace alike).
_NOISE = 0
_VALUE = 1
_FIRST_ITEM = 2
_FIRST_KEY = 3
_KEY = 4
_COLON = 5
_AFTER = 6
_STRING = 7
_ESCAPE = 8
_NUMBER = 9
_LITERAL = 10
_TRAILING = 11
_FAILED = 12  # a ModelOutputError was raised; every call raises again
_CLOSED = 13

# Patterns that accept the empty string always match: their `match` never returns None.
_RunMatcher: TypeAlias = Callable[[str, int], "re.Match[str]"]
_WS_RUN = cast(_RunMatcher, re.compile(r"[ \t\n\r]*").match)
# Raw control characters inside strings are accepted (as json.loads(strict=False) does):
# grammar-constrained servers such as llama.cpp's let a model write a raw newline there.
_STR_RUN = cast(_RunMatcher, re.compile(r'[^"\\]*').match)
_NUM_RUN = cast(_RunMatcher, re.compile(r"[-+0-9.eE]*").match)
# The string scanner of `json.loads` (in C on CPython); not in the typing stubs.
_scanstring_c = cast(Callable[[str, int, bool], tuple[str, int]], vars(json.decoder)["scanstring"])


def _scanstring(text: str, end: int) -> tuple[str, int]:
    return _scanstring_c(text, end, False)


_NUM_FULL = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?").fullmatch
_START = re.compile(r"[{\[]").search

_LITERALS: dict[str, tuple[str, Any]] = {
    "t": ("true", True),
    "f": ("false", False),
    "n": ("null", None),
}
_NUMBER_START = frozenset("-0123456789")
_WHITESPACE = frozenset(" \t\n\r")


class JSONStreamReader:
    """Read one JSON value fed in pieces, reporting events as soon as the text decides them.

    Args:
        skip_leading_noise: skip any text before the first ``{`` or ``[`` (an LLM may
            write a sentence or a ```` ```json ```` fence first). The top-level value is then
            always an object or an array. With False, the text must start with a JSON
            value (whitespace aside), which may also be a scalar.
        string_deltas: whether to report `StringDelta` events: for every string value
            (True), none (False), or the string values whose path the predicate accepts
            (called once per string). Fewer deltas read faster.

    Anything after the top-level value (a closing fence, whitespace, other text) is
    ignored. Malformed JSON raises `ModelOutputError` saying what was expected, what came,
    and at which character offset; after that every call raises again.

    Example:
        >>> reader = JSONStreamReader()
        >>> reader.feed('```json\\n{"a": [1, "x')
        [ValueDone(path=('a', 0), value=1), StringDelta(path=('a', 1), text='x')]
        >>> reader.feed('"]}\\n```')[-1]
        Done(value={'a': [1, 'x']})
    """

    __slots__ = (
        "_done",
        "_esc",
        "_failure",
        "_lit_seen",
        "_lit_value",
        "_lit_word",
        "_offset",
        "_parts",
        "_parts_sent",
        "_stack",
        "_start",
        "_state",
        "_string_deltas",
        "_string_is_key",
        "_value",
        "_value_path",
        "_wants_deltas",
    )

    def __init__(
        self,
        *,
        skip_leading_noise: bool = True,
        string_deltas: bool | Callable[[JSONPath], bool] = True,
    ) -> None:
        self._string_deltas = string_deltas
        self._state = _NOISE if skip_leading_noise else _VALUE
        # Open containers, innermost last: [container, its path, current key, is_object].
        self._stack: list[list[Any]] = []
        self._offset = 0  # characters fed before the current piece
        self._start = 0  # offset where the current token (number, literal, escape) began
        self._value_path: JSONPath = ()  # path of the scalar being read
        self._parts: list[str] = []  # pieces of the current string or number
        self._parts_sent = 0  # pieces of the current string already reported
        self._string_is_key = False
        self._wants_deltas = False
        self._esc = ""  # an escape sequence cut by the end of a piece
        self._lit_word = ""  # the literal being read ("true", ...)
        self._lit_seen = ""  # how much of it has come
        self._lit_value: Any = None
        self._value: Any = None
        self._done = False
        self._failure: ModelOutputError | None = None

    @property
    def done(self) -> bool:
        """True once the top-level value is complete."""
        return self._done

    @property
    def value(self) -> Any:
        """The top-level value as `json.loads` would return it.

        Raises:
            RuntimeError: the value is not complete yet (see `done`).
        """
        if not self._done:
            raise RuntimeError("the JSON value is not complete yet; check `done` first")
        return self._value

    @property
    def offset(self) -> int:
        """How many characters have been fed so far."""
        return self._offset

    def feed(self, text: str) -> list[JSONEvent]:
        """Read the next piece of text; return the events it decides, in order.

        Raises:
            ModelOutputError: the text so far is not JSON (also raised by every later call).
            RuntimeError: called after `close`.
        """
        if self._state == _STRING and text and _STR_RUN(text, 0).end() == len(text):
            # Fast path: the whole piece is plain characters of a string (common with
            # small deltas).
            parts = self._parts
            parts.append(text)
            self._offset += len(text)
            if self._wants_deltas and not self._string_is_key:
                self._parts_sent = len(parts)
                return [StringDelta(self._value_path, text)]
            return []
        if self._state >= _FAILED:
            self._raise_if_failed()
            raise RuntimeError("feed() called after close()")
        events: list[JSONEvent] = []
        try:
            self._read(text, events)
        except ModelOutputError as exc:
            self._fail(exc)
            raise
        self._offset += len(text)
        return events

    def close(self) -> list[JSONEvent]:
        """Mark the end of the text; return the last events (a top-level number ends here).

        Calling it again returns no events.

        Raises:
            ModelOutputError: the text ended before the top-level value was complete, or
                the reader had already failed.
        """
        self._raise_if_failed()
        events: list[JSONEvent] = []
        if not self._done:
            try:
                if self._state == _NUMBER and not self._stack:
                    self._end_number(events)
                else:
                    raise ModelOutputError(self._truncation_message())
            except ModelOutputError as exc:
                self._fail(exc)
                raise
        self._state = _CLOSED
        return events

    def _fail(self, exc: ModelOutputError) -> None:
        self._failure = exc
        self._state = _FAILED

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ModelOutputError(str(self._failure)) from self._failure

    # -- reading -------------------------------------------------------------------------

    def _read(self, text: str, events: list[JSONEvent]) -> None:
        """Advance the state machine over ``text``."""
        state = self._state
        stack = self._stack
        n = len(text)
        i = 0
        c_scan = True
        while i < n:
            if state == _STRING:
                j = _STR_RUN(text, i).end()
                if j > i:
                    self._parts.append(text[i:j])
                    if j == n:
                        break
                char = text[j]
                if char == '"':
                    i = j + 1
                    state = self._end_string(events)
                else:  # a backslash: the only other character _STR_RUN stops at
                    if c_scan:
                        # The string may end in this piece: let the C scanner of json.loads
                        # decode the rest. If it cannot (the string is cut, or malformed),
                        # it will not for the rest of this piece either (trying again at
                        # every escape would be quadratic): read escapes one by one.
                        c_scan = False
                        if text.find('"', j + 1) != -1:
                            try:
                                rest, i = _scanstring(text, j)
                            except ValueError:
                                pass
                            else:
                                c_scan = True
                                self._parts.append(rest)
                                state = self._end_string(events)
                                continue
                    i = j
                    state = _ESCAPE
            elif _VALUE <= state <= _AFTER:  # between tokens: whitespace, then one character
                j = i
                char = text[j]
                if char in _WHITESPACE:
                    j = _WS_RUN(text, j).end()
                    if j == n:
                        break
                    char = text[j]
                i = j + 1
                if state == _AFTER:
                    frame = stack[-1]
                    if char == ",":
                        state = _KEY if frame[3] else _VALUE
                    elif char == ("}" if frame[3] else "]"):
                        stack.pop()
                        state = self._end_value(frame[1], frame[0], events)
                    elif frame[3]:
                        raise self._error("',' or '}' after an object member", text, j)
                    else:
                        raise self._error("',' or ']' after an array item", text, j)
                elif state == _VALUE or state == _FIRST_ITEM:
                    if state == _FIRST_ITEM and char == "]":
                        frame = stack.pop()
                        state = self._end_value(frame[1], frame[0], events)
                        continue
                    if stack:
                        frame = stack[-1]
                        path = frame[1] + ((frame[2],) if frame[3] else (len(frame[0]),))
                    else:
                        path = ()
                    if char == '"':
                        self._value_path = path
                        self._parts = []
                        self._parts_sent = 0
                        self._string_is_key = False
                        wants = self._string_deltas
                        self._wants_deltas = wants if isinstance(wants, bool) else wants(path)
                        state = _STRING
                    elif char in "{[":
                        if len(stack) >= MAX_DEPTH:
                            raise self._malformed(
                                f"containers nested at most {MAX_DEPTH} levels deep",
                                self._offset + j,
                                f"a {char!r} opening level {len(stack) + 1}",
                                "a structured plan is never that deep: the model's output is "
                                "malformed",
                            )
                        if char == "{":
                            stack.append([{}, path, None, True])
                            state = _FIRST_KEY
                        else:
                            stack.append([[], path, None, False])
                            state = _FIRST_ITEM
                    elif char in _NUMBER_START:
                        i = j
                        self._value_path = path
                        self._parts = []
                        self._start = self._offset + j
                        state = _NUMBER
                    elif char in _LITERALS:
                        i = j
                        self._value_path = path
                        self._lit_word, self._lit_value = _LITERALS[char]
                        self._lit_seen = ""
                        state = _LITERAL
                    else:
                        raise self._error("a JSON value", text, j)
                elif state == _KEY or state == _FIRST_KEY:
                    if char == '"':
                        self._parts = []
                        self._string_is_key = True
                        state = _STRING
                    elif char == "}" and state == _FIRST_KEY:
                        frame = stack.pop()
                        state = self._end_value(frame[1], frame[0], events)
                    elif state == _FIRST_KEY:
                        raise self._error("'\"' (a key) or '}'", text, j)
                    else:
                        raise self._error("'\"' (a key) after ','", text, j)
                else:  # _COLON
                    if char != ":":
                        raise self._error("':' after a key", text, j)
                    state = _VALUE
            elif state == _ESCAPE:
                pending = self._esc + text[i : i + 12]
                try:
                    decoded = _decode_escape(pending)
                except _BadEscape as exc:
                    at = self._offset + i - len(self._esc)
                    raise self._malformed(exc.expected, at, exc.got) from None
                if decoded is None:
                    self._esc = pending
                    break
                char, used = decoded
                self._parts.append(char)
                used -= len(self._esc)
                if used >= 0:
                    i += used
                    self._esc = ""
                    state = _STRING
                else:  # the escape after a lone surrogate began in an earlier piece
                    self._esc = self._esc[used:]
            elif state == _NUMBER:
                j = _NUM_RUN(text, i).end()
                self._parts.append(text[i:j])
                if j == n:
                    break
                i = j
                state = self._end_number(events)
            elif state == _LITERAL:
                word = self._lit_word
                seen = self._lit_seen
                got = text[i : i + len(word) - len(seen)]
                if not word.startswith(got, len(seen)):
                    bad = next(k for k, c in enumerate(got) if c != word[len(seen) + k])
                    raise self._error(f"{word!r}", text, i + bad)
                i += len(got)
                seen += got
                if len(seen) < len(word):
                    self._lit_seen = seen
                    break
                state = self._end_value(self._value_path, self._lit_value, events)
            elif state == _NOISE:
                found = _START(text, i)
                if found is None:
                    break
                i = found.start()
                state = _VALUE
            else:  # _TRAILING: whatever follows the top-level value is ignored
                break
        self._state = state
        if (
            (state == _STRING or state == _ESCAPE)
            and self._wants_deltas
            and not self._string_is_key
        ):
            self._send_delta(events)

    def _send_delta(self, events: list[JSONEvent]) -> None:
        parts = self._parts
        sent = self._parts_sent
        if len(parts) > sent:
            text = parts[sent] if len(parts) == sent + 1 else "".join(parts[sent:])
            events.append(StringDelta(self._value_path, text))
            self._parts_sent = len(parts)

    def _end_string(self, events: list[JSONEvent]) -> int:
        parts = self._parts
        value = "".join(parts)
        if self._string_is_key:
            self._stack[-1][2] = value
            return _COLON
        if self._wants_deltas:
            self._send_delta(events)
        return self._end_value(self._value_path, value, events)

    def _end_number(self, events: list[JSONEvent]) -> int:
        text = "".join(self._parts)
        match = _NUM_FULL(text)
        if match is None:
            raise self._malformed("a number", self._start, repr(text))
        try:
            value: int | float = (
                int(text) if match.start(1) == -1 and match.start(2) == -1 else float(text)
            )
        except ValueError as exc:  # an integer too long for int()
            raise ModelOutputError(
                f"unusable JSON from the model: the number at offset {self._start} cannot be"
                f" read ({exc})"
            ) from exc
        return self._end_value(self._value_path, value, events)

    def _end_value(self, path: JSONPath, value: Any, events: list[JSONEvent]) -> int:
        """Store a complete value in its container (or finish); return the next state."""
        stack = self._stack
        if stack:
            frame = stack[-1]
            if frame[3]:
                frame[0][frame[2]] = value
            else:
                frame[0].append(value)
            events.append(ValueDone(path, value))
            return _AFTER
        events.append(ValueDone(path, value))
        events.append(Done(value))
        self._value = value
        self._done = True
        return _TRAILING

    # -- messages ------------------------------------------------------------------------

    def _where(self) -> str:
        if not self._stack:
            return "at the top level"
        frame = self._stack[-1]
        if not frame[1]:
            return f"inside the top-level {'object' if frame[3] else 'array'}"
        return f"inside {format_json_path(frame[1])}"

    def _malformed(self, expected: str, at: int, got: str, note: str = "") -> ModelOutputError:
        message = (
            f"malformed JSON from the model: expected {expected} at offset {at}"
            f" ({self._where()}), got {got}"
        )
        return ModelOutputError(f"{message} {note}" if note else message)

    def _error(self, expected: str, text: str, j: int, note: str = "") -> ModelOutputError:
        return self._malformed(expected, self._offset + j, repr(text[j]), note)

    def _truncation_message(self) -> str:
        at = self._offset
        if self._state == _NOISE:
            return (
                f"no JSON object or array in the model output ({at} characters read):"
                " expected a '{' or '['"
            )
        if self._state in (_STRING, _ESCAPE) and not self._string_is_key:
            inside = f"inside the string at {format_json_path(self._value_path)}"
        elif self._state == _LITERAL:
            inside = f"in {self._lit_word!r} at {format_json_path(self._value_path)}"
        else:
            inside = self._where()
        open_count = len(self._stack)
        if open_count == 0:
            what = "expected a complete value"
        elif open_count == 1:
            what = "1 container still open"
        else:
            what = f"{open_count} containers still open"
        return (
            f"the JSON from the model ended early at offset {at}: {what} ({inside});"
            " the output was probably cut off (raise the token limit or retry)"
        )
