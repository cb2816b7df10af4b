"""The ``rayflow`` command: run, check, draw and describe topology files.

    rayflow run configs/wordcount.yaml --duration 20     # live table, then a summary
    rayflow validate configs/*.yaml                      # every problem, with file:line
    rayflow graph configs/wordcount.yaml -o wc.svg       # .svg/.png need Graphviz's dot
    rayflow schema > topology.schema.json                # for editors
    rayflow submit configs/wordcount.yaml --address HOST:PORT   # a Ray job: outlives the terminal
    rayflow list / activate NAME / deactivate NAME / kill NAME  # any topology on the cluster

Built on typer (arguments and help) and rich (tables, live refresh). The current directory is
put on ``sys.path`` so that classes like ``examples.wordcount.SentenceSpout`` import when the
command runs from the project root.

This module is the typer app and ``main`` (the console script ``rayflow`` and ``python -m
rayflow``); the rest of the command lives beside it, each concept in its own module:

* ``commands``: ``validate``, ``graph``, ``schema`` and ``run``, registered on the app here;
* ``detached``: ``submit``, ``list``, ``activate``, ``deactivate`` and ``kill`` (Storm's CLI);
* ``jobs``: the cluster's Ray Jobs API, where ``submit`` hands a topology file;
* ``arguments``: the arguments they share (FILE, ``--set``, ``--properties``) and loading a file;
* ``ray_connection``: a local Ray, or the cluster at ``--address`` (token authentication checks);
* ``monitor``: ``run``'s live table or progress lines, its clean stop and its summary;
* ``exit_codes``: ``run``'s exit codes (``ExitCode``), what each means and which one a run earns;
* ``progress``: the spinner or progress lines while something slow starts;
* ``console``: ``out`` and ``err``, where all of it is written.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from . import commands, console, detached
from .arguments import Command, Group
from .exit_codes import MEANING, ExitCode
from .monitor import flow_order

__all__ = ["MEANING", "ExitCode", "app", "flow_order", "main"]

app = typer.Typer(
    name="rayflow",
    cls=Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # paragraphs of the help reflow to the terminal's width
)


def _version() -> str:
    try:
        return version("rayflow")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


def _print_version(value: bool) -> None:
    """The version, and which build runs the hot loops: the C kernel or pure Python for the
    emits and a ``BasicBolt``'s run loop, the C ledger or the Python one for the acker."""
    if value:
        from .._acking.ledger_build import LEDGER_BUILD
        from .._executors.kernel import BUILD

        console.out.print(f"rayflow {_version()} ({BUILD}; {LEDGER_BUILD})", markup=False)
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print rayflow's version and build (C or pure Python).",
        ),
    ] = False,
) -> None:
    """Run Storm-style topologies described in YAML files on Ray."""


app.command(cls=Command)(commands.validate)
app.command(cls=Command)(commands.graph)
app.command(cls=Command)(commands.schema)
app.command(cls=Command, help=commands.RUN_HELP)(commands.run)
app.command(cls=Command, help=detached.SUBMIT_HELP)(detached.submit)
app.command("list", cls=Command, help=detached.LIST_HELP)(detached.list_topologies)
app.command(cls=Command, help=detached.ACTIVATE_HELP)(detached.activate)
app.command(cls=Command, help=detached.DEACTIVATE_HELP)(detached.deactivate)
app.command(cls=Command, help=detached.KILL_HELP)(detached.kill)


def main() -> None:
    """Console-script entry point."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app()
