"""MkDocs hooks: the pages generated from the code at build time, so that they cannot drift from it.

``reference/topology-file.md`` is written from the JSON Schema that ``rayflow schema`` prints (run
as that command, so the page is exactly what an editor is given) and from the attribute
docstrings of ``rayflow.Config``, which the schema does not carry. ``reference/connectors.md``
documents every public module of ``rayflow.connectors`` (one per broker), so a new connector
appears in the reference when it is added. ``reference/cli.md`` is the ``--help`` of ``rayflow``
and of each of its commands, as a terminal 100 columns wide shows it. These pages exist only in the build: there are no
files under ``docs/`` to edit by hand.
"""

from __future__ import annotations

import ast
import inspect
import json
import pkgutil
import subprocess
import sys
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

SCHEMA_PAGE = "reference/topology-file.md"
CONNECTORS_PAGE = "reference/connectors.md"
CLI_PAGE = "reference/cli.md"
HELP_COLUMNS = 100

_INTRO = """\
# Topology file schema

Every key a topology file may hold, generated when the docs are built from the JSON Schema that
`rayflow schema` prints (point your editor's YAML support at that output) and from the
docstrings of `rayflow.Config`. The guide to the format, with examples, placeholders and
includes, is [Topology files](../guides/topology-files.md).

A key not listed is an error (`unknown key`, with a suggestion), except under `config`, where
keys rayflow does not know are handed to the components, as Storm does.
"""

Schema = dict[str, Any]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the build."""
    files.append(File.generated(config, SCHEMA_PAGE, content=schema_page(rayflow_schema())))
    files.append(File.generated(config, CONNECTORS_PAGE, content=connectors_page()))
    files.append(File.generated(config, CLI_PAGE, content=cli_page()))
    return files


def cli_page() -> str:
    """``rayflow --help``, then ``rayflow COMMAND --help`` for every command, in the app's order."""
    import typer
    from typer.testing import CliRunner

    from rayflow._cli import app

    commands = list(getattr(typer.main.get_command(app), "commands", {}))
    runner = CliRunner()
    env = {"COLUMNS": str(HELP_COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}
    parts = [
        "# Command-line reference",
        "",
        "What `rayflow --help` and `rayflow COMMAND --help` print, generated when the docs are built.",
        "The guide to the command is [The rayflow command](../guides/cli.md).",
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
    parts = [_INTRO, _section("The file", schema, anchor="the-file")]
    parts += [_section(name, definition, anchor=name.lower()) for name, definition in definitions.items()]
    config = schema["properties"]["config"]
    parts.append(_config_section(config))
    return "\n".join(parts)


def _section(title: str, schema: Schema, *, anchor: str) -> str:
    lines = [f"## {title} {{ #{anchor} }}", ""]
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
        "## Config keys { #config-keys }",
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
