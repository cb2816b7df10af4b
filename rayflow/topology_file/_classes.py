"""Finding and constructing the classes a topology file names.

The dotted path is the only code a file can reach: the module is imported, the class looked up,
checked to be of the right kind *before* it is called, and called with the file's arguments
only after they bind to its signature.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

from ._validation import did_you_mean

__all__ = ["ClassProblem", "construct", "import_class"]


class ClassProblem(Exception):
    """A class cannot be imported, is of the wrong kind, or cannot be constructed."""


def import_class(dotted: str) -> type:
    """The class at ``dotted`` (``package.module.Class``, or ``module.Outer.Inner``)."""
    parts = dotted.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise ClassProblem(f"{dotted!r} is not a dotted import path like 'package.module.Class'")
    missing: ModuleNotFoundError | None = None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                missing = missing or exc
                continue
            raise ClassProblem(f"cannot import {dotted}: importing {module_name} failed: {exc}") from None
        except Exception as exc:  # the module's own code failed
            raise ClassProblem(
                f"cannot import {dotted}: importing {module_name} raised {type(exc).__name__}: {exc}"
            ) from None
        return _lookup(module, module_name, parts[split:], dotted, missing)
    raise ClassProblem(f"cannot import {dotted}: {missing}{_path_hint(missing)}")


def _path_hint(missing: ModuleNotFoundError | None) -> str:
    """When the top-level package itself is missing, the usual cause is where rayflow runs:
    ``examples.wordcount`` imports from the project root, not from elsewhere."""
    if missing is None or not missing.name or "." in missing.name:
        return ""
    return (
        f" (hint: run from the project root, the directory that holds {missing.name!r}, or add that "
        f"directory to PYTHONPATH; the current directory is {os.getcwd()})"
    )


def _lookup(obj: Any, owner: str, names: list[str], dotted: str, missing: ModuleNotFoundError | None) -> type:
    for name in names:
        if not hasattr(obj, name):
            if missing is not None:
                raise ClassProblem(f"cannot import {dotted}: {missing}{_path_hint(missing)}")
            public = [n for n in dir(obj) if not n.startswith("_")]
            raise ClassProblem(f"cannot import {dotted}: no {name!r} in {owner}{did_you_mean(name, public)}")
        obj, owner = getattr(obj, name), f"{owner}.{name}"
    if not inspect.isclass(obj):
        raise ClassProblem(f"{dotted} is a {type(obj).__name__}, not a class")
    return obj


def construct(cls: type, args: list[Any], kwargs: dict[str, Any], dotted: str) -> Any:
    """``cls(*args, **kwargs)``, with a mismatch against the signature reported before the call."""
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as exc:
        raise ClassProblem(f"bad constructor arguments for {dotted}: {exc}") from None
    except ValueError:  # no signature to check against (some built-in types)
        pass
    try:
        return cls(*args, **kwargs)
    except Exception as exc:
        raise ClassProblem(f"constructing {dotted} raised {type(exc).__name__}: {exc}") from None
