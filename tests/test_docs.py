"""The documentation cannot go stale: the site builds with warnings as errors, every Python example
marked runnable runs as a reader would paste it, the README's examples are copies of the docs',
and the broken topology file of the guide prints the problems the guide shows.

How a page marks its examples (an HTML comment on the line before the fence; ``docs/development.md``
explains it to writers):

    <!-- runnable -->              run in process, in one namespace per page, in page order
    <!-- runnable: ray -->         the same, on the session's Ray
    <!-- not runnable: why -->     shown only
    <!-- uses: PAGE -->            (a page's first line) PAGE's runnable examples run first

The build is marked ``docs`` (``-m "not docs"`` leaves it out); it needs the ``dev`` extra."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

WRITTEN_ELSEWHERE = {"security.md", "cluster.md", "brokers.md", "ui.md", "metrics.md", "detached.md"}
"""Pages whose writers mark their examples as they choose: their runnable examples run, but an
unmarked one is not an error there."""

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
_MARK = re.compile(r"^<!-- (?P<mark>.*?) -->[ \t]*$")
_USES = re.compile(r"\A<!-- uses: (?P<page>\S+) -->")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language, the comment on the line before it, its code."""

    page: str
    line: int
    lang: str
    attrs: str
    mark: str
    code: str

    @property
    def runnable(self) -> bool:
        return self.mark in ("runnable", "runnable: ray")

    @property
    def needs_ray(self) -> bool:
        return self.mark == "runnable: ray"


def page_text(page: str) -> str:
    return (README if page == "README.md" else DOCS / page).read_text(encoding="utf-8")


def blocks(page: str) -> list[Block]:
    text = page_text(page)
    found = []
    for fence in _FENCE.finditer(text):
        line = text.count("\n", 0, fence.start()) + 1
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.match(before)
        found.append(
            Block(
                page,
                line,
                fence["lang"],
                fence["attrs"].strip(),
                mark["mark"] if mark else "",
                fence["code"],
            )
        )
    return found


def pages() -> list[str]:
    return sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))


def used_pages(page: str) -> list[str]:
    """``page`` and the pages its examples build on, those first."""
    uses = _USES.match(page_text(page))
    return (used_pages(uses["page"]) if uses else []) + [page]


def runnable_pages(*, ray: bool) -> list[str]:
    """Pages with runnable examples, split by whether they need Ray (with what they use)."""
    chosen = []
    for page in pages():
        examples = [block for name in used_pages(page) for block in blocks(name) if block.runnable]
        if examples and any(block.page == page for block in examples):
            if any(block.needs_ray for block in examples) == ray:
                chosen.append(page)
    return chosen


@pytest.fixture
def in_project_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Where the docs tell a reader to run examples from: ``examples.*`` and ``configs/`` resolve."""
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    yield


def run_examples(page: str) -> dict[str, Any]:
    """Run the runnable examples of ``page`` (after those of the pages it uses) in one namespace."""
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    for name in used_pages(page):
        for block in blocks(name):
            if block.runnable:
                exec(compile(block.code, f"docs/{name}:{block.line + 1}", "exec"), namespace)
    return namespace


# -- the examples -------------------------------------------------------------------------------
class TestExamples:
    @pytest.mark.parametrize("page", [p for p in pages() if p not in WRITTEN_ELSEWHERE])
    def test_every_python_example_says_whether_it_runs(self, page: str) -> None:
        for block in blocks(page):
            if block.lang == "python":
                assert block.runnable or block.mark.startswith("not runnable: "), (
                    f"docs/{page}:{block.line}: mark the example <!-- runnable -->, <!-- runnable: ray --> "
                    "or <!-- not runnable: why -->"
                )

    @pytest.mark.parametrize("page", runnable_pages(ray=False))
    def test_examples_run_in_process(self, page: str, in_project_root: None) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # e.g. a complete_topology run that did not finish
            run_examples(page)

    @pytest.mark.parametrize("page", runnable_pages(ray=True))
    def test_examples_run_on_ray(self, page: str, ray_cluster: str, in_project_root: None) -> None:
        run_examples(page)

    def test_the_readme_examples_are_docs_examples(self) -> None:
        """A README example is a copy of a docs example, so that the one run here is the one shown."""
        shown = {block.code for page in pages() for block in blocks(page) if block.lang == "python"}
        for block in blocks("README.md"):
            if block.lang == "python":
                assert block.code in shown, f"README.md:{block.line}: not a copy of an example in docs/"


class TestTheReadme:
    def test_ci_runs_the_commands_the_readme_gives(self) -> None:
        """``.ci/run`` installs exactly as the README's quick start says and runs its test command."""
        quick_start = page_text("README.md").split("\n## Quick start\n", 1)[1]
        commands = next(block for block in blocks("README.md") if block.lang == "bash" and block.code in quick_start)
        ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        for command in commands.code.splitlines():
            assert command in ci, f"the README's {command!r} is not a line of .ci/run"


# -- links --------------------------------------------------------------------------------------
_INLINE_CODE = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s|$)", re.M)
_HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"(?P<target>[^\"]+)\"")


