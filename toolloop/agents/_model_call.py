"""The innermost model call: a :class:`ModelRequest` in, one streamed answer read, an
:class:`AssistantMessage` out.

The reply is read by :class:`~toolloop.models.ReplyReader`, as every product reads one:
tool-call pieces put together by ``index`` (ids empty in follow-up pieces continue their
call), reasoning, a refusal, the finish reason. Arguments that are not a JSON object make a
:class:`ToolCall` with an ``error``, which the agent answers without running the tool.

With streaming dispatch, each tool call is handed to the turn (its ``StreamedTurn``) the
moment it is complete in the stream (its arguments a whole JSON value, a later call
started, or the reply ended), which starts it while the model still writes; the reply
keeps the calls as they were handed over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from .._errors import ModelOutputError
from ..kernel import (
    ProviderStrategy,
    arguments_problem,
    is_cut,
    model_timeout_error,
    read_result_tool,
    result_handle,
    shown_result,
)
from ..models import (
    ChatRequest,
    ReplyReader,
    ReplyToolCall,
    StreamedToolCall,
    parse_tool_arguments,
    stream_chat,
)
from ..tools import Tool
from ._messages import AssistantMessage, Message, ToolCall, ToolMessage, new_id, to_openai
from ._middleware import ModelRequest, ModelResponse

if TYPE_CHECKING:
    from ._dispatch import StreamedTurn

__all__ = ["chat_request", "stream_model"]

_MAX_RAW = 2000


def _openai_tools(tools: list[Tool], cache: dict[int, list[dict[str, Any]]]) -> Any:
    if not tools:
        return None
    found = cache.get(id(tools))
    if found is None:
        found = [tool.openai_tool() for tool in tools]
    return found


def chat_request(
    request: ModelRequest, cache: dict[int, list[dict[str, Any]]] | None = None
) -> ChatRequest:
    """The provider-independent request for ``request``."""
    messages: list[dict[str, Any]] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    run = request.runtime._run
    limit = run.options.max_result_chars if run is not None else None
    offered = request.tools
    if limit is None:
        messages.extend(to_openai(m) for m in request.messages)
    elif _shown(request.messages, messages, limit) and not any(
        tool.name == _READ.name for tool in offered
    ):
        offered = [*offered, _READ]  # a result is cut: the model may read the rest
    structured = None
    strategy = request.response_format
    if isinstance(strategy, ProviderStrategy):
        structured = strategy.structured_output()
    settings = request.settings
    tools = _openai_tools(offered, cache or {})
    return ChatRequest(
        messages=messages,
        structured_output=structured,
        tools=tools,
        tool_choice=request.tool_choice if tools else None,
        max_tokens=settings.get("max_tokens"),
        temperature=settings.get("temperature"),
        extra=settings.get("extra") or {},
        settings=settings.get("model_settings") or None,
    )


_READ = read_result_tool()


def _shown(conversation: list[Message], messages: list[dict[str, Any]], limit: int) -> bool:
    """Append ``conversation`` to ``messages`` in the OpenAI format, each tool result
    longer than ``limit`` cut, with its handle (``"r:<tool_call_id>"``); whether one was."""
    cut = False
    for message in conversation:
        if (
            type(message) is ToolMessage
            and message.status == "success"
            and is_cut(message.content, limit, message.name)
        ):
            cut = True
            handle = result_handle(message.tool_call_id)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id,
                    "content": shown_result(message.content, handle, limit),
                }
            )
        else:
            messages.append(to_openai(message))
    return cut


def _tool_call(call: ReplyToolCall, seen: set[str]) -> ToolCall:
    call_id, name, text = call.id, call.name, call.arguments
    if not call_id or call_id in seen:
        call_id = new_id("call")
    seen.add(call_id)
    extra = dict(call.extra) if call.extra else None
    if not name:
        return ToolCall(
            id=call_id,
            name="",
            error="the call names no tool",
            raw_arguments=text[:_MAX_RAW],
            extra=extra,
        )
    args = parse_tool_arguments(text)
    problem = arguments_problem(args) if isinstance(args, dict) else None
    if isinstance(args, dict) and problem is None:
        return ToolCall.model_construct(
            id=call_id, name=name, args=args, error=None, raw_arguments=None, extra=extra
        )
    if problem is not None:  # never run, nor kept whole: the run's checkpoints read back
        error = f"tool {name!r} was not run: {problem}"
    elif isinstance(args, str):
        shown = args if len(args) <= 200 else args[:200] + "..."
        error = f"the arguments are not valid JSON: {shown!r}"
    else:
        error = f"the arguments must be a JSON object, got {type(args).__name__}"
    return ToolCall(id=call_id, name=name, error=error, raw_arguments=text[:_MAX_RAW], extra=extra)


def _offer(
    turn: StreamedTurn, calls: list[StreamedToolCall], start: int, end: int, seen: set[str]
) -> int:
    """Hand the complete calls ``start`` to ``end`` of the reply to ``turn``."""
    for position in range(start, end):
        call = calls[position]
        reply = ReplyToolCall(call.id, call.name, "".join(call.arguments), call.extra)
        turn.offer(position, _tool_call(reply, seen))
    return end


async def stream_model(
    request: ModelRequest,
    *,
    timeout: float | None,
    cache: dict[int, list[dict[str, Any]]] | None = None,
    dispatch: StreamedTurn | None = None,
) -> ModelResponse:
    """Call the model once and read its whole answer, within ``timeout`` seconds; with
    ``dispatch``, each tool call is handed to it the moment it is complete (see the module
    docs).

    Raises:
        ModelCallError: the model could not be reached, answered an error, or took longer
            than ``timeout`` (whatever the model raised is chained).
        ModelOutputError: the reply has nothing in it: no text, no tool call, no refusal
            (an empty stream, or a reply the token limit cut off while it was reasoning).
    """
    chat = chat_request(request, cache)
    reader = ReplyReader()
    streamed = reader.tools
    seen: set[str] = set()
    offered = 0
    with anyio.move_on_after(timeout) as scope:
        async with stream_chat(request.model, chat) as deltas:
            async for delta in deltas:
                reader.feed(delta)
                if dispatch is not None and delta.tool_calls:
                    complete = streamed.complete()
                    if complete > offered:
                        offered = _offer(dispatch, streamed.calls, offered, complete, seen)
    if scope.cancelled_caught:
        assert timeout is not None
        raise model_timeout_error("the model's answer", timeout)
    reply = reader.reply()
    if reply.empty:
        raise ModelOutputError(reply.why_empty())
    if dispatch is None:
        calls = [_tool_call(call, seen) for call in reply.tool_calls]
    else:  # the reply ended: its last calls are complete
        _offer(dispatch, streamed.calls, offered, streamed.complete(ended=True), seen)
        calls = []
        for position, whole in enumerate(reply.tool_calls):
            call = dispatch.offered[position]
            extra = dict(whole.extra) if whole.extra else None
            if extra != call.extra:  # fields its server sent after the call was complete
                call = call.model_copy(update={"extra": extra})
            calls.append(call)
    message = AssistantMessage.model_construct(
        role="assistant",
        content=reply.text,
        tool_calls=calls,
        id=new_id(),
        reasoning=reply.reasoning,
        refusal=reply.refusal,
        finish_reason=reply.finish_reason,
        extra=dict(reply.extra) if reply.extra else None,
    )
    return ModelResponse(message)
