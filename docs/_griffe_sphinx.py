"""A griffe extension for the API reference: toolloop's docstrings speak a little reST.

The docstrings are Google style, but they name other objects with Sphinx roles
(``:class:`Flow```, ``:meth:`~toolloop.Tool.validate```) and introduce examples with
``::``. Markdown knows neither, so before mkdocstrings renders a docstring this extension

- turns each role into an autorefs link to the object's public page entry
  (``[Flow][toolloop.flow.Flow]``) when the object is part of the rendered API, and into plain
  code (`` `anyio.CapacityLimiter` ``) otherwise, so ``mkdocs build --strict`` never meets
  a link it cannot resolve;
- turns ``text::`` followed by an indented block into ``text:`` and a fenced code block.

Loaded by mkdocstrings (``extensions:`` in ``mkdocs.yml``); the code is not changed.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

import griffe

ROOT = "toolloop"
PUBLIC_MODULES = (
    "flow",
    "tools",
    "planners",
    "testing",
    "models",
    "agents",
    "agents.middleware",
    "checkpoints",
    "tracing",
    "cli",
    "mcp",
)
"""Rendered in the reference besides the top-level package; later ones do not override."""

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):`(~?)([\w.]+)(\(\))?`")
_LITERAL = re.compile(
    r"(?m)^(?P<lead>[^\n]*?)::[ \t]*\n(?P<blank>[ \t]*\n)+(?P<body>(?:[ \t]+\S[^\n]*\n|[ \t]*\n)+)"
)


def _lookup(package: griffe.Module, path: str) -> Any:
    """The object at the full dotted ``path`` (aliases followed), or ``None``."""
    if path == ROOT:
        return package
    if not path.startswith(f"{ROOT}."):
        return None
    try:
        found: Any = package[path[len(ROOT) + 1 :]]
        return found.final_target if found.is_alias else found
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _public_paths(package: griffe.Module) -> dict[str, str]:
    """Canonical path (``toolloop.flow._flow.Flow``) → the path it is rendered at."""
    paths: dict[str, str] = {}
    modules: list[griffe.Module] = [package]
    for name in PUBLIC_MODULES:
        member = _lookup(package, f"{ROOT}.{name}")
        if isinstance(member, griffe.Module):
            modules.append(member)
    for module in modules:
        paths.setdefault(module.path, module.path)
        for export in module.exports or ():
            name = str(export)
            target = _lookup(package, f"{module.path}.{name}")
            if target is None:
                continue
            public = f"{module.path}.{name}"
            paths.setdefault(target.path, public)
            if isinstance(target, griffe.Class):
                for attribute in target.members:
                    if not attribute.startswith("_"):
                        paths.setdefault(f"{target.path}.{attribute}", f"{public}.{attribute}")
    return paths


def _canonical(obj: griffe.Object, dotted: str, package: griffe.Module) -> str | None:
    """The canonical path of the name ``dotted``, as written in ``obj``'s docstring."""
    if dotted == ROOT or dotted.startswith(f"{ROOT}."):
        found = _lookup(package, dotted)
        return None if found is None else str(found.path)
    head, _, rest = dotted.partition(".")
    try:
        base = obj.resolve(head)  # the object's own members, its module's names, outwards
    except griffe.NameResolutionError:
        return None
    found = _lookup(package, base)
    if found is None:
        return None
    return f"{found.path}.{rest}" if rest else str(found.path)


def _fence(match: re.Match[str]) -> str:
    lead = match.group("lead").rstrip()
    body = textwrap.dedent(match.group("body")).strip("\n")
    try:
        ast.parse(body)
        language = "python"
    except SyntaxError:
        language = "text"
    indent = re.match(r"[ \t]*", lead)
    pad = indent.group(0) if indent else ""
    fenced = "\n".join(f"{pad}{line}" if line else "" for line in body.splitlines())
    colon = f"{lead}:\n\n" if lead.strip() else ""
    return f"{colon}{pad}```{language}\n{fenced}\n{pad}```\n\n"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles and ``::`` literal blocks in every docstring of the package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != ROOT:
            return
        public = _public_paths(pkg)
        for obj in _walk(pkg):
            docstring = obj.docstring
            if docstring is None:
                continue
            docstring.value = self._rewrite(obj, docstring.value, pkg, public)

    def _rewrite(
        self, obj: griffe.Object, text: str, package: griffe.Module, public: dict[str, str]
    ) -> str:
        def role(match: re.Match[str]) -> str:
            short, dotted, parens = match.group(1), match.group(2), match.group(3) or ""
            shown = (dotted.rsplit(".", 1)[-1] if short else dotted) + parens
            canonical = _canonical(obj, dotted.lstrip("."), package)
            target = public.get(canonical) if canonical else None
            return f"[`{shown}`][{target}]" if target else f"`{shown}`"

        text = _ROLE.sub(role, text)
        if not text.endswith("\n"):
            text += "\n"
        return _LITERAL.sub(_fence, text).rstrip("\n")


def _walk(obj: griffe.Object) -> list[griffe.Object]:
    found = [obj]
    for member in obj.members.values():
        if member.is_alias or not isinstance(member, griffe.Object):
            continue
        if member.name.startswith("__") and member.name != "__init__":
            continue
        found.extend(_walk(member))
    return found
