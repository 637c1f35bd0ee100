"""Model settings: the common OpenAI chat settings, typed, given to a model or to one call.

A model's own settings (``OpenAIChatModel(settings=...)``) apply to every call; a request's
(``ChatRequest.settings``, or the ``settings=`` of a planner or of the final answer) override
them key by key, and ``extra_body`` dictionaries are merged the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

__all__ = ["ModelSettings", "check_settings", "merge_settings"]


class ModelSettings(TypedDict, total=False):
    """The settings of a chat completion, all optional (the server's default when absent).

    ``extra_body`` is merged into the request's JSON as it is, for what a server takes
    beyond these (e.g. vLLM's ``top_k``, llama.cpp's ``min_p``).
    """

    max_tokens: int
    """The reply's length limit in tokens."""
    temperature: float
    top_p: float
    seed: int
    stop: str | list[str]
    presence_penalty: float
    frequency_penalty: float
    logit_bias: dict[str, int]
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
    parallel_tool_calls: bool
    user: str
    extra_body: dict[str, Any]
    """Sent as it is in the request's JSON body."""


_KNOWN = frozenset(ModelSettings.__annotations__)


def check_settings(settings: Mapping[str, Any] | None, owner: str) -> ModelSettings:
    """``settings`` as a :class:`ModelSettings` (a copy), or a ``ValueError`` that names
    every unknown key.

    Raises:
        ValueError: a key that is not a setting (a typo, or a parameter that belongs in
            ``extra_body``).
    """
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise TypeError(f"{owner}: settings must be a dict, got {type(settings).__name__}")
    unknown = sorted(str(key) for key in settings if key not in _KNOWN)
    if unknown:
        raise ValueError(
            f"{owner}: unknown model settings {unknown}; the settings are {sorted(_KNOWN)} "
            "(put anything else in 'extra_body')"
        )
    extra = settings.get("extra_body")
    if extra is not None and not isinstance(extra, Mapping):
        raise TypeError(f"{owner}: extra_body must be a dict, got {type(extra).__name__}")
    return dict(settings)  # type: ignore[return-value]  # its keys were just checked


def merge_settings(*layers: Mapping[str, Any] | None) -> ModelSettings:
    """The settings of ``layers``, later ones winning key by key (``extra_body`` merged)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if not layer:
            continue
        for key, value in layer.items():
            if key == "extra_body" and isinstance(merged.get(key), dict) and value:
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged  # type: ignore[return-value]  # made of ModelSettings
