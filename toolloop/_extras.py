"""The optional extras: a subpackage that needs one says which, the moment it is imported."""

from __future__ import annotations

import importlib

__all__ = ["require"]


def require(module: str, *, needs: str, extra: str) -> None:
    """Import ``module``, or raise an :class:`ImportError` that says what the importing
    subpackage ``needs`` and the ``pip install`` of the ``extra`` that brings it."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{needs}: pip install 'toolloop[{extra}]'") from exc
