"""From a typed Python function to a tool's name, description, schema and argument converter.

The parameters become one pydantic model (``extra="forbid"``), whose JSON schema is the
tool's ``parameters`` and which converts checked JSON arguments into the Python values the
function declares (``3`` for an ``int``, a model instance for a model parameter).
Descriptions come from the docstring: its first paragraph describes the tool, the entries
of a Google-style ``Args:`` section describe the parameters.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pydantic
from pydantic.fields import FieldInfo

from .._errors import ToolArgumentsError, ToolDefinitionError
from ._context import is_run_context
from ._schema import describe_value, format_path

__all__ = [
    "FunctionSignature",
    "context_parameter_of",
    "describe_pydantic_error",
    "explicit_signature",
    "inspect_function",
    "parse_docstring",
]

_SECTION = re.compile(r"^([A-Z][A-Za-z ]*):\s*$")
_ARGS_SECTIONS = frozenset(
    {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
)
_ENTRY = re.compile(r"^\*{0,2}([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class FunctionSignature:
    """What a typed function says about itself, ready to become a tool (an explicit tool
    says the same by hand: :func:`explicit_signature`)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None
    """JSON arguments (already schema-checked) → Python keyword arguments; ``None`` when
    the function takes no parameters."""
    is_async: bool
    context_parameter: str | None = None
    """The parameter annotated :class:`~toolloop.tools.RunContext`, filled in by the run
    (not in ``parameters``)."""
    kept: Mapping[str, type] | None = None
    """The parameters whose values ``convert`` passes on as they came when they are of
    exactly this type (``str``, ``int``, ...), when it does so for every argument of such
    values; ``None``: no such promise (``convert`` may build every argument anew)."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph and the ``Args:`` descriptions of a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    section_indent = entry_indent = 0
    current: str | None = None
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        indent = _indent(line)
        header = _SECTION.match(stripped)
        if in_args and (indent <= section_indent or (header and indent <= entry_indent)):
            in_args = False
        if not in_args:
            if header and header.group(1) in _ARGS_SECTIONS:
                # cleandoc leaves a first line unindented: its section owns what follows
                section_indent = -1 if number == 0 else indent
                in_args, entry_indent, current = True, -1, None
            continue
        if entry_indent < 0:
            entry_indent = indent
        entry = _ENTRY.match(stripped) if indent <= entry_indent else None
        if entry:
            current = entry.group(1)
            params[current] = entry.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return " ".join(summary), params


def _target(function: Callable[..., Any]) -> Callable[..., Any]:
    """The callable whose name and docstring describe ``function`` (partials unwrapped)."""
    while isinstance(function, functools.partial):
        function = function.func
    return function


def is_async_callable(function: Callable[..., Any]) -> bool:
    """Whether calling ``function`` returns a coroutine (functions, partials, objects)."""
    if inspect.iscoroutinefunction(function):
        return True
    call = getattr(function, "__call__", None)  # noqa: B004
    return call is not None and inspect.iscoroutinefunction(call)


def _has_description(annotation: Any) -> bool:
    if get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in get_args(annotation)[1:])


def _strip_titles(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop the titles pydantic derives from names (the model's and each parameter's)."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def inspect_function(
    function: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> FunctionSignature:
    """Read a typed function's signature and docstring; raise ToolDefinitionError if unusable."""
    target = _target(function)
    fn_name = name or getattr(target, "__name__", None)
    if not isinstance(fn_name, str) or not fn_name:
        raise ToolDefinitionError(
            f"cannot name a tool for {function!r}: it has no __name__; pass name='...'"
        )
    label = f"tool {fn_name!r} (function {getattr(target, '__qualname__', fn_name)})"
    try:
        signature = inspect.signature(function, eval_str=True)
    except (NameError, TypeError, SyntaxError) as exc:
        raise ToolDefinitionError(
            f"cannot read the type hints of {label}: {exc}; every parameter type must be "
            "importable from the function's module (define it at module level)"
        ) from exc
    except ValueError as exc:
        raise ToolDefinitionError(f"cannot read the signature of {label}: {exc}") from exc
    summary, param_docs = parse_docstring(inspect.getdoc(target))

    fields: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    unchanged: dict[str, Callable[[Any], bool] | None] = {}
    exact: dict[str, type] = {}  # the parameters of a plain type (str, int, ...): which
    context: str | None = None
    for index, param in enumerate(signature.parameters.values()):
        if param.kind is not param.VAR_KEYWORD and is_run_context(param.annotation):
            if context is not None:
                raise ToolDefinitionError(
                    f"{label} has two RunContext parameters ({context!r} and "
                    f"{param.name!r}); a tool receives one: drop one of them"
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise ToolDefinitionError(
                    f"{label}: the RunContext parameter {param.name!r} is positional-only; "
                    "the run passes it by name: remove the '/' from its signature"
                )
            context = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"{label} takes {stars}{param.name}; a tool's arguments must be named and "
                f"typed: replace {stars}{param.name} with explicit typed parameters, or build "
                "the tool explicitly with Tool(name=..., description=..., parameters={...}, "
                "function=...)"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"{label} has the positional-only parameter {param.name!r}; tools are called "
                "with keyword arguments: remove the '/' from its signature"
            )
        if param.annotation is param.empty:
            raise ToolDefinitionError(
                f"{label} has no type annotation for parameter {param.name!r}; annotate it "
                f"(e.g. '{param.name}: str') so that its JSON schema can be generated"
            )
        field_args: dict[str, Any] = {"alias": param.name}
        if param.name in param_docs and not _has_description(param.annotation):
            field_args["description"] = param_docs[param.name]
        if param.default is not param.empty:
            field_args["default"] = param.default
        key = f"p{index}"
        fields[key] = (param.annotation, pydantic.Field(**field_args))
        aliases[key] = param.name
        unchanged[param.name] = _unchanged_check(param.annotation)
        if param.annotation in _PLAIN:
            exact[param.name] = param.annotation

    model = _build_model(fn_name, label, fields, signature)
    parameters = _strip_titles(model.model_json_schema())
    # every parameter of a plain type: values of exactly those types are passed as they came
    kept = exact if all(check is not None for check in unchanged.values()) else None
    convert = (
        None if not fields else _converter(model, aliases, unchanged, kept, f"tool {fn_name!r}")
    )
    return FunctionSignature(
        name=fn_name,
        description=summary if description is None else description,
        parameters=parameters,
        convert=convert,
        is_async=is_async_callable(function),
        context_parameter=context,
        kept=kept,
    )


