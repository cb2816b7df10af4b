"""Turning pydantic's validation errors into ``Problem``s a user can act on.

Each error is placed on the line of the deepest value its location reaches, its message is
shortened (``must be >= 1``), and an unknown key or value gets a "did you mean" from ``difflib``.
"""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .._suggest import did_you_mean
from .._urls import redact_url
from ._document import Node
from ._errors import Problem

__all__ = ["describe_error", "validate_node"]

M = TypeVar("M", bound=BaseModel)

_BOUNDS = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "less_than": "must be < {lt}",
}
_MAPPING = "a mapping (key: value)"
_WANTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": _MAPPING,
    "model_type": _MAPPING,
    "model_attributes_type": _MAPPING,
}


def validate_node(model: type[M], node: Node) -> tuple[M | None, list[Problem]]:
    """Validate ``node``'s data against ``model``. An error on a value whose problem the parser
    already reported (an unresolved placeholder, a forbidden tag) is left out."""
    try:
        return model.model_validate(node.plain()), []
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = err["loc"][:-1] if err["loc"][-1:] == ("[key]",) else err["loc"]
            if not node.reported_along(loc):
                problems.append(node.problem(describe_error(err, model), loc))
        return None, problems


def describe_error(err: ErrorDetails, model: type[BaseModel]) -> str:
    """One pydantic error about a value of ``model``, in a few words a user can act on."""
    kind, ctx, got = err["type"], err.get("ctx", {}), err.get("input")
    loc = err["loc"]
    if kind == "extra_forbidden":
        keys = _keys_at(model, loc[:-1])
        hint = did_you_mean(loc[-1], keys)
        if hint or not keys:
            return "unknown key" + hint
        return f"unknown key; allowed keys: {', '.join(keys)}"
    if kind == "invalid_key" or loc[-1:] == ("[key]",):
        return f"keys must be strings, got {_show(got)}"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", ctx.get("expected", ""))
        what = "grouping type" if loc[-2:] == ("grouping", "type") else "value"
        return f"unknown {what} {got!r}{did_you_mean(got, choices)}; one of: {', '.join(choices)}"
    if kind in _BOUNDS:
        bounds = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
        return _BOUNDS[kind].format(**bounds) + f", got {_show(got)}"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} item(s)"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in _WANTED:
        return f"must be {_WANTED[kind]}, got {_show(got)}"
    return err["msg"].removeprefix("Value error, ")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = redact_url(repr(value))  # a URL given in the wrong place keeps its secret
    return text if len(text) <= 40 else text[:37] + "..."


def _keys_at(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The keys the model allows at ``loc`` (list indexes are stepped over)."""
    current: Any = model
    for key in loc:
        if isinstance(key, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next((f for name, f in current.model_fields.items() if key in (name, f.alias)), None)
        if field is None:
            return []
        current = _inner_model(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _inner_model(annotation: Any) -> Any:
    """``list[X]``, ``X | None``, ``dict[str, X]`` -> ``X`` (the first model found)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (list, dict, Union, types.UnionType):
        for arg in get_args(annotation):
            inner = _inner_model(arg)
            if inner is not None:
                return inner
    return None
