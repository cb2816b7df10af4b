"""Hostile topology files: whatever the bytes, ``load_topology`` loads the file or raises a
``SpecError`` placing each problem at a file and line, never another exception, and within the
load's budget.

A seeded mutator (bytes, lines, YAML structure) turns the topology files we ship into broken
ones; a failure names the seed, so ``mutate(source, random.Random(seed))`` replays it. The
attacks of issue 32 (include fan-out, one big file included or symlinked many times, alias and
merge-key bombs, a million values, huge values, placeholder bombs) are in the corpus, or made by
``tests/topology_file_corpus/hostile.py`` where they are too large to keep: each is loaded with
every file read recorded and Python's allocations traced, and must stay within the limits of
``rayflow/topology_file/_reading.py`` (``benchmarks/hostile_topology_files.py`` times them).
"""

from __future__ import annotations

import os
import random
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from rayflow.topology_file import SpecError, _reading, load_topology, read_properties
from rayflow.topology_file._errors import SHOWN_PROBLEMS
from rayflow.topology_file._reading import MAX_FILE_BYTES, MAX_FILES, MAX_LOAD_BYTES, MAX_VALUES

from .topology_file_corpus.hostile import CASES

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "topology_file_corpus").glob("*.yaml"))
SOURCES = sorted([*(ROOT / "configs").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")])
CASES_PER_SOURCE = 100
NASTY_BYTES = b"\x00\x01\x08\x0b\x1b\x7f\x85\xff\t\n\r :-[]{}&*!%|>'\"#,?@`$"
NASTY_VALUES: list[Any] = [
    None,
    -1,
    0,
    10**30,
    1.5,
    True,
    "",
    "FIELDS",
    "x" * 500,
    "${nope}",
    [],
    {},
    [1, [2, [3]]],
    {"file": "/dev/zero"},
]
NASTY_INCLUDES = ["/dev/zero", "/dev/null", ".", "missing.yaml", "case.yaml", "fifo", "/proc/self/mem"]


def _bytes(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    kind = rng.randrange(4)
    if kind == 0:
        return data[:at] + bytes([rng.choice(NASTY_BYTES)]) + data[at:]
    if kind == 1:
        return data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
    if kind == 2:
        return data[:at] + data[at + rng.randrange(1, 40) :]
    return data[:at]


def _lines(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    kind = rng.randrange(5)
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[j])
    elif kind == 2:
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:
        lines[i] = b" " * rng.randrange(1, 6) + lines[i]
    else:
        lines.insert(i, rng.choice([b"includes: [/dev/zero]", b"- &a [*a]", b"!!python/object:os.system", b"\x00"]))
    return b"\n".join(lines)


def _places(tree: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in ``tree``."""
    found: list[tuple[Any, Any]] = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    for key, value in items:
        found.append((tree, key))
        found += _places(value)
    return found


def _structure(data: bytes, rng: random.Random) -> bytes:
    tree = yaml.safe_load(data)
    if rng.random() < 0.25:
        tree["includes"] = [rng.choice(NASTY_INCLUDES) for _ in range(rng.randrange(1, 3))]
        return yaml.safe_dump(tree).encode()
    container, key = rng.choice(_places(tree))
    if rng.random() < 0.3:
        del container[key]
    else:
        container[key] = rng.choice(NASTY_VALUES)
    return yaml.safe_dump(tree).encode()


MUTATORS: list[Callable[[bytes, random.Random], bytes]] = [_bytes, _lines, _structure]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three mutations; structural ones only while the text still parses."""
    for _ in range(rng.randrange(1, 4)):
        mutator = rng.choice(MUTATORS)
        try:
            data = mutator(data, rng)
        except (yaml.YAMLError, LookupError, TypeError, AttributeError, ValueError):
            data = _bytes(data, rng)
    return data


def _load(path: Path) -> str:
    """``loaded`` or ``problems``; any other exception propagates."""
    try:
        load_topology(path, environ={})
    except SpecError as exc:
        assert exc.problems, "a SpecError lists at least one problem"
        for problem in exc.problems:
            assert problem.file, problem
        return "problems"
    return "loaded"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


class TestMutatedFiles:
    @pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
    def test_every_mutation_loads_or_raises_spec_error(self, source: Path, workdir: Path) -> None:
        """Hundreds of mutated shipped files: each loads or gives a SpecError, never a traceback."""
        original = source.read_bytes()
        escaped: list[str] = []
        outcomes = {"loaded": 0, "problems": 0}
        for seed in range(CASES_PER_SOURCE):
            case = workdir / "case.yaml"
            case.write_bytes(mutate(original, random.Random(f"{source.name}:{seed}")))
            try:
                outcomes[_load(case)] += 1
            except Exception as exc:  # noqa: BLE001 - what the test is looking for
                escaped.append(f"seed {seed}: {type(exc).__name__}: {exc}")
        assert not escaped, "\n".join(escaped)
        assert outcomes["problems"] > CASES_PER_SOURCE // 2

    def test_the_sources_are_there(self) -> None:
        """Every shipped topology file is fuzzed."""
        assert len(SOURCES) >= 5


class TestHostileInputs:
    def test_a_nul_character_is_a_problem_on_its_line(self, workdir: Path) -> None:
        (workdir / "t.yaml").write_text("name: t\nspouts: []\nbolts: [\x00]\n")
        with pytest.raises(SpecError) as info:
            load_topology("t.yaml")
        assert [str(p) for p in info.value.problems] == [
            "t.yaml:3: invalid YAML: the character #x0000 is not allowed (column 9)"
        ]

    @pytest.mark.parametrize("target", ["/dev/zero", "fifo", "."])
    def test_an_include_that_is_not_a_regular_file_is_refused(self, workdir: Path, target: str) -> None:
        (workdir / "t.yaml").write_text(f"name: t\nincludes:\n  - {target}\nspouts: []\n")
        with pytest.raises(SpecError) as info:
            load_topology("t.yaml")
        assert any(
            str(p).startswith("t.yaml:3 includes[0]: cannot read included file") and "not a regular file" in str(p)
            for p in info.value.problems
        ), info.value

    def test_an_include_larger_than_the_load_is_refused(self, workdir: Path) -> None:
        (workdir / "big.yaml").write_bytes(b"#" * (MAX_LOAD_BYTES + 1))
        (workdir / "t.yaml").write_text("name: t\nincludes: [big.yaml]\nspouts: []\n")
        with pytest.raises(SpecError) as info:
            load_topology("t.yaml")
        assert any(
            str(p).startswith("t.yaml:2 includes[0]: cannot read included file big.yaml: more than 256 KiB of text")
            for p in info.value.problems
        ), info.value

    def test_a_properties_file_larger_than_the_limit_is_refused(self, workdir: Path) -> None:
        (workdir / "big.properties").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
        with pytest.raises(ValueError, match="big.properties: larger than 4 MiB"):
            read_properties("big.properties")

    def test_a_properties_file_that_is_not_regular_is_refused(self, workdir: Path) -> None:
        with pytest.raises(ValueError, match="/dev/zero: not a regular file"):
            read_properties("/dev/zero")

    def test_deep_nesting_is_a_problem(self, workdir: Path) -> None:
        (workdir / "t.yaml").write_text("name: t\nspouts: " + "[" * 5000 + "]" * 5000 + "\n")
        with pytest.raises(SpecError, match="nested more than 100 levels deep"):
            load_topology("t.yaml")


@dataclass
class Load:
    """What one load did: each file it read (real path, characters) and its peak allocation."""

    reads: list[tuple[str, int]] = field(default_factory=list)
    peak_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    message: str = ""


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path, dict[str, str]], Load]]:
    """Loads a file with every read recorded and Python's allocations traced."""

    def load(path: Path, properties: dict[str, str]) -> Load:
        done = Load()
        read_text = _reading.read_text

        def recording(file: str | Path, limit: int = MAX_FILE_BYTES) -> str:
            try:
                text = read_text(file, limit)
            except ValueError:
                done.reads.append((os.path.realpath(file), 0))
                raise
            done.reads.append((os.path.realpath(file), len(text)))
            return text

        monkeypatch.setattr(_reading, "read_text", recording)
        tracemalloc.start()
        try:
            load_topology(path, properties, environ={})
        except SpecError as exc:
            done.problems = [str(p) for p in exc.problems]
            done.message = str(exc)
        finally:
            done.peak_bytes = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        return done

    yield load


MEMORY_BOUND = 48 * 1024 * 1024
"""The most Python may allocate while loading any hostile file (the largest loadable ones peak
near 20 MiB traced)."""

EXPECTED: dict[str, str] = {
    "fanout_growing": "with this include the file would hold more than 10,000 values and keys",
    "same_big_include": "big.yaml: more than 256 KiB of text in the file and its includes",
    "symlinks": "link0.yaml: more than 256 KiB of text in the file and its includes",
    "symlink_cycle": "include cycle:",
    "many_files": "one load reads at most 64 files",
    "fifo": "fifo: not a regular file",
    "huge_file": "cannot read the file: more than 256 KiB of text",
    "many_values": "cannot read the file: more than 256 KiB of text",
    "huge_scalar": "cannot read the file: more than 256 KiB of text",
    "huge_id": "cannot read the file: more than 256 KiB of text",
    "placeholder_bomb": "cannot read the file: more than 256 KiB of text",
    "unresolved_bomb": "cannot read the file: more than 256 KiB of text",
    "values_over": "t.yaml:5: more than 10,000 values and keys in the file and its includes",
    "values_under": "",
    "long_scalar": "t.yaml:7: a value of 204,800 characters, longer than the 65,536 allowed",
    "long_id": "streams[0].from: unknown component",
    "placeholders_over": "t.yaml:5: substituting ${big} here makes the text pass the",
    "unresolved_many": "t.yaml:5 spouts[0].kwargs.words[7999]: unresolved ${nope}",
    "config_typos": "config.max_spout_pendin2999: unknown config key (did you mean 'max_spout_pending'?)",
    "many_components": "",
}
"""Per generated case, a problem it must give ("": it loads, or fails only as any file naming a
module that does not exist would)."""


class TestBoundedLoads:
    """Every hostile file ends in a ``SpecError`` at its file and line (or loads), having read each
    real path at most once, at most ``MAX_FILES`` files and ``MAX_LOAD_BYTES`` of text, and within a
    memory bound, whatever it asks for."""

    def test_every_generated_case_has_an_expectation(self) -> None:
        assert sorted(EXPECTED) == sorted(CASES)

    @pytest.mark.parametrize("name", sorted(CASES))
    def test_generated_case(self, name: str, workdir: Path, recorded: Callable[[Path, dict[str, str]], Load]) -> None:
        (workdir / "case").mkdir()
        path, properties = CASES[name](workdir / "case")
        load = recorded(path, properties)
        self._within_bounds(load)
        if EXPECTED[name]:
            assert any(EXPECTED[name] in p for p in load.problems), load.message[:2000]
            assert all(":" in p.split(" ")[0] for p in load.problems), load.message[:2000]

    @pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
    def test_corpus_file(
        self, path: Path, monkeypatch: pytest.MonkeyPatch, recorded: Callable[[Path, dict[str, str]], Load]
    ) -> None:
        """The corpus's own hostile files (billion_laughs, merge_laughs, deep_nesting,
        include_fanout, include_dev_zero) among the rest; what each must say is the loader test's."""
        monkeypatch.chdir(ROOT)
        self._within_bounds(recorded(path.relative_to(ROOT), {}))

    def test_the_fanout_reads_each_file_once(self, recorded: Callable[[Path, dict[str, str]], Load]) -> None:
        """Seven files, a million includes of the last: seven reads, one problem."""
        load = recorded(ROOT / "tests" / "topology_file_corpus" / "include_fanout.yaml", {})
        assert len(load.reads) == 8
        assert len(load.problems) == 1

    def test_a_file_with_thousands_of_problems_lists_a_screenful(
        self, workdir: Path, recorded: Callable[[Path, dict[str, str]], Load]
    ) -> None:
        (workdir / "case").mkdir()
        load = recorded(*CASES["unresolved_many"](workdir / "case"))
        assert len(load.problems) == 8000
        assert load.message.count("\n") == SHOWN_PROBLEMS + 1
        assert load.message.endswith("... and 7,900 more")

    @staticmethod
    def _within_bounds(load: Load) -> None:
        reals = [real for real, _ in load.reads]
        assert len(reals) == len(set(reals)), "a real path read twice"
        assert len(reals) <= MAX_FILES
        assert sum(size for _, size in load.reads) <= MAX_LOAD_BYTES
        assert load.peak_bytes < MEMORY_BOUND, f"{load.peak_bytes / 2**20:.1f} MiB traced"
        assert len(load.problems) <= MAX_VALUES
