"""Model adapters: the chat-model seam, the OpenAI adapter, and the incremental JSON reader
for streamed structured output.

``OpenAIChatModel`` is imported on first use, so ``import toolloop`` does not load
``openai``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._chat import ChatDelta as ChatDelta
from ._chat import ChatModel as ChatModel
from ._chat import ChatRequest as ChatRequest
from ._chat import StructuredOutput as StructuredOutput
from ._chat import StructuredOutputMode as StructuredOutputMode
from ._chat import ToolCallDelta as ToolCallDelta
from ._json_events import Done as Done
from ._json_events import JSONEvent as JSONEvent
from ._json_events import JSONPath as JSONPath
from ._json_events import StringDelta as StringDelta
from ._json_events import ValueDone as ValueDone
from ._json_events import format_json_path as format_json_path
from ._json_events import remaining_choices as remaining_choices
from ._json_events import settle_choice as settle_choice
from ._json_reader import MAX_DEPTH as MAX_STREAM_DEPTH
from ._json_reader import JSONStreamReader as JSONStreamReader
from ._tool_calls import StreamedToolCall as StreamedToolCall
from ._tool_calls import ToolCallReader as ToolCallReader
from ._tool_calls import parse_tool_arguments as parse_tool_arguments

if TYPE_CHECKING:
    from ._openai import OpenAIChatModel as OpenAIChatModel

__all__ = [
    "MAX_STREAM_DEPTH",
    "ChatDelta",
    "ChatModel",
    "ChatRequest",
    "Done",
    "JSONEvent",
    "JSONPath",
    "JSONStreamReader",
    "OpenAIChatModel",
    "StreamedToolCall",
    "StringDelta",
    "StructuredOutput",
    "StructuredOutputMode",
    "ToolCallDelta",
    "ToolCallReader",
    "ValueDone",
    "format_json_path",
    "parse_tool_arguments",
    "remaining_choices",
    "settle_choice",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from ._openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
