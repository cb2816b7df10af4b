"""Finding and constructing the classes a topology file names.

The dotted path is the only code a file can reach: the module is imported, the class looked up,
checked to be of the right kind *before* it is called, and called with the file's arguments
only after they bind to its signature.
"""

from __future__ import annotations

import inspect
from typing import Any

from .._dotted import DottedPathError, resolve
from .._errors import RayflowError

__all__ = ["ClassProblem", "construct", "import_class"]


class ClassProblem(RayflowError):
    """A class cannot be imported, is of the wrong kind, or cannot be constructed."""


def import_class(dotted: str) -> type:
    """The class at ``dotted`` (``package.module.Class``, or ``module.Outer.Inner``)."""
    try:
        obj = resolve(dotted, "package.module.Class")
    except DottedPathError as exc:
        raise ClassProblem(str(exc)) from None
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
