"""The arguments the commands share (FILE, ``--set``, ``--properties``), and loading a topology
file with them: its problems go to stderr, one per line, and exit 1. ``Group`` and ``Command``
are the click classes of the app and its commands: their help shows no type for a flag."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from .._urls import redact_url
from ..topology_file import LoadedTopology, SpecError, load_topology, read_properties
from . import console

__all__ = [
    "Command",
    "FileArg",
    "Group",
    "HostOpt",
    "InactiveOpt",
    "PortOpt",
    "PropertiesOpt",
    "SetOpt",
    "UiOpt",
    "load",
    "placeholders",
    "report",
]

FileArg = Annotated[Path, typer.Argument(metavar="FILE", help="Topology file (YAML or JSON).", show_default=False)]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Fill ${KEY} in the file; repeatable, wins over --properties."),
]
PropertiesOpt = Annotated[
    Path | None, typer.Option("--properties", metavar="FILE", help="A key=value file that fills ${key} placeholders.")
]
InactiveOpt = Annotated[bool, typer.Option("--inactive", help="Submit with the spouts deactivated.")]
UiOpt = Annotated[
    bool,
    typer.Option("--ui", help="Serve the topology's web page while it runs, with /metrics for Prometheus."),
]
PortOpt = Annotated[
    int | None,
    typer.Option(min=0, max=65535, metavar="N", help="The web page's port (with --ui); default: a free one."),
]
HostOpt = Annotated[
    str | None,
    typer.Option(
        metavar="HOST",
        help="The address the web page listens on (with --ui); default 127.0.0.1. Any other needs a token for "
        "the buttons in RAYFLOW_UI_TOKEN (the page asks for it).",
    ),
]


def _untyped_flags(params: list[Any]) -> list[Any]:
    """Typer's rich help gives every option a type column, ``<bool>`` for ``--help`` too; a flag
    takes no value, so its column is left empty. (``ctx`` below is typed ``Any``: its class,
    typer's vendored click ``Context``, is private to typer.)"""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class Group(TyperGroup):
    """The ``rayflow`` app: help without ``<bool>`` beside its flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


class Command(TyperCommand):
    """A ``rayflow`` command: help without ``<bool>`` beside its flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


def placeholders(sets: list[str] | None, file: Path | None) -> dict[str, str]:
    """The placeholders' values: the ``--properties`` file's, then each ``--set KEY=VALUE``."""
    props: dict[str, str] = {}
    if file is not None:
        try:
            props.update(read_properties(file))
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--properties") from None
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {redact_url(repr(item))}", param_hint="--set")
        props[key.strip()] = value
    return props


def report(exc: SpecError) -> None:
    """Every problem of a topology file on stderr, then how many."""
    for problem in exc.problems:
        console.err.print(str(problem), markup=False, soft_wrap=True)
    console.err.print(f"{len(exc.problems)} problem(s)", style="bold red")


def load(file: Path, sets: list[str] | None, properties_file: Path | None) -> LoadedTopology:
    """The topology in ``file``; or its problems reported and exit 1."""
    try:
        return load_topology(file, placeholders(sets, properties_file))
    except SpecError as exc:
        report(exc)
        raise typer.Exit(1) from None
