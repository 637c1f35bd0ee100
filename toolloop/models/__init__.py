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
from ._chat import ReasoningField as ReasoningField
from ._chat import StructuredOutput as StructuredOutput
from ._chat import StructuredOutputMode as StructuredOutputMode
from ._chat import ToolCallDelta as ToolCallDelta
from ._decision import DecisionReader as DecisionReader
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
from ._reply import ChatReply as ChatReply
from ._reply import Reasoning as Reasoning
from ._reply import ReplyReader as ReplyReader
from ._reply import ReplyToolCall as ReplyToolCall
from ._reply import assistant_message as assistant_message
from ._settings import ModelSettings as ModelSettings
from ._settings import check_settings as check_settings
from ._tool_calls import StreamedToolCall as StreamedToolCall
from ._tool_calls import ToolCallReader as ToolCallReader
from ._tool_calls import parse_tool_arguments as parse_tool_arguments
from ._usage import NO_USAGE as NO_USAGE
from ._usage import CallObserver as CallObserver
from ._usage import FinishedCall as FinishedCall
from ._usage import Usage as Usage
from ._usage import UsageLimits as UsageLimits
from ._usage import UsageMeter as UsageMeter
from ._usage import current_meter as current_meter
from ._usage import stream_chat as stream_chat

if TYPE_CHECKING:
    from ._openai import OpenAIChatModel as OpenAIChatModel

__all__ = [
    "MAX_STREAM_DEPTH",
    "NO_USAGE",
    "CallObserver",
    "ChatDelta",
    "ChatModel",
    "ChatReply",
    "ChatRequest",
    "DecisionReader",
    "Done",
    "FinishedCall",
    "JSONEvent",
    "JSONPath",
    "JSONStreamReader",
    "ModelSettings",
    "OpenAIChatModel",
    "Reasoning",
    "ReasoningField",
    "ReplyReader",
    "ReplyToolCall",
    "StreamedToolCall",
    "StringDelta",
    "StructuredOutput",
    "StructuredOutputMode",
    "ToolCallDelta",
    "ToolCallReader",
    "Usage",
    "UsageLimits",
    "UsageMeter",
    "ValueDone",
    "assistant_message",
    "check_settings",
    "current_meter",
    "format_json_path",
    "parse_tool_arguments",
    "remaining_choices",
    "settle_choice",
    "stream_chat",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIChatModel":
        from ._openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
