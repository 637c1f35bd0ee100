"""A decision a model streams as JSON, read as it comes: its choice, its items, and the
moment nothing that follows can change what is taken of it.

The loop's :class:`~toolloop.planners.StructuredPlanner` reads its plans with it
(``next_action``, the ``execution_commands``), and so does the status agent's model (a
decision's ``action`` and ``tool_calls``, a reflection's ``verdict``): a choice is settled
by the first characters that tell it, each item of a list is handed over the moment its
value closes (streaming dispatch), and a decision whose choice is settled and whose needed
fields are whole is *settled*: its reader closes the stream there (the short-circuit).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._json_events import remaining_choices, settle_choice
from ._json_reader import JSONStreamReader

if TYPE_CHECKING:
    from ._chat import ChatDelta
    from ._reply import ReplyReader

__all__ = ["DecisionReader"]

TRAILING_DELTAS = 8
"""Deltas read after a decision is whole before the stream is closed."""


class DecisionReader:
    """Reads a streamed JSON object whose ``choice`` key says what the model decided.

    Args:
        choice: the top-level key of the choice (a string), e.g. ``"next_action"``.
        choices: what it may be. It is settled the moment the characters streamed so far
            fit only one (``"r"`` settles ``"response"`` against ``"execute"``); a value
            that fits none leaves it unsettled (the whole reply is read).
        items: the top-level key of a list whose items :meth:`feed` hands over, each the
            moment its value closes, once the choice is settled as ``items_on`` (an item
            that closed before is not handed over: the whole reply has it).
        items_on: the choice whose items are handed over.
        needs: for each choice, the top-level keys whose values must be whole before the
            decision is :attr:`settled` (none: settled with the choice). A choice left out is
            never settled before the reply ends.

    Malformed JSON raises :class:`~toolloop.errors.ModelOutputError` (see
    :class:`JSONStreamReader`).

    Example:
        >>> reader = DecisionReader("next_action", ["execute", "response"],
        ...                         needs={"response": ()})
        >>> reader.feed('{"next_action": "r')
        []
        >>> reader.choice, reader.settled
        ('response', True)
    """

    __slots__ = (
        "_choice",
        "_choices",
        "_items",
        "_items_on",
        "_json",
        "_needs",
        "_prefix",
        "_watching",
        "choice",
        "fields",
        "settled",
    )

    def __init__(
        self,
        choice: str,
        choices: Sequence[str],
        *,
        items: str | None = None,
        items_on: str | None = None,
        needs: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        path = (choice,)
        self._json = JSONStreamReader(string_deltas=lambda at: at == path)
        self._choice = choice
        self._choices = tuple(choices)
        self._items = items
        self._items_on = items_on
        self._needs = dict(needs or {})
        self._prefix = ""
        self._watching = True  # the choice is neither settled nor known to fit none
        self.choice: str | None = None
        """The settled choice (``None``: not yet, or it fits none)."""
        self.fields: dict[str, Any] = {}
        """The top-level values that are whole so far, by key."""
        self.settled = False
        """The choice is settled and the values it needs are whole: what follows changes
        nothing taken of the decision."""

    async def text(
        self, deltas: AsyncIterable[ChatDelta], said: ReplyReader
    ) -> AsyncGenerator[str, None]:
        """The text of each delta of a streamed reply, to :meth:`feed` (each delta is fed
        to ``said`` as well), until the decision is :attr:`done`. Only the end of the
        stream should follow: it is read (so the connection is reused), and a model that
        goes on for more than a few deltas is cut off."""
        after_done = 0
        async for delta in deltas:
            said.feed(delta)
            if self.done:
                after_done += 1
                if after_done > TRAILING_DELTAS:
                    return
            elif delta.content:
                yield delta.content

    @property
    def done(self) -> bool:
        """The whole JSON object has been read."""
        return self._json.done

    @property
    def offset(self) -> int:
        """How many characters have been fed."""
        return self._json.offset

    @property
    def value(self) -> Any:
        """The whole object (see :attr:`JSONStreamReader.value`)."""
        return self._json.value

    def close(self) -> None:
        """The text has ended (see :meth:`JSONStreamReader.close`)."""
        self._json.close()

    def feed(self, text: str) -> list[tuple[int, Any]]:
        """Read the next piece of text: the items it closes, as ``(position, value)``.

        Raises:
            ModelOutputError: the text so far is not JSON.
        """
        out: list[tuple[int, Any]] = []
        key = self._choice
        for event in self._json.feed(text):
            if event.kind == "string_delta":
                if self._watching:
                    self._prefix += event.text
                    found = settle_choice(self._prefix, self._choices)
                    if found is not None:
                        self.choice = found
                        self._watching = False
                    elif not remaining_choices(self._prefix, self._choices):
                        self._watching = False  # none fits: the whole reply is read
            elif event.kind == "value_done":
                path = event.path
                if len(path) == 1:
                    if isinstance(path[0], str):
                        self.fields[path[0]] = event.value
                    if path[0] == key and self._watching:  # whole: only an exact match
                        self._watching = False
                        value = event.value
                        if isinstance(value, str):
                            self.choice = settle_choice(value, self._choices, complete=True)
                elif (
                    len(path) == 2
                    and path[0] == self._items
                    and isinstance(path[1], int)
                    and self.choice is not None
                    and self.choice == self._items_on
                ):
                    out.append((path[1], event.value))
        choice = self.choice
        if not self.settled and choice is not None:
            needed = self._needs.get(choice)
            if needed is not None and all(name in self.fields for name in needed):
                self.settled = True
        return out
