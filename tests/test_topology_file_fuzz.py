"""Hostile topology files: whatever the bytes, ``load_topology`` loads the file or raises a
``SpecError`` placing each problem at a file and line, never another exception.

A seeded mutator (bytes, lines, YAML structure) turns the topology files we ship into broken
ones; a failure names the seed, so ``mutate(source, random.Random(seed))`` replays it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rayflow.topology_file import SpecError, load_topology, read_properties
from rayflow.topology_file._reading import MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parent.parent
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

    def test_an_include_larger_than_the_limit_is_refused(self, workdir: Path) -> None:
        (workdir / "big.yaml").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
        (workdir / "t.yaml").write_text("name: t\nincludes: [big.yaml]\nspouts: []\n")
        with pytest.raises(SpecError) as info:
            load_topology("t.yaml")
        assert any("big.yaml: larger than 4 MiB" in str(p) for p in info.value.problems), info.value

    def test_a_properties_file_that_is_not_regular_is_refused(self, workdir: Path) -> None:
        with pytest.raises(ValueError, match="/dev/zero: not a regular file"):
            read_properties("/dev/zero")

    def test_deep_nesting_is_a_problem(self, workdir: Path) -> None:
        (workdir / "t.yaml").write_text("name: t\nspouts: " + "[" * 5000 + "]" * 5000 + "\n")
        with pytest.raises(SpecError, match="nested more than 100 levels deep"):
            load_topology("t.yaml")
