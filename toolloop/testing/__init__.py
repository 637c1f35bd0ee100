"""Public test doubles for toolloop and for code built on it.

`ScriptedPlanner` answers the tool loop's planner calls from a script.
`ScriptedChatModel` is a chat model (the `toolloop.models.ChatModel` seam) that answers from
a script, offline, and records what its consumers read.
`FakeOpenAIServer` is a local OpenAI-compatible HTTP server that the real `openai` client
talks to, with scripted (optionally streamed) replies and a record of what happened.
`ManualClock` is a clock a test moves by hand, for rate limits and retries.
"""

from __future__ import annotations

from ._chat_model import ScriptedChatModel as ScriptedChatModel
from ._chat_model import ScriptedChatReply as ScriptedChatReply
from ._chat_model import ScriptedChatStream as ScriptedChatStream
from ._clock import ManualClock as ManualClock
from ._openai_replies import FakeErrorReply as FakeErrorReply
from ._openai_replies import FakeRawReply as FakeRawReply
from ._openai_replies import FakeReply as FakeReply
from ._openai_replies import FakeToolCall as FakeToolCall
from ._openai_server import FakeOpenAIServer as FakeOpenAIServer
from ._openai_server import RecordedRequest as RecordedRequest
from ._openai_server import Responder as Responder
from ._openai_server import StreamRecord as StreamRecord
from ._scripted import ScriptedPlanner as ScriptedPlanner

__all__ = [
    "FakeErrorReply",
    "FakeOpenAIServer",
    "FakeRawReply",
    "FakeReply",
    "FakeToolCall",
    "ManualClock",
    "RecordedRequest",
    "Responder",
    "ScriptedChatModel",
    "ScriptedChatReply",
    "ScriptedChatStream",
    "ScriptedPlanner",
    "StreamRecord",
]
