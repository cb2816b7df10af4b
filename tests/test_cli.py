"""The ``rayflow`` command. ``validate``, ``graph``, ``schema`` and the run's monitor run
in-process (no Ray); ``run`` itself runs as a subprocess, with a minimal environment of its own
(never the test process's), that joins the session's Ray cluster with ``--address`` -- or, in
one test, starts its own local Ray."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.metadata import entry_points, version
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from rayflow._acking.ledger_build import LEDGER_BUILD
from rayflow._cli import MEANING, ExitCode, app, console, flow_order
from rayflow._cli.commands import _actors, show_debug_log
from rayflow._cli.monitor import Monitor, task_view
from rayflow._executors import kernel
from rayflow.topology_file import load_topology
from rayflow.topology_file._drawing import CHAIN_LABEL, to_dot, to_mermaid

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "topology_file_corpus").glob("*.yaml"))
RUN_TIMEOUT = 90
START_TIMEOUT = 180
"""For a subprocess that starts a Ray of its own (10-40 s on a busy 2-core machine)."""
RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING)", re.MULTILINE)
"""A line of Ray's own logging ("... INFO worker.py:2038 -- Started a local Ray instance.")."""

BOUNDED = """\
    name: bounded
    config:
      topology.message.timeout.secs: 10
    spouts:
      - id: words
        class: tests.topology_file_components.WordSpout
        kwargs: {words: [a, b, c], rounds: ${rounds}}
    bolts:
      - {id: upper, class: tests.topology_file_components.Upper, parallelism: 2}
      - {id: count, class: tests.topology_file_components.Count}
    streams:
      - {from: words, to: upper, grouping: {type: shuffle}}
      - {from: upper, to: count, grouping: {type: fields, fields: [word]}}
"""

CHAINED = """\
    name: chained
    config: {rayflow.chaining: true}
    spouts:
      - {id: words, class: tests.topology_file_components.WordSpout, kwargs: {words: [a, b], rounds: 1}}
    bolts:
      - {id: upper, class: tests.topology_file_components.Upper}
      - {id: count, class: tests.topology_file_components.Count}
      - {id: tail, class: tests.topology_file_components.Count, parallelism: 2}
    streams:
      - {from: words, to: upper, grouping: {type: shuffle}}
      - {from: upper, to: count, grouping: {type: local_or_shuffle}}
      - {from: upper, to: tail, grouping: {type: shuffle}}
"""
"""words -> upper -> count run chained, in words' process (one task each); tail has two tasks."""

ENDLESS = """\
    name: endless
    config:
      topology.max.spout.pending: ${pending}
    spouts:
      - {id: numbers, class: tests.topology_file_components.EndlessSpout}
    bolts:
      - {id: sink, class: tests.topology_file_components.Sink}
    streams:
      - {from: numbers, to: sink, grouping: {type: shuffle}}
"""


@pytest.fixture
def topology_file(tmp_path: Path):
    def write(text: str, name: str = "topology.yaml") -> Path:
        path = tmp_path / name
        path.write_text(dedent(text))
        return path

    return write


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def minimal_env(**extra: str) -> dict[str, str]:
    """What a user's shell has, not what this test process set up (RAY_AUTH_MODE, RAY_ADDRESS,
    PYTHONPATH...): a subprocess must work from this alone."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], **extra}


def rayflow(
    *args: str, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rayflow", *args],
        cwd=ROOT,
        env=minimal_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def summary_rows(out: str) -> list[list[str]]:
    """The summary table's rows, split into cells."""
    table = out[out.index("summary after") :]
    return [line.split() for line in table.splitlines() if re.match(r"\s+\w+ (spout|bolt)\s", line)]


