"""``resolve``: the object at a dotted import path (``package.module.Class``,
``package.module.function``, ``module.Outer.Inner``), for everything a user names by a string --
topology files' classes and groupings, a ``DataFrameSink``'s ``foreach_batch``.

``pkgutil.resolve_name`` finds the same objects, but its errors do not tell a user what to fix:
a module that fails on one of *its own* imports reads as "no attribute", and a misspelt name
gets no suggestion. This walks the path the same way and says which part is wrong."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from ._errors import ConfigError
from ._suggest import did_you_mean

__all__ = ["DottedPathError", "resolve", "resolve_function"]


class DottedPathError(ConfigError):
    """A dotted path does not name an importable object."""


def resolve(dotted: str, example: str = "package.module.name") -> Any:
    """The object at ``dotted``: the longest importable module prefix, then attributes.

    A module that raises while it is imported is reported with its own error, not taken for a
    missing name; ``example`` is what a well-formed path looks like, for the message."""
    parts = dotted.split(".") if isinstance(dotted, str) else []
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise DottedPathError(f"{dotted!r} is not a dotted import path like {example!r}")
    missing: ModuleNotFoundError | None = None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Only a module on the path itself being absent means "try a shorter prefix"; a
            # missing import *inside* the module is the module's own failure.
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                missing = missing or exc
                continue
            raise DottedPathError(f"cannot import {dotted}: importing {module_name} failed: {exc}") from None
        except Exception as exc:  # the module's own code failed
            raise DottedPathError(
                f"cannot import {dotted}: importing {module_name} raised {type(exc).__name__}: {exc}"
            ) from None
        return _lookup(module, module_name, parts[split:], dotted, missing)
    raise DottedPathError(f"cannot import {dotted}: {missing}{_path_hint(missing)}")


def resolve_function(dotted: str) -> Callable[..., Any]:
    """The callable at ``package.module.function`` (or ``package.module.object``): what a
    ``DataFrameSink``'s ``foreach_batch`` names, resolved in its task and in the shared Spark."""
    obj = resolve(dotted, "package.module.function")
    if not callable(obj):
        raise DottedPathError(f"{dotted} is a {type(obj).__name__}, not a function")
    function: Callable[..., Any] = obj
    return function


def _path_hint(missing: ModuleNotFoundError | None) -> str:
    """When the top-level package itself is missing, the usual cause is where rayflow runs:
    ``examples.wordcount`` imports from the project root, not from elsewhere."""
    if missing is None or not missing.name or "." in missing.name:
        return ""
    return (
        f" (hint: run from the project root, the directory that holds {missing.name!r}, or add that "
        f"directory to PYTHONPATH; the current directory is {os.getcwd()})"
    )


def _lookup(obj: Any, owner: str, names: list[str], dotted: str, missing: ModuleNotFoundError | None) -> Any:
    for name in names:
        if not hasattr(obj, name):
            if missing is not None and missing.name == f"{owner}.{name}" and hasattr(obj, "__path__"):
                # A package without that submodule (not a module or class without that name).
                raise DottedPathError(f"cannot import {dotted}: {missing}{_path_hint(missing)}")
            public = [n for n in dir(obj) if not n.startswith("_")]
            raise DottedPathError(f"cannot import {dotted}: no {name!r} in {owner}{did_you_mean(name, public)}")
        obj, owner = getattr(obj, name), f"{owner}.{name}"
    return obj