def relative_links(page: str) -> list[tuple[int, str]]:
    """The relative links of ``page`` (README.md or a page under docs/) outside code, each with
    its line: inline links and images, reference definitions and HTML ``href``/``src``."""
    text = _FENCE.sub(lambda fence: "\n" * fence.group(0).count("\n"), page_text(page))
    text = _INLINE_CODE.sub(lambda code: "\n" * code.group(0).count("\n"), text)
    found = []
    for pattern in (_LINK, _DEFINITION, _HTML_LINK):
        for link in pattern.finditer(text):
            target = link["target"]
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor on the same page
            found.append((text.count("\n", 0, link.start()) + 1, target))
    return sorted(found)


def test_relative_links_find_the_parser() -> None:
    """What the link test reads: links and images, reference definitions and HTML, not code."""
    text = dedent(
        """\
        [a](guide.md#part) ![b](images/x.png "title") [c](https://example.org) [d](#here)
        [e
        f](../up.md) `[not](code.md)`
        [g]: defined.md
        <a href="html.md">h</a>
        ```
        [not](fenced.md)
        ```
        """
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys.modules[__name__], "page_text", lambda page: text)
        assert relative_links("x.md") == [
            (1, "guide.md#part"),
            (1, "images/x.png"),
            (2, "../up.md"),
            (4, "defined.md"),
            (5, "html.md"),
        ]


@pytest.mark.parametrize("page", ["README.md", *pages()])
def test_every_relative_link_leads_to_a_file_of_the_repo(page: str) -> None:
    """A link works where the Markdown is read on a forge, not only on the built site: its target
    (without the anchor) is a file of the repository, relative to the page."""
    base = ROOT if page == "README.md" else (DOCS / page).parent
    broken = []
    for line, target in relative_links(page):
        path = (base / target.split("#", 1)[0].split("?", 1)[0]).resolve()
        if target.startswith("/") or not path.is_relative_to(ROOT) or not path.is_file():
            broken.append(f"{'README.md' if page == 'README.md' else 'docs/' + page}:{line}: {target}")
    assert not broken, "links to no file of the repository:\n" + "\n".join(broken)


def test_the_broken_file_prints_what_the_guide_shows(tmp_path: Path) -> None:
    """The topology file guide's broken file, validated as it says, prints the guide's output."""
    page = blocks("guides/topology-files.md")
    [broken] = [block for block in page if block.attrs == 'title="broken.yaml"']
    [shown] = [block for block in page if block.lang == "text" and block.code.startswith("$ rayflow validate")]
    (tmp_path / "broken.yaml").write_text(broken.code)
    command, *expected = shown.code.splitlines()
    result = subprocess.run(
        [sys.executable, "-m", "rayflow", *command.removeprefix("$ rayflow ").split()],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # the guide runs it from the project root
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert (result.stdout + result.stderr).splitlines() == expected


# -- the site -----------------------------------------------------------------------------------
def hooks() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the docs tools are in the dev extra: pip install -e '.[dev]'")
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_schema_page_has_every_key_of_rayflow_schema() -> None:
    docs_hooks = hooks()
    schema = docs_hooks.rayflow_schema()
    page = docs_hooks.schema_page(schema)
    keys = set(schema["properties"]) | set(schema["properties"]["config"]["properties"])
    for definition in schema["$defs"].values():
        keys |= set(definition.get("properties", {}))
    for key in keys:
        assert f"| `{key}` |" in page, key
    assert "| `topology.message.timeout.secs` | `message_timeout_secs` |" in page


def test_the_generated_pages_are_current() -> None:
    """``docs/reference/schema.md``, ``cli.md`` and ``connectors.md`` are what the code gives
    now (``python docs/_hooks.py`` writes them)."""
    assert hooks().stale_pages() == [], "run `python docs/_hooks.py` and commit the pages it writes"


def test_the_cli_help_fits_its_column_in_plain_text() -> None:
    """No line of the help boxes is wider than ``HELP_COLUMNS``, which fits the site's text
    column without a sideways scroll bar; and the help is plain text, no reStructuredText
    markup from a docstring (double backticks, roles)."""
    docs_hooks = hooks()
    page = docs_hooks.cli_page()
    boxes = [block for block in _FENCE.finditer(page) if block["lang"] == "text"]
    assert boxes
    for block in boxes:
        widest = max(len(line) for line in block["code"].splitlines())
        assert widest <= docs_hooks.HELP_COLUMNS, block["code"]
        assert "``" not in block["code"] and not re.search(r":\w+:`", block["code"]), block["code"]


def test_the_cli_page_has_the_help_of_every_command() -> None:
    import typer

    from rayflow._cli import app

    page = hooks().cli_page()
    for name in getattr(typer.main.get_command(app), "commands", {}):
        assert f"## rayflow {name}\n" in page and f"Usage: rayflow {name} [OPTIONS]" in page, name


@pytest.mark.docs
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    """``mkdocs build --strict``, as CI would publish it: no broken link or anchor, no page left
    out of the nav, no docstring the API reference cannot render."""
    hooks()
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's notice about MkDocs 2, not a warning of ours
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    schema_page = (site / "reference" / "schema" / "index.html").read_text(encoding="utf-8")
    assert 'id="config-keys"' in schema_page
    api = (site / "reference" / "rayflow" / "index.html").read_text(encoding="utf-8")
    assert 'id="rayflow.TopologyBuilder"' in api and 'id="rayflow.LocalCluster"' in api
