"""What the planners that ask a chat model share: the model, and the settings of each
request."""

from __future__ import annotations

from typing import Any

from ..models import ChatModel, ChatRequest, ModelSettings, check_settings

__all__ = ["ChatPlanner"]


class ChatPlanner:
    """A planner that asks ``model`` once a round: the base of
    :class:`~toolloop.planners.StructuredPlanner` and
    :class:`~toolloop.planners.ToolCallingPlanner`, which document the arguments.

    Raises:
        ValueError: an unknown model setting (``owner`` names the planner that was given
            it).
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        owner: str,
        max_tokens: int | None,
        temperature: float | None,
        system_prompt: str,
        max_result_chars: int | None,
        settings: ModelSettings | None,
    ) -> None:
        self.model = model
        self.settings: ModelSettings = check_settings(settings, owner)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.system_prompt = system_prompt
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
