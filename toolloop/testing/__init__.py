"""Public test doubles for toolloop and for code built on it.

`ScriptedPlanner` answers the tool loop's planner calls from a script.
`ScriptedChatModel` is a chat model (the `toolloop.models.ChatModel` seam) that answers from
a script, offline, and records what its consumers read.
`FakeOpenAIServer` is a local OpenAI-compatible HTTP server that the real `openai` client
talks to, with scripted (optionally streamed) replies and a record of what happened.
`replay` runs a recorded run (a trace) again through today's code, the model's replies and
the tools' results taken from the record (a trace, or a durable run in its store:
`StoredRun`), and raises `ReplayMismatch` (a diff, turn by
turn) where the code now does something else; `Replay`, `ReplayModel` and `Recording` are
its parts.
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
from ._recording import RecordedEnd as RecordedEnd
from ._recording import RecordedModelCall as RecordedModelCall
from ._recording import RecordedToolCall as RecordedToolCall
from ._recording import Recording as Recording
from ._replay import Replay as Replay
from ._replay import ReplaySettings as ReplaySettings
from ._replay import replay as replay
from ._replay_compare import CompareRequests as CompareRequests
from ._replay_diff import ReplayError as ReplayError
from ._replay_diff import ReplayMismatch as ReplayMismatch
from ._replay_model import ReplayModel as ReplayModel
from ._replay_store import StoredRun as StoredRun
from ._scripted import ScriptedPlanner as ScriptedPlanner

__all__ = [
    "CompareRequests",
    "FakeErrorReply",
    "FakeOpenAIServer",
    "FakeRawReply",
    "FakeReply",
    "FakeToolCall",
    "ManualClock",
    "RecordedEnd",
    "RecordedModelCall",
    "RecordedRequest",
    "RecordedToolCall",
    "Recording",
    "Replay",
    "ReplayError",
    "ReplayMismatch",
    "ReplayModel",
    "ReplaySettings",
    "Responder",
    "ScriptedChatModel",
    "ScriptedChatReply",
    "ScriptedChatStream",
    "ScriptedPlanner",
    "StoredRun",
    "StreamRecord",
    "replay",
]
