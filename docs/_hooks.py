"""The reference pages written from the code, and the build's check that they are current.

``reference/schema.md`` is written from the JSON Schema that ``rayflow schema`` prints (run as
that command, so the page is exactly what an editor is given) and from the attribute docstrings
of ``rayflow.Config``, which the schema does not carry. ``reference/connectors.md`` documents
every public module of ``rayflow.connectors`` (one per broker), so a new connector appears in
the reference when it is added. ``reference/cli.md`` is the ``--help`` of ``rayflow`` and of
each of its commands, as a terminal ``HELP_COLUMNS`` wide shows it.

The pages are files under ``docs/``, committed, so that their links work where the Markdown is
read on a forge as well as on the site. They are not edited by hand: ``python docs/_hooks.py``
writes them, and ``mkdocs build`` (through the ``on_pre_build`` hook) and ``tests/test_docs.py``
fail, naming the page and that command, when one differs from what the code gives.
"""

from __future__ import annotations

import ast
import inspect
import json
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
SCHEMA_PAGE = "reference/schema.md"
CONNECTORS_PAGE = "reference/connectors.md"
CLI_PAGE = "reference/cli.md"
HELP_COLUMNS = 80
"""The width of the CLI reference's help boxes: they fit the site's text column beside the
navigation (the page hides its table of contents for them) without scrolling sideways."""

GENERATED_BY = "<!-- Written by `python docs/_hooks.py` from the code: do not edit by hand. -->"

_INTRO = """\
# Topology file schema

Every key a topology file may hold, written from the JSON Schema that `rayflow schema` prints
(point your editor's YAML support at that output) and from the docstrings of `rayflow.Config`.
The guide to the format, with examples, placeholders and includes, is
[Topology files](../guides/topology-files.md); loading a file from Python is
[`rayflow.topology_file`](topology_file.md).

A key not listed is an error (`unknown key`, with a suggestion), except under `config`, where
keys rayflow does not know are handed to the components, as Storm does.
"""

Schema = dict[str, Any]


def generated_pages() -> dict[str, Callable[[], str]]:
    """Each generated page (its path under ``docs/``) and what writes its text."""
    return {
        SCHEMA_PAGE: lambda: schema_page(rayflow_schema()),
        CONNECTORS_PAGE: connectors_page,
        CLI_PAGE: cli_page,
    }


def stale_pages() -> list[str]:
    """The generated pages whose file under ``docs/`` is missing or differs from the code's."""
    stale = []
    for page, write in generated_pages().items():
        path = DOCS / page
        if not path.is_file() or path.read_text(encoding="utf-8") != write():
            stale.append(page)
    return stale


def on_pre_build(config: Any) -> None:
    """Stop the build if a generated page is out of date: the site would document other code."""
    from mkdocs.exceptions import PluginError

    stale = stale_pages()
    if stale:
        pages = ", ".join(f"docs/{page}" for page in stale)
        raise PluginError(f"{pages}: out of date with the code; run `python docs/_hooks.py` and commit the result")


def write_pages() -> list[str]:
    """Write every generated page; return those that changed."""
    changed = []
    for page, write in generated_pages().items():
        path = DOCS / page
        text = write()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(page)
    return changed


def cli_page() -> str:
    """``rayflow --help``, then ``rayflow COMMAND --help`` for every command, in the app's order."""
    import typer
    from typer.testing import CliRunner

    from rayflow._cli import app

    commands = list(getattr(typer.main.get_command(app), "commands", {}))
    runner = CliRunner()
    env = {"COLUMNS": str(HELP_COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}
    parts = [
        "---",
        "hide:",
        "  - toc",
        "---",
        "",
        GENERATED_BY,
        "",
        "# Command-line reference",
        "",
        f"What `rayflow --help` and `rayflow COMMAND --help` print in a terminal {HELP_COLUMNS} columns wide.",
        "The guide to the command is [The rayflow command](../guides/cli.md). The commands:",
        " ".join(f"[{name}](#rayflow-{name})" for name in commands) + ".",
        "",
    ]
    for args in [[], *([name] for name in commands)]:
        result = runner.invoke(app, [*args, "--help"], env=env, terminal_width=HELP_COLUMNS)
        if result.exit_code != 0:
            raise RuntimeError(f"rayflow {' '.join(args)} --help exited {result.exit_code}: {result.output}")
        help_text = "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")
        parts += [f"## rayflow {' '.join(args)}".rstrip(), "", "```text", help_text, "```", ""]
    return "\n".join(parts)