def explicit_signature(
    name: str, description: str, parameters: Mapping[str, Any], function: Callable[..., Any]
) -> FunctionSignature:
    """What an explicit tool says of itself: its schema as given, to which the function
    answers with the JSON arguments as they come (unchecked yet: the tool checks them)."""
    return FunctionSignature(
        name=name,
        description=description,
        parameters=parameters,
        convert=None,
        is_async=is_async_callable(function),
        context_parameter=context_parameter_of(function) if callable(function) else None,
    )


def context_parameter_of(function: Callable[..., Any]) -> str | None:
    """The name of ``function``'s parameter annotated :class:`~toolloop.tools.RunContext`,
    if it has one (``None`` too when its signature cannot be read)."""
    try:
        signature = inspect.signature(function, eval_str=True)
    except Exception:  # no signature, or hints that cannot be resolved: no context
        return None
    for param in signature.parameters.values():
        if param.kind is not param.POSITIONAL_ONLY and is_run_context(param.annotation):
            return param.name
    return None


def _build_model(
    name: str, label: str, fields: dict[str, Any], signature: inspect.Signature
) -> type[pydantic.BaseModel]:
    config = pydantic.ConfigDict(extra="forbid")
    try:
        model: type[pydantic.BaseModel] = pydantic.create_model(
            f"{name}_arguments", __config__=config, **fields
        )
        model.model_json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        for param in signature.parameters.values():
            try:
                pydantic.TypeAdapter(param.annotation).json_schema()
            except Exception:  # find the parameter to name in the message
                raise ToolDefinitionError(
                    f"{label}: parameter {param.name!r} has the type {param.annotation!r}, "
                    "which has no JSON schema; use JSON-friendly types (str, int, float, "
                    "bool, list, dict, Literal, enums, pydantic models, dataclasses)"
                ) from exc
        raise ToolDefinitionError(f"{label}: cannot build its parameters schema: {exc}") from exc
    return model


def _converter(
    model: type[pydantic.BaseModel],
    aliases: dict[str, str],
    unchanged: dict[str, Callable[[Any], bool] | None],
    exact: dict[str, type] | None,
    owner: str,
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    validate = model.model_validate

    def convert(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            instance = validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                describe_pydantic_error(err) for err in exc.errors(include_url=False)
            )
            raise ToolArgumentsError(
                f"arguments for {owner} do not fit its parameters: {problems}"
            ) from exc
        values = instance.__dict__
        return {aliases[key]: values[key] for key in instance.model_fields_set}

    if exact is None:  # a parameter pydantic may build anew: it converts every call
        return convert
    checks: dict[str, Callable[[Any], bool]] = {k: c for k, c in unchanged.items() if c}

    def convert_fast(arguments: dict[str, Any]) -> dict[str, Any]:
        # Every parameter has a plain type (str, int, Optional[str], Literal[...]):
        # values of exactly those types are what pydantic would return, so skip it.
        for key, value in arguments.items():
            if type(value) is exact.get(key):  # its check's answer, without the call
                continue
            check = checks.get(key)
            if check is None or not check(value):
                return convert(arguments)
        return arguments

    return convert_fast


_PLAIN = (str, int, float, bool, type(None))


def _unchanged_check(annotation: Any) -> Callable[[Any], bool] | None:
    """A test for values pydantic would return unchanged for ``annotation``; None: no test.

    Only for plain types, where a value of exactly the declared type is returned as is.
    """
    if annotation is Any or annotation is object:
        return lambda value: True
    if annotation is None:
        annotation = type(None)
    if annotation in _PLAIN:
        return lambda value: type(value) is annotation
    origin = get_origin(annotation)
    if origin is Literal:
        kinds = {type(v) for v in get_args(annotation)}
        if kinds <= set(_PLAIN) - {float}:
            return lambda value: type(value) in kinds
        return None
    if origin is Union or origin is types.UnionType:
        members = [_unchanged_check(arg) for arg in get_args(annotation)]
        if any(m is None for m in members):
            return None
        tests = [m for m in members if m is not None]
        return lambda value: any(test(value) for test in tests)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        if all(isinstance(m, FieldInfo) and not m.metadata for m in metadata):
            return _unchanged_check(inner)
    return None


def describe_pydantic_error(error: Any) -> str:
    """One error of a pydantic ``ValidationError`` as a line: where, what, what came."""
    path = format_path([p for p in error["loc"] if isinstance(p, (str, int))])
    where = f"at {path!r}: " if path else ""
    return f"{where}{error['msg']}, got {describe_value(error.get('input'))}"