class TestValidate:
    def test_accepts_a_good_file(self, topology_file) -> None:
        code, out, _ = invoke("validate", str(topology_file(BOUNDED)), "--set", "rounds=2")
        assert code == 0
        assert "ok (topology 'bounded': 1 spout(s), 2 bolt(s), 4 task(s))" in out

    def test_notes_a_storm_setting_without_effect(self, topology_file) -> None:
        """A Storm file's ``topology.workers`` is valid, and the user learns what decides the
        processes instead."""
        path = topology_file(BOUNDED.replace("topology.message.timeout.secs: 10", "topology.workers: 4"))
        code, out, _ = invoke("validate", str(path), "--set", "rounds=2")
        assert code == 0
        note = " ".join(out.split())
        assert f"{path}: note: config: topology.workers is kept for the components but rayflow does not use it" in note
        assert "parallelism sets how many processes" in note

    def test_lists_every_problem_and_exits_1(self, topology_file) -> None:
        path = topology_file(BOUNDED.replace("parallelism: 2", "parallelism: 0"))
        code, _, err = invoke("validate", str(path))
        assert code == 1
        assert f"{path}:7 spouts[0].kwargs.rounds: unresolved ${{rounds}}" in err
        assert f"{path}:9 bolts[0].parallelism: must be >= 1, got 0" in err
        assert "2 problem(s)" in err

    def test_properties_file_and_set(self, topology_file, tmp_path: Path) -> None:
        props = tmp_path / "dev.properties"
        props.write_text("rounds = oops\n")
        path = str(topology_file(BOUNDED))
        assert invoke("validate", path, "--properties", str(props))[0] == 1
        assert invoke("validate", path, "--properties", str(props), "--set", "rounds=3")[0] == 0

    def test_a_malformed_set_is_a_usage_error(self, topology_file) -> None:
        code, _, err = invoke("validate", str(topology_file(BOUNDED)), "--set", "rounds")
        assert code == 2
        assert "expected KEY=VALUE, got 'rounds'" in " ".join(err.replace("│", " ").split())

    def test_every_config_in_configs_is_valid(self) -> None:
        result = rayflow("validate", *[str(p.relative_to(ROOT)) for p in sorted((ROOT / "configs").glob("*.yaml"))])
        assert result.returncode == 0, result.stderr
        assert "configs/wordcount.yaml: ok" in result.stdout

    def test_rejects_every_corpus_file_with_its_expected_message(self) -> None:
        """One ``python -m rayflow validate`` over the whole corpus, as a user would run it."""
        result = rayflow("validate", *[str(p.relative_to(ROOT)) for p in CORPUS])
        assert result.returncode == 1
        assert " ok " not in result.stdout
        for path in CORPUS:
            for line in path.read_text().splitlines():
                if line.startswith("# expect: "):
                    assert line[len("# expect: ") :] in result.stderr, path.name


class TestGraph:
    @pytest.fixture
    def loaded(self, topology_file):
        return load_topology(topology_file(BOUNDED), {"rounds": "1"})

    def test_dot_names_components_parallelism_and_groupings(self, loaded) -> None:
        source = to_dot(loaded.topology, loaded.name).source
        assert 'upper [label="upper\\nUpper · bolt × 2"' in source
        assert 'words -> upper [label=" shuffle "]' in source
        assert 'upper -> count [label=" fields(word) "]' in source

    def test_mermaid(self, loaded) -> None:
        text = to_mermaid(loaded.topology, loaded.name)
        assert text.splitlines()[3] == "flowchart LR"
        assert '(["words<br/><small>WordSpout · spout × 1</small>"])' in text
        assert '-->|"fields(word)"|' in text

    @pytest.mark.parametrize("suffix", [".dot", ".mmd"])
    def test_writes_text_formats_without_graphviz(self, topology_file, tmp_path: Path, suffix: str) -> None:
        output = tmp_path / f"out{suffix}"
        code, out, _ = invoke("graph", str(topology_file(BOUNDED)), "--set", "rounds=1", "-o", str(output))
        assert code == 0 and f"wrote {output}" in out
        assert "upper" in output.read_text()

    def test_prints_dot_without_an_output(self, topology_file) -> None:
        code, out, _ = invoke("graph", str(topology_file(BOUNDED)), "--set", "rounds=1")
        assert code == 0 and out.startswith("digraph bounded {")

    def test_an_unknown_suffix_is_a_usage_error(self, topology_file, tmp_path: Path) -> None:
        code, _, err = invoke("graph", str(topology_file(BOUNDED)), "--set", "rounds=1", "-o", str(tmp_path / "x.jpeg"))
        assert code == 2
        assert "must end in one of .dot, .gv, .mmd, .svg, .png, .pdf" in " ".join(err.replace("│", " ").split())

    def test_svg_without_dot_names_the_missing_program(self, topology_file, tmp_path: Path) -> None:
        output = tmp_path / "out.svg"
        result = rayflow("graph", str(topology_file(BOUNDED)), "--set", "rounds=1", "-o", str(output), env={"PATH": ""})
        assert result.returncode == 1
        assert "needs Graphviz's `dot` program, which is not on PATH" in " ".join(result.stderr.split())
        assert not output.exists()

    def test_a_chain_is_boxed_and_its_links_bold(self, topology_file) -> None:
        source = to_dot(load_topology(topology_file(CHAINED)).topology, "chained").source
        box = source[source.index("subgraph cluster_chain_") : source.index("}")]
        assert f'label="{CHAIN_LABEL}"' in box and "dashed" in box
        boxed = [line.split()[0] for line in box.splitlines()[2:] if line.strip()]
        assert boxed[0] == "words" and sorted(boxed[1:]) == ["count", "upper"]  # the host first
        assert 'words -> upper [label=" shuffle, chained " color="#222222" style=bold]' in source
        assert 'upper -> count [label=" local_or_shuffle, chained "' in source
        assert 'upper -> tail [label=" shuffle "]' in source

    def test_mermaid_draws_a_chain_as_a_dashed_subgraph_and_thick_links(self, topology_file) -> None:
        text = to_mermaid(load_topology(topology_file(CHAINED)).topology, "chained")
        assert f'    subgraph chain0 ["{CHAIN_LABEL}"]' in text and "    style chain0 stroke-dasharray: 5 5" in text
        assert '==>|"shuffle, chained"|' in text and '==>|"local_or_shuffle, chained"|' in text
        assert '-->|"shuffle"|' in text

    def test_the_config_decides_what_is_drawn_chained(self, topology_file) -> None:
        """Off for the topology (the file's config, or ``conf``), or for one component: not
        chained; the old call without a config draws with the default one."""
        off = topology_file(CHAINED.replace("rayflow.chaining: true", "rayflow.chaining: false"))
        assert ", chained" not in invoke("graph", str(off))[1]
        loaded = load_topology(topology_file(CHAINED))
        assert ", chained" not in to_dot(loaded.topology, "x", {"rayflow.chaining": False}).source
        assert ", chained" in to_dot(loaded.topology, "x").source
        on = invoke("graph", str(topology_file(CHAINED)))[1]
        assert on.count(", chained") == 2 and "cluster_chain_" in on
        count_off = CHAINED.replace("Count}", "Count, config: {rayflow.chaining: false}}", 1)
        text = to_mermaid(load_topology(topology_file(count_off)).topology, "chained")
        assert text.count(", chained") == 1 and '-->|"local_or_shuffle"|' in text

    def test_chained_is_what_runs_when_the_caller_knows_it(self, topology_file) -> None:
        topology = load_topology(topology_file(CHAINED)).topology
        source = to_dot(topology, "x", chained={"count": "upper"}).source
        assert source.count(", chained") == 1 and 'upper -> count [label=" local_or_shuffle, chained "' in source

    def test_the_run_says_how_many_actors_carry_the_tasks(self, topology_file) -> None:
        """Chained tasks run in their hosts' actors: 5 tasks and an acker in 4 actors."""
        assert _actors(load_topology(topology_file(CHAINED))) == "6 tasks in 4 actors"
        assert _actors(load_topology(topology_file(BOUNDED), {"rounds": "1"})) == "5 task actors"

    @pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
    @pytest.mark.parametrize("suffix", [".svg", ".png"])
    def test_renders_with_dot(self, topology_file, tmp_path: Path, suffix: str) -> None:
        output = tmp_path / f"out{suffix}"
        assert invoke("graph", str(topology_file(BOUNDED)), "--set", "rounds=1", "-o", str(output))[0] == 0
        assert output.stat().st_size > 0


