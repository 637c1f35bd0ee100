"""What the planners that ask a chat model share: the model, and the settings of each
request."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from ..models import ChatModel, ChatRequest, ModelSettings, check_settings

__all__ = ["ChatPlanner", "ChatPlannerOptions"]


class ChatPlannerOptions(TypedDict, total=False):
    """The options both chat planners take (``**options`` of
    :class:`~toolloop.planners.StructuredPlanner` and
    :class:`~toolloop.planners.ToolCallingPlanner`, which say what each does), with their
    defaults."""

    max_tokens: int | None
    """The model's output limit per round (1024)."""
    temperature: float | None
    """Passed to the model (0.0)."""
    system_prompt: str
    """Replaces the planner's built-in instructions."""
    max_result_chars: int | None
    """Tool results longer than this are cut in the prompt (``None``: the run's)."""
    settings: ModelSettings | None
    """More model settings for each request (``None``)."""


class ChatPlanner:
    """A planner that asks ``model`` once a round: the base of
    :class:`~toolloop.planners.StructuredPlanner` and
    :class:`~toolloop.planners.ToolCallingPlanner`, which document the arguments. The
    defaults of their shared options (:class:`ChatPlannerOptions`) are the ones here;
    ``default_prompt`` is the planner's built-in instructions.

    Raises:
        ValueError: an unknown model setting (``owner`` names the planner that was given
            it).
    """

    def __init__(
        self,
        model: ChatModel,
        owner: str,
        default_prompt: str,
        /,
        *,
        max_tokens: int | None = 1024,
        temperature: float | None = 0.0,
        system_prompt: str | None = None,
        max_result_chars: int | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        self.model = model
        self.settings: ModelSettings = check_settings(settings, owner)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.system_prompt = default_prompt if system_prompt is None else system_prompt
        self.max_result_chars = max_result_chars

    def _request(self, messages: list[dict[str, Any]], **fields: Any) -> ChatRequest:
        """A request of ``messages`` (and the other ``fields`` of a
        :class:`~toolloop.models.ChatRequest`) with this planner's token limit, temperature
        and settings."""
        return ChatRequest(
            messages=messages,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            settings=self.settings or None,
            **fields,
        )

    def _token_limit(self) -> int | None:
        """The token limit of each reply: the settings' ``max_tokens``, else ``max_tokens``."""
        return self.settings.get("max_tokens", self.max_tokens)