def connectors_page() -> str:
    """The reference of ``rayflow.connectors``: the package, then each public connector module."""
    import rayflow.connectors

    modules = sorted(
        info.name for info in pkgutil.iter_modules(rayflow.connectors.__path__) if not info.name.startswith("_")
    )
    lines = [
        GENERATED_BY,
        "",
        "# `rayflow.connectors`",
        "",
        "Spouts that read brokers and acknowledge a message to the broker only when its tuple tree",
        "completes. Import each from its module (each needs its own extra); what they promise, broker",
        "by broker, is in [Brokers](../brokers.md).",
        "",
        "::: rayflow.connectors",
        "    options:",
        "      show_root_heading: false",
        "",
    ]
    lines += [f"::: rayflow.connectors.{name}\n" for name in modules]
    return "\n".join(lines)


def rayflow_schema() -> Schema:
    """What ``rayflow schema`` prints, parsed."""
    out = subprocess.run(
        [sys.executable, "-m", "rayflow", "schema"], capture_output=True, text=True, check=True, timeout=120
    )
    schema: Schema = json.loads(out.stdout)
    return schema


def schema_page(schema: Schema) -> str:
    """The page: the top level, each definition, then the config keys."""
    definitions: dict[str, Schema] = schema.get("$defs", {})
    parts = [GENERATED_BY + "\n\n" + _INTRO, _section("The file", schema)]
    parts += [_section(name, definition) for name, definition in definitions.items()]
    config = schema["properties"]["config"]
    parts.append(_config_section(config))
    return "\n".join(parts)


def _section(title: str, schema: Schema) -> str:
    """A heading whose anchor is its title in lower case (``#windowspec``): the same on the
    site and on a forge, so it needs no ``{ #id }`` that a forge would show."""
    lines = [f"## {title}", ""]
    if "description" in schema:
        lines += [_markdown(schema["description"]), ""]
    lines += _property_table(schema)
    return "\n".join(lines) + "\n"


def _property_table(schema: Schema) -> list[str]:
    required = set(schema.get("required", []))
    rows = ["| key | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
    for key, prop in schema.get("properties", {}).items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        description = _markdown(prop.get("description", ""))
        if key == "config":
            description = (description + "; " if description else "") + "see [config keys](#config-keys)"
        rows.append(
            f"| `{key}` | {_type(prop)} | {'yes' if key in required else ''} | {default} | {_cell(description)} |"
        )
    return rows


def _type(prop: Schema) -> str:
    """A property's type in words: ``integer >= 1``, ``list of StreamSpec``, ``one of ...``."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        kinds = [_type(option) for option in prop["anyOf"] if option.get("type") != "null"]
        optional = any(option.get("type") == "null" for option in prop["anyOf"])
        return " or ".join(kinds) + (" or null" if optional else "")
    if "enum" in prop:
        return "one of " + ", ".join(f"`{value}`" for value in prop["enum"])
    kind = str(prop.get("type", "any"))
    if kind == "string" and "minLength" in prop:
        return "non-empty string"
    if kind == "array":
        items = prop.get("items", {})
        return f"list of {_type(items)}" if items else "list"
    if kind == "object":
        return "mapping" if prop.get("title") != "Config" else "[mapping of config keys](#config-keys)"
    return kind + _bounds(prop)


def _bounds(prop: Schema) -> str:
    bounds = []
    if "minimum" in prop:
        bounds.append(f">= {prop['minimum']}")
    if "exclusiveMinimum" in prop:
        bounds.append(f"> {prop['exclusiveMinimum']}")
    if "minItems" in prop:
        bounds.append(f"at least {prop['minItems']}")
    return (" " + ", ".join(bounds)) if bounds else ""


def _config_section(config: Schema) -> str:
    """The keys of ``config`` (topology-wide and per component), with ``rayflow.Config``'s
    docstrings for each field."""
    from rayflow import Config

    docs = _field_docstrings(Config)
    by_alias = {field.alias or name: name for name, field in Config.model_fields.items()}
    lines = [
        "## Config keys",
        "",
        "The keys of `config`, at the top of the file (topology-wide) and in a component entry (that "
        "component only). Each is a field of `rayflow.Config`: write either Storm's dotted key or the "
        "field name.",
        "",
        "| key | field | type | default | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, prop in config.get("properties", {}).items():
        field = by_alias.get(key, key)
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        lines.append(f"| `{key}` | `{field}` | {_type(prop)} | {default} | {_cell(_markdown(docs.get(field, '')))} |")
    return "\n".join(lines) + "\n"


def _field_docstrings(cls: type) -> dict[str, str]:
    """The docstring under each annotated attribute of ``cls`` (PEP 257 attribute docstrings)."""
    tree = ast.parse(inspect.getsource(cls).lstrip())
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    found: dict[str, str] = {}
    for statement, following in zip(body, body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


def _markdown(text: str) -> str:
    """Docstring markup (reStructuredText's double backticks) as Markdown."""
    return text.replace("``", "`")


def _cell(text: str) -> str:
    """Text that fits in one table cell."""
    return " ".join(text.split()).replace("|", "\\|")


if __name__ == "__main__":
    for changed in write_pages():
        print(f"wrote docs/{changed}")