class TestSchemaAndEntryPoints:
    def test_schema_is_the_models_json_schema(self) -> None:
        code, out, _ = invoke("schema")
        assert code == 0
        schema = json.loads(out)
        assert schema["title"] == "TopologySpec"
        assert schema["required"] == ["name", "spouts"]

    def test_version(self) -> None:
        code, out, _ = invoke("--version")
        assert code == 0
        assert out.strip() == f"rayflow {version('rayflow')} ({kernel.BUILD}; {LEDGER_BUILD})"

    def test_run_help_reflows_its_paragraphs_and_lists_the_exit_codes(self) -> None:
        """The help's paragraphs fill the terminal's width instead of keeping the source's line breaks."""
        result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "250"})
        assert result.exit_code == 0
        assert "refreshed every second, and under the table the last error" in result.stdout
        for code, meaning in MEANING.items():
            assert f"{int(code)}: {meaning}" in result.stdout

    def test_outside_the_project_root_a_missing_package_comes_with_a_hint(self, tmp_path: Path) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "rayflow", "validate", str(ROOT / "configs" / "wordcount.yaml")],
            cwd=tmp_path,
            env=minimal_env(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        assert result.returncode == 1
        text = " ".join(result.stderr.split())
        assert "No module named 'examples' (hint: run from the project root" in text
        assert "or add that directory to PYTHONPATH" in text

    def test_console_script_and_python_dash_m(self) -> None:
        [script] = [ep for ep in entry_points(group="console_scripts") if ep.name == "rayflow"]
        assert script.value == "rayflow._cli:main"
        result = rayflow("--help")
        assert result.returncode == 0
        assert all(command in result.stdout for command in ("run", "validate", "graph", "schema"))


class TestDetachedCommandsOnASharedMachine:
    """What a kill needs and what ``submit`` says, without a cluster: the guard that a command
    that stops something acts on a named cluster only, and the words around the Jobs API."""

    @pytest.fixture
    def two_rays(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """This machine runs two Rays; ``--address auto`` would take the latest."""
        from rayflow._cli import detached

        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        found = ("127.0.0.1:6380", ["127.0.0.1:6380", "127.0.0.1:7100"])
        monkeypatch.setattr(detached, "_clusters_on_this_machine", lambda: found)

    @pytest.mark.parametrize("command", ["kill", "deactivate"])
    @pytest.mark.parametrize("address", [[], ["--address", "auto"]])
    def test_a_kill_found_by_auto_is_refused_naming_what_auto_found(
        self, two_rays: None, command: str, address: list[str]
    ) -> None:
        code, _, err = invoke(command, "wc", *address)
        said = " ".join(err.split())
        assert code == 2
        assert f"`rayflow {command}` acts only on a cluster you name" in said
        assert "it would take the Ray cluster at 127.0.0.1:6380, one of 2 running here" in said
        assert f"Name it: `rayflow {command} wc --address 127.0.0.1:6380` (or set RAY_ADDRESS)" in said

    def test_with_no_ray_here_it_asks_for_the_address(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from rayflow._cli import detached

        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        monkeypatch.setattr(detached, "_clusters_on_this_machine", lambda: (None, []))
        code, _, err = invoke("kill", "wc")
        assert code == 2 and "`rayflow kill wc --address HOST:PORT`" in " ".join(err.split())

    def test_ray_address_or_an_address_names_the_cluster(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from rayflow._cli.detached import _named_cluster

        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        assert _named_cluster("10.0.0.5:6380", "kill", "wc") == "10.0.0.5:6380"
        monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6380")
        assert _named_cluster(None, "kill", "wc") == "auto"  # ray.init takes RAY_ADDRESS first

    def test_no_agent_is_explained_with_the_port_and_its_flag(self) -> None:
        from rayflow._cli.jobs import refusal

        answer = RuntimeError(
            "Request failed with status code 500: No available agent to submit job, please try again later."
        )
        said = refusal(answer)
        assert "the cluster has no job agent to run the job" in said
        assert "holds the agent's port (52365 by default)" in said
        assert "`--dashboard-agent-listen-port` set to a free port" in said and "docs/detached.md" in said

    def test_another_refusal_is_passed_on(self) -> None:
        from rayflow._cli.jobs import refusal

        assert refusal(ValueError("bad runtime_env")) == "the cluster refused the job: ValueError: bad runtime_env"

    @pytest.mark.parametrize(("token", "prefix"), [(False, "ray job logs"), (True, "RAY_AUTH_MODE=token ray job logs")])
    def test_the_log_command_names_the_dashboard(self, token: bool, prefix: str) -> None:
        from rayflow._cli.jobs import JobsApi

        jobs = JobsApi(client=None, url="http://10.0.0.5:8265", token=token)
        assert jobs.logs_command("rayflow-wc-1") == f"{prefix} rayflow-wc-1 --address http://10.0.0.5:8265 --follow"


TROUBLED = """\
    name: troubled
    spouts:
      - {id: words, class: tests.topology_file_components.WordSpout, kwargs: {rounds: 20}}
      - {id: numbers, class: tests.topology_file_corpus.troubled_components.UntrackedSpout, kwargs: {count: 50}}
    bolts:
      - {id: count, class: tests.topology_file_components.Count}
      - {id: upper, class: tests.topology_file_components.Upper}
      - {id: odd, class: tests.topology_file_corpus.troubled_components.OddRaiser}
    streams:
      - {from: words, to: upper, grouping: {type: shuffle}}
      - {from: upper, to: count, grouping: {type: fields, fields: [word]}}
      - {from: numbers, to: odd, grouping: {type: shuffle}}
"""

REJECTED = """\
    name: rejected
    spouts:
      - {id: words, class: tests.topology_file_components.WordSpout, kwargs: {rounds: 5}}
    bolts:
      - {id: reject, class: tests.topology_file_corpus.troubled_components.Rejecter}
    streams:
      - {from: words, to: reject, grouping: {type: shuffle}}
"""


class TestMonitor:
    """The run's monitor against a stand-in handle: what it shows, in what order, and its verdict."""

    class Handle:
        def __init__(self, metrics: dict[str, dict[str, Any]], tasks: dict[int, dict[str, Any]] | None = None) -> None:
            self._metrics = metrics
            self._tasks = tasks or {}
            self.killed = False

        def metrics(self) -> dict[str, dict[str, Any]]:
            return self._metrics

        def task_metrics(self) -> dict[int, dict[str, Any]]:
            return self._tasks

        def wait(self, timeout: float | None = None) -> bool:
            return True

        def deactivate(self) -> None:
            pass

        def kill(self) -> None:
            self.killed = True

    @staticmethod
    def component(**counts: Any) -> dict[str, Any]:
        latency = {"mean": 1.5, "p50": 0.00392, "p99": 208.0}
        base = {"tasks": 1, "emitted": 0, "transferred": 0, "acked": 0, "failed": 0, "executed": 0, "errors": 0}
        return {**base, "last_error": None, "complete_latency_ms": latency, "process_latency_ms": latency, **counts}

    @pytest.fixture
    def troubled(self, topology_file):
        return load_topology(topology_file(TROUBLED))

    def metrics(self, **overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
        c = self.component
        metrics = {
            "words": c(emitted=60, acked=60, pending=0, exhausted=True),
            "numbers": c(emitted=50, pending=0, exhausted=True),
            "count": c(executed=60),
            "upper": c(executed=60),
            "odd": c(executed=50),
        }
        for cid, values in overrides.items():
            metrics[cid].update(values)
        return metrics

    def run(
        self,
        loaded: Any,
        metrics: dict[str, dict[str, Any]],
        terminal: bool = False,
        tasks: dict[int, dict[str, Any]] | None = None,
        width: int = 200,
    ) -> tuple[ExitCode, str, str]:
        stdout, stderr = io.StringIO(), io.StringIO()
        consoles = {"out": stdout, "err": stderr}
        patched = {name: Console(file=f, width=width, force_terminal=terminal) for name, f in consoles.items()}
        original = console.out, console.err
        console.out, console.err = patched["out"], patched["err"]
        try:
            outcome = Monitor(self.Handle(metrics, tasks), loaded, duration=None).run()  # type: ignore[arg-type]
        finally:
            console.out, console.err = original
        strip = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")
        return outcome, strip.sub("", stdout.getvalue()), strip.sub("", stderr.getvalue())

    def test_bolts_are_listed_in_flow_order(self, troubled) -> None:
        """Tuples reach upper before count (alphabetical order would put count first)."""
        assert flow_order(troubled.topology) == ["upper", "odd", "count"]
        _, out, _ = self.run(troubled, self.metrics())
        assert [row[0] for row in summary_rows(out)] == ["words", "numbers", "upper", "odd", "count"]

    def test_latencies_have_one_format(self, troubled) -> None:
        _, out, _ = self.run(troubled, self.metrics())
        for row in summary_rows(out):
            assert row[-2:] == ["0.00", "208.00"], row

    def test_untracked_tuples_are_not_unacked_trees(self, troubled) -> None:
        """A spout's emitted counts untracked tuples too: the verdict compares trees, not emits."""
        metrics = self.metrics(words={"emitted": 80})  # 20 of them untracked
        outcome, out, _ = self.run(troubled, metrics)
        assert outcome == ExitCode.ACKED
        assert "words: every tuple tree was acked (60); 20 untracked tuple(s) emitted" in out
        assert "numbers: 50 untracked tuple(s) emitted (no msg_id: nothing to ack)" in out

    def test_failed_trees_exit_2(self, troubled) -> None:
        outcome, out, err = self.run(troubled, self.metrics(words={"acked": 55, "failed": 5}))
        assert outcome == ExitCode.TREES_FAILED
        assert "words: 55 of 60 tuple tree(s) acked, 5 failed, 0 still pending" in out
        assert f"exit 2: {MEANING[ExitCode.TREES_FAILED]}" in err

    def test_errors_are_shown_live_in_the_progress_lines_and_exit_3(self, troubled) -> None:
        metrics = self.metrics(odd={"errors": 25, "last_error": "ValueError: odd number 49"})
        outcome, out, err = self.run(troubled, metrics)
        assert outcome == ExitCode.COMPONENTS_RAISED
        progress = out[: out.index("summary after")]
        assert "  odd: 25 error(s), the last: ValueError: odd number 49" in progress
        assert f"exit 3: {MEANING[ExitCode.COMPONENTS_RAISED]}" in err

    def test_errors_are_shown_live_under_the_table(self, troubled) -> None:
        metrics = self.metrics(odd={"errors": 25, "last_error": "ValueError: odd number 49"})
        _, out, err = self.run(troubled, metrics, terminal=True)
        live = out[: out.index("summary after")]
        assert "odd: 25 error(s), the last: ValueError: odd number 49" in live
        assert "odd: 25 error(s), the last: ValueError: odd number 49" in err  # and again after the summary

    @pytest.mark.parametrize("terminal", [False, True])
    def test_ids_and_errors_are_shown_as_written_not_as_markup(self, topology_file, terminal: bool) -> None:
        """A component id, a topology name or an error may contain what rich reads as markup."""
        loaded = load_topology(
            topology_file(
                """\
                name: "[bold]t"
                spouts:
                  - {id: "[/x]", class: tests.topology_file_components.WordSpout}
                bolts:
                  - {id: "[red]up", class: tests.topology_file_components.Upper}
                streams:
                  - {from: "[/x]", to: "[red]up", grouping: {type: shuffle}}
                """
            )
        )
        c = self.component
        metrics = {
            "[/x]": c(emitted=3, acked=3, pending=0, exhausted=True),
            "[red]up": c(executed=3, errors=1, last_error="KeyError: '[/b]'"),
        }
        _, out, err = self.run(loaded, metrics, terminal=terminal)
        assert "[bold]t: summary after" in out
        table = out[out.index("summary after") :].splitlines()
        assert [line.split()[:2] for line in table if re.match(r"\s+\S+ (spout|bolt)\s", line)] == [
            ["[/x]", "spout"],
            ["[red]up", "bolt"],
        ]
        assert "[red]up: 1 error(s), the last: KeyError: '[/b]'" in err


def task(component: str, state: str = "running", node: str | None = "10.0.0.1", **extra: Any) -> dict[str, Any]:
    """One task as ``task_metrics()`` gives it, on ``node`` taking the default resources."""
    return {"component": component, "state": state, "node_ip": node, "resources": {"CPU": 0.01}, "gpu_ids": [], **extra}


INFERENCE = ["events", "features", "embed-with-a-long-name", "sink"]
GPU_TASK: dict[str, Any] = {"resources": {"CPU": 1.0, "GPU": 1.0, "memory": 8 * 2**30, "reader": 1.0}}
CLUSTER_TASKS = {
    1: task("events"),
    2: task("features", node="10.0.0.2"),
    3: task("features", node="10.0.0.3"),
    4: task("embed-with-a-long-name", node="10.0.0.2", **GPU_TASK, gpu_ids=[0]),
    5: task("embed-with-a-long-name", node="10.0.0.2", **GPU_TASK, gpu_ids=[1]),
    6: task("embed-with-a-long-name", "waiting for resources", None, **GPU_TASK),
    7: task("sink", "restarting"),
    8: task("__acker"),
    9: task("__acker"),
}
"""An inference topology on three nodes: two GPU tasks placed, a third waiting, a sink restarting."""


class TestTaskView:
    """Under the live table: each task's state, node, resources and GPU ids, at 100 columns."""

    @staticmethod
    def render(tasks: dict[int, dict[str, Any]], width: int = 100) -> list[str]:
        out = io.StringIO()
        Console(file=out, width=width, force_terminal=False).print(task_view(tasks, INFERENCE))
        return [line.rstrip() for line in out.getvalue().splitlines()]

    def test_alike_everywhere_is_one_line(self) -> None:
        """One node, every task running with the default resources: a single line says so."""
        tasks = {1: task("events"), 2: task("features"), 3: task("features"), 4: task("__acker")}
        assert self.render(tasks) == ["4 task(s) · all running · on 10.0.0.1 · each taking CPU 0.01"]

    def test_a_cluster_shows_each_tasks_state_node_resources_and_gpus(self) -> None:
        lines = self.render(CLUSTER_TASKS, width=200)
        assert lines[0] == "9 task(s)"
        rows = [re.split(r"\s{2,}", line.strip()) for line in lines[1:] if line.strip() and "──" not in line]
        assert rows == [
            ["component", "tasks", "state", "node", "resources", "GPUs"],
            ["events", "1", "running", "10.0.0.1", "CPU 0.01", "-"],
            ["features", "2", "running", "10.0.0.2", "CPU 0.01", "-"],
            ["features", "3", "running", "10.0.0.3", "CPU 0.01", "-"],
            ["embed-with-a-long-name", "4-5", "running", "10.0.0.2", "CPU 1, GPU 1, memory 8 GiB, reader 1", "0, 1"],
            ["embed-with-a-long-name", "6", "waiting for resources", "-", "CPU 1, GPU 1, memory 8 GiB, reader 1", "-"],
            ["sink", "7", "restarting", "10.0.0.1", "CPU 0.01", "-"],
            ["acker", "8-9", "running", "10.0.0.1", "CPU 0.01", "-"],
        ]

    def test_at_100_columns_cells_fold_and_nothing_is_cut(self) -> None:
        lines = self.render(CLUSTER_TASKS, width=100)
        assert all(len(line) <= 100 for line in lines), "\n".join(lines)
        text = " ".join(" ".join(lines).split())
        for word in ("waiting for resources", "restarting", "10.0.0.3", "reader 1", "0, 1", "8-9"):
            assert word in text

    def test_columns_alike_on_every_row_are_said_once(self) -> None:
        """One node: no node column, the node in the line above; no GPUs anywhere: no GPU column."""
        tasks = {1: task("events"), 2: task("sink", "restarting"), 3: task("sink"), 4: task("sink")}
        lines = self.render(tasks)
        assert lines[0] == "4 task(s) · on 10.0.0.1 · each taking CPU 0.01"
        assert [line.split() for line in lines if line.startswith("  ") and "──" not in line] == [
            ["component", "tasks", "state"],
            ["events", "1", "running"],
            ["sink", "2", "restarting"],
            ["sink", "3-4", "running"],
        ]

    def test_without_a_terminal_the_progress_lines_name_the_tasks_not_running(
        self, topology_file: Callable[[str], Path]
    ) -> None:
        loaded = load_topology(topology_file(BOUNDED), {"rounds": "1"})
        c = TestMonitor.component
        metrics = {"words": c(emitted=3, acked=3, pending=0, exhausted=True), "upper": c(), "count": c()}
        tasks = {1: task("words"), 2: task("upper", "waiting for resources", None), 3: task("count", "restarting")}
        _, out, _ = TestMonitor().run(loaded, metrics, tasks=tasks)
        progress = out[: out.index("summary after")]
        assert progress.count("  tasks: upper 2 waiting for resources · count 3 restarting\n") == 1

    def test_the_live_table_shows_the_tasks_within_100_columns(self, topology_file: Callable[[str], Path]) -> None:
        loaded = load_topology(topology_file(BOUNDED), {"rounds": "1"})
        c = TestMonitor.component
        metrics = {"words": c(emitted=3, acked=3, pending=0, exhausted=True), "upper": c(), "count": c()}
        tasks = {1: task("words"), 2: task("upper", "waiting for resources", None), 3: task("upper"), 4: task("count")}
        _, out, _ = TestMonitor().run(loaded, metrics, terminal=True, tasks=tasks, width=100)
        live = out[: out.index("summary after")]
        assert re.search(r"upper\s+2\s+waiting for resources\s+-", live), live
        assert "4 task(s) · each taking CPU 0.01" in live
        assert all(len(line.rstrip()) <= 100 for line in out.splitlines())


def test_with_topology_debug_the_run_shows_the_emits_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """``rayflow run`` of a topology with ``topology.debug`` shows the INFO records its tasks'
    emits become on the driver (once, however often it is set up)."""
    logger = logging.getLogger("rayflow")
    level, handlers = logger.level, list(logger.handlers)
    try:
        show_debug_log()
        show_debug_log()
        logger.info("[t task 3 (bolt 'count'), pid 7] count:3 emit default ['a']")
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)
    assert capsys.readouterr().err == "[t task 3 (bolt 'count'), pid 7] count:3 emit default ['a']\n"


class TestRun:
    """``rayflow run`` as a subprocess with a minimal environment, joined to the session's Ray
    cluster (``--address``) -- which it reaches without inheriting this process's settings."""

    def test_a_bounded_topology_ends_when_its_spouts_are_exhausted(self, ray_cluster: str, topology_file) -> None:
        path = topology_file(BOUNDED)
        result = rayflow("run", str(path), "--set", "rounds=100", "--duration", "60", "--address", ray_cluster)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "bounded: summary after" in out
        assert "(every spout is exhausted and nothing is pending)" in out
        assert "words: every tuple tree was acked (300)" in out
        assert [row[0] for row in summary_rows(out)] == ["words", "upper", "count"]
        assert f"joining the Ray cluster at {ray_cluster}" in result.stderr
        assert not RAY_LOG_LINE.search(result.stderr), result.stderr

    def test_trees_that_fail_exit_2(self, ray_cluster: str, topology_file) -> None:
        result = rayflow("run", str(topology_file(REJECTED)), "--duration", "60", "--address", ray_cluster)
        assert result.returncode == 2, result.stderr
        assert "words: 0 of 15 tuple tree(s) acked, 15 failed" in result.stdout
        assert "exit 2: some tuple trees failed" in result.stderr

    def test_joining_fails_fast_saying_what_to_set(self, ray_cluster: str, topology_file, tmp_path: Path) -> None:
        """No token on this machine (another HOME): say which variables to set, at once, rather
        than Ray's ConnectionError after ~20 s. Nothing listening: say so, at once."""
        if os.environ.get("RAY_AUTH_MODE") != "token":
            pytest.skip("the session's Ray cluster does not use token authentication")
        path = str(topology_file(BOUNDED))
        result = rayflow("run", path, "--set", "rounds=1", "--address", ray_cluster, env={"HOME": str(tmp_path)})
        assert result.returncode == 1
        text = " ".join(result.stderr.split())
        assert f"cannot join the Ray cluster at {ray_cluster}: the cluster requires token authentication" in text
        assert "Set RAY_AUTH_TOKEN to the cluster's token" in text and "RAY_AUTH_TOKEN_PATH" in text
        assert "joining the Ray cluster" not in result.stderr  # asked before ray.init, which retries for ~20 s
        result = rayflow("run", path, "--set", "rounds=1", "--address", "127.0.0.1:1")
        assert result.returncode == 1
        assert "cannot join the Ray cluster at 127.0.0.1:1: nothing answers there" in " ".join(result.stderr.split())
        assert "joining the Ray cluster" not in result.stderr  # asked before ray.init, which retries for ~20 s

    def test_duration_stops_an_endless_topology_and_drains_it(
        self, ray_cluster: str, topology_file, tmp_path: Path
    ) -> None:
        props = tmp_path / "run.properties"
        props.write_text("pending=50\n")
        path = topology_file(ENDLESS)
        started = time.monotonic()
        result = rayflow("run", str(path), "--properties", str(props), "--duration", "2", "--address", ray_cluster)
        assert result.returncode == 0, result.stderr
        assert "endless: summary after" in result.stdout and "(ran for 2s)" in result.stdout
        assert "numbers: every tuple tree was acked" in result.stdout
        assert "numbers emitted=" in result.stdout
        assert time.monotonic() - started < RUN_TIMEOUT

    def test_ctrl_c_stops_cleanly_with_a_summary(self, ray_cluster: str, topology_file) -> None:
        path = topology_file(ENDLESS)
        proc = subprocess.Popen(
            [sys.executable, "-m", "rayflow", "run", str(path), "--set", "pending=50", "--address", ray_cluster],
            cwd=ROOT,
            env=minimal_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()  # the first progress line: the topology runs
            assert "numbers emitted=" in first, first + proc.stderr.read()  # type: ignore[union-attr]
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert "(interrupted)" in out
        assert "numbers: every tuple tree was acked" in out

    def test_inactive_submits_without_emitting(self, ray_cluster: str, topology_file) -> None:
        path = topology_file(ENDLESS)
        result = rayflow(
            "run", str(path), "--set", "pending=5", "--inactive", "--duration", "1", "--address", ray_cluster
        )
        assert result.returncode == 0, result.stderr
        assert "numbers: every tuple tree was acked (0)" in result.stdout

    def test_a_broken_file_exits_1_before_starting_anything(self, topology_file) -> None:
        path = topology_file(BOUNDED)
        result = rayflow("run", str(path), "--duration", "1", "--address", "127.0.0.1:1")
        assert result.returncode == 1
        assert "unresolved ${rounds}" in result.stderr
        assert "summary" not in result.stdout

    def test_a_topology_that_cannot_start_exits_1(self, ray_cluster: str, topology_file) -> None:
        path = topology_file(
            """\
            name: unpicklable
            spouts:
              - {id: locked, class: tests.topology_file_components.Unpicklable}
            """
        )
        result = rayflow("run", str(path), "--duration", "1", "--address", ray_cluster)
        assert result.returncode == 1
        assert "cannot start topology 'unpicklable'" in result.stderr
        assert "cannot be copied to its tasks" in result.stderr


@pytest.mark.ray
class TestOwnLocalRay:
    """Without ``--address``, ``rayflow run`` (and ``LocalCluster``, which the example uses)
    start a Ray of their own even when RAY_ADDRESS points elsewhere; quietly, with progress.
    Each starts Ray (~10 s): one run checks everything."""

    BOGUS = {"RAY_ADDRESS": "127.0.0.1:1"}

    def test_run_starts_its_own_ray_quietly_and_reports_what_went_wrong(self, topology_file) -> None:
        result = rayflow("run", str(topology_file(TROUBLED)), "--duration", "60", env=self.BOGUS, timeout=START_TIMEOUT)
        assert result.returncode == ExitCode.COMPONENTS_RAISED, result.stderr
        assert "starting a local Ray (" in result.stderr and "Ray started in" in result.stderr
        assert "topology started in" in result.stderr
        assert not RAY_LOG_LINE.search(result.stderr), result.stderr
        assert "Started a local Ray instance" not in result.stderr + result.stdout
        out = result.stdout
        progress = out[: out.index("summary after")]
        assert re.search(r"  odd: \d+ error\(s\), the last: .*ValueError: odd number \d+", progress), out
        assert "words: every tuple tree was acked (60)" in out
        assert "numbers: 50 untracked tuple(s) emitted" in out
        assert [row[0] for row in summary_rows(out)] == ["words", "numbers", "upper", "odd", "count"]
        assert "exit 3: a component raised" in result.stderr

    def test_the_example_runs_quietly(self) -> None:
        result = subprocess.run(
            [sys.executable, "examples/wordcount.py", "--sentences", "500"],
            cwd=ROOT,
            env=minimal_env(**self.BOGUS),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
        )
        assert result.returncode == 0, result.stderr
        assert "every sentence acked: yes" in result.stdout
        assert result.stderr == ""
