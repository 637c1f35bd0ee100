"""``module:attr`` on the command line: import it, and make tools (or a flow) of it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._errors import ToolloopError
from ..tools import Tool, ToolRegistry

__all__ = ["CLIError", "load_object", "load_tools"]


class CLIError(Exception):
    """A problem to tell the user in one line; ``code`` is the exit status (2: the command
    line was wrong, 1: the run failed)."""

    def __init__(self, message: str, *, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _import_file(path: Path, option: str) -> Any:
    if not path.is_file():
        raise CLIError(f"{option}: no file {str(path)!r}", code=2)
    name = f"_toolloop_cli_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        raise CLIError(f"{option}: cannot import {str(path)!r}", code=2)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CLIError(
            f"{option}: importing {str(path)!r} raised {type(exc).__name__}: {exc}", code=2
        ) from exc
    return module


def _import_module(name: str, option: str) -> Any:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # like `python -m`: modules of the current directory
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise CLIError(
                f"{option}: no module named {exc.name!r} (run from the directory that holds "
                "it, or install it)",
                code=2,
            ) from exc
        raise CLIError(
            f"{option}: importing {name!r} failed: no module named {exc.name!r}", code=2
        ) from exc
    except Exception as exc:
        raise CLIError(
            f"{option}: importing {name!r} raised {type(exc).__name__}: {exc}", code=2
        ) from exc


def load_object(spec: str, option: str) -> Any:
    """The object ``spec`` names: ``package.module:attr`` (``attr`` may be dotted), or
    ``path/to/file.py:attr``.

    Raises:
        CLIError: the spec is malformed, the module cannot be imported, or has no such
            attribute (exit status 2).
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr or not all(attr.split(".")):
        raise CLIError(
            f"{option} takes MODULE:ATTRIBUTE (e.g. myapp.tools:TOOLS or tools.py:TOOLS), "
            f"got {spec!r}",
            code=2,
        )
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        target = _import_file(Path(module_name), option)
    else:
        target = _import_module(module_name, option)
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CLIError(f"{option}: {module_name!r} has no attribute {attr!r}", code=2) from None
    return target


def _tools_of(value: Any, spec: str) -> list[Tool | Any]:
    if isinstance(value, ToolRegistry):
        return list(value)
    if isinstance(value, Tool) or (callable(value) and not isinstance(value, type)):
        return [value]
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        items = list(value)
        for item in items:
            if not (isinstance(item, Tool) or callable(item)):
                raise CLIError(
                    f"--tools {spec}: holds {item!r}, which is not a tool (a Tool or a function)",
                    code=2,
                )
        return items
    raise CLIError(
        f"--tools {spec}: is a {type(value).__name__}; expected a list of tools (functions "
        "or Tool objects), a ToolRegistry, a Tool or a function",
        code=2,
    )


def load_tools(specs: Sequence[str]) -> ToolRegistry:
    """One registry of every tool the ``--tools`` options name.

    Raises:
        CLIError: a spec cannot be loaded, is not tools, or two tools share a name.
    """
    tools: list[Any] = []
    for spec in specs:
        tools.extend(_tools_of(load_object(spec, "--tools"), spec))
    try:
        return ToolRegistry(tools)
    except ToolloopError as exc:
        raise CLIError(f"--tools: {exc}", code=2) from exc
