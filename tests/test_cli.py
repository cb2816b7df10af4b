"""The ``rayflow`` command. ``validate``, ``graph`` and ``schema`` run in-process (no Ray);
``run`` runs as a subprocess that joins the session's Ray cluster with ``--address``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from textwrap import dedent

import pytest
from typer.testing import CliRunner

from rayflow.cli import app
from rayflow.spec import load_topology
from rayflow.spec.drawing import to_dot, to_mermaid

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "spec_corpus").glob("*.yaml"))
RUN_TIMEOUT = 90

BOUNDED = """\
    name: bounded
    config:
      topology.message.timeout.secs: 10
    spouts:
      - id: words
        class: tests.spec_components.WordSpout
        kwargs: {words: [a, b, c], rounds: ${rounds}}
    bolts:
      - {id: upper, class: tests.spec_components.Upper, parallelism: 2}
      - {id: count, class: tests.spec_components.Count}
    streams:
      - {from: words, to: upper, grouping: {type: shuffle}}
      - {from: upper, to: count, grouping: {type: fields, fields: [word]}}
"""

ENDLESS = """\
    name: endless
    config:
      topology.max.spout.pending: ${pending}
    spouts:
      - {id: numbers, class: tests.spec_components.EndlessSpout}
    bolts:
      - {id: sink, class: tests.spec_components.Sink}
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


def rayflow(
    *args: str, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rayflow", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class TestValidate:
    def test_accepts_a_good_file(self, topology_file) -> None:
        code, out, _ = invoke("validate", str(topology_file(BOUNDED)), "--set", "rounds=2")
        assert code == 0
        assert "ok (topology 'bounded': 1 spout(s), 2 bolt(s), 4 task(s))" in out

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
        env = {k: v for k, v in os.environ.items() if k != "RAYFLOW_CORPUS_UNSET"}
        result = subprocess.run(
            [sys.executable, "-m", "rayflow", "validate", *[str(p.relative_to(ROOT)) for p in CORPUS]],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
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

    def test_console_script_and_python_dash_m(self) -> None:
        [script] = [ep for ep in entry_points(group="console_scripts") if ep.name == "rayflow"]
        assert script.value == "rayflow.cli:main"
        result = rayflow("--help")
        assert result.returncode == 0
        assert all(command in result.stdout for command in ("run", "validate", "graph", "schema"))


class TestRun:
    """Each test starts ``rayflow run`` as a subprocess joined to the session's Ray cluster."""

    def test_a_bounded_topology_ends_when_its_spouts_are_exhausted(self, ray_cluster: str, topology_file) -> None:
        path = topology_file(BOUNDED)
        result = rayflow("run", str(path), "--set", "rounds=100", "--duration", "60", "--address", ray_cluster)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "bounded: summary after" in out
        assert "(every spout is exhausted and nothing is pending)" in out
        assert "words: every emitted tuple was acked (300)" in out
        for component in ("words", "upper", "count"):
            assert component in out

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
        assert "numbers: every emitted tuple was acked" in result.stdout
        assert "[  1.0s] numbers emitted=" in result.stdout or "numbers emitted=" in result.stdout
        assert time.monotonic() - started < RUN_TIMEOUT

    def test_ctrl_c_stops_cleanly_with_a_summary(self, ray_cluster: str, topology_file) -> None:
        path = topology_file(ENDLESS)
        proc = subprocess.Popen(
            [sys.executable, "-m", "rayflow", "run", str(path), "--set", "pending=50", "--address", ray_cluster],
            cwd=ROOT,
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
        assert "numbers: every emitted tuple was acked" in out

    def test_inactive_submits_without_emitting(self, ray_cluster: str, topology_file) -> None:
        path = topology_file(ENDLESS)
        result = rayflow(
            "run", str(path), "--set", "pending=5", "--inactive", "--duration", "1", "--address", ray_cluster
        )
        assert result.returncode == 0, result.stderr
        assert "numbers: every emitted tuple was acked (0)" in result.stdout

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
              - {id: locked, class: tests.spec_components.Unpicklable}
            """
        )
        result = rayflow("run", str(path), "--duration", "1", "--address", ray_cluster)
        assert result.returncode == 1
        assert "cannot start topology 'unpicklable'" in result.stderr
        assert "cannot be copied to its tasks" in result.stderr
