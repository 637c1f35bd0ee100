"""Reading what models send: the incremental JSON reader for streamed structured output."""

from __future__ import annotations

from ._json_reader import Done as Done
from ._json_reader import JSONEvent as JSONEvent
from ._json_reader import JSONPath as JSONPath
from ._json_reader import JSONStreamReader as JSONStreamReader
from ._json_reader import StringDelta as StringDelta
from ._json_reader import ValueDone as ValueDone
from ._json_reader import format_json_path as format_json_path
from ._json_reader import remaining_choices as remaining_choices
from ._json_reader import settle_choice as settle_choice

__all__ = [
    "Done",
    "JSONEvent",
    "JSONPath",
    "JSONStreamReader",
    "StringDelta",
    "ValueDone",
    "format_json_path",
    "remaining_choices",
    "settle_choice",
]
