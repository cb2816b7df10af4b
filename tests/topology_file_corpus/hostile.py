"""Hostile topology files too large or too odd to keep in the corpus as they are (a 4 MiB file, a
FIFO, symlinks, a chain of generated includes): each ``make_*`` writes one case into a
directory and returns the file to load and the properties to load it with.

``tests/test_topology_file_fuzz.py`` loads each and asserts on what the loader read (files,
bytes, values); ``benchmarks/hostile_topology_files.py`` times each in a process of its own.
The first cases are sized as issue 32 found them, not to the loader's limits, so that the figures
before and after a change to the limits compare; the ones after ``unresolved_bomb`` sit just
within or just past one limit each (values, the longest value, substitution), where the loader
does the most work it allows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["CASES", "HEADER"]

HEADER = "name: hostile\nspouts:\n  - id: words\n    class: tests.topology_file_components.WordSpout\n"
BIG_BYTES = 4 * 1024 * 1024 - 1024
"""Just under the per-file limit the loader had before per-load budgets: a file it read whole."""

Case = tuple[Path, dict[str, str]]


def _big_fragment(directory: Path) -> Path:
    """A mapping of ``BIG_BYTES`` that is all comment but one key: cheap to parse, costly to read."""
    path = directory / "big.yaml"
    line = "#" + "c" * 1023 + "\n"
    path.write_text("config: {topology.debug: true}\n" + line * (BIG_BYTES // len(line)))
    return path


def make_fanout_growing(directory: Path, depth: int = 20) -> Case:
    """Each file adds a spout without an ``id`` and includes the next twice: merged by ``id``, the
    spouts list would double at every level (2 ** 20 entries) even if each file were read once."""
    for level in range(1, depth + 1):
        includes = f"includes: [level{level + 1}.yaml, level{level + 1}.yaml]\n" if level < depth else ""
        (directory / f"level{level}.yaml").write_text(f"{includes}spouts:\n  - class: x.Y{level}\n")
    root = directory / "t.yaml"
    root.write_text(HEADER + "includes: [level1.yaml]\n")
    return root, {}


def make_same_big_include(directory: Path, times: int = 200) -> Case:
    """One 4 MiB file included ``times`` times."""
    _big_fragment(directory)
    root = directory / "t.yaml"
    root.write_text(HEADER + "includes:\n" + "  - big.yaml\n" * times)
    return root, {}


def make_symlinks(directory: Path, links: int = 200) -> Case:
    """``links`` symlinks to one 4 MiB file, each included once: one real path."""
    big = _big_fragment(directory)
    for i in range(links):
        (directory / f"link{i}.yaml").symlink_to(big)
    root = directory / "t.yaml"
    root.write_text(HEADER + "includes:\n" + "".join(f"  - link{i}.yaml\n" for i in range(links)))
    return root, {}


def make_symlink_cycle(directory: Path) -> Case:
    """The file includes a symlink to itself."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "includes: [me.yaml]\n")
    (directory / "me.yaml").symlink_to(root)
    return root, {}


def make_many_files(directory: Path, files: int = 2000) -> Case:
    """``files`` distinct small files, all included by the topology file."""
    for i in range(files):
        (directory / f"part{i}.yaml").write_text(f"config: {{my.setting.{i}: {i}}}\n")
    root = directory / "t.yaml"
    root.write_text(HEADER + "includes:\n" + "".join(f"  - part{i}.yaml\n" for i in range(files)))
    return root, {}


def make_fifo(directory: Path) -> Case:
    os.mkfifo(directory / "fifo")
    root = directory / "t.yaml"
    root.write_text(HEADER + "includes: [fifo]\n")
    return root, {}


def make_huge_file(directory: Path) -> Case:
    """A topology file of 64 MiB (comments)."""
    root = directory / "t.yaml"
    with open(root, "w") as f:
        f.write(HEADER)
        line = "#" + "c" * 1023 + "\n"
        for _ in range(64 * 1024):
            f.write(line)
    return root, {}


def make_many_values(directory: Path) -> Case:
    """Almost 4 MiB of one-character list items: a million values to parse."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "    kwargs:\n      words: [" + "a," * (BIG_BYTES // 2) + "a]\n")
    return root, {}


def make_huge_scalar(directory: Path) -> Case:
    """A class name of almost 4 MiB: every message that quotes it, and every did-you-mean."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "bolts:\n  - id: b\n    class: " + "x" * BIG_BYTES + "\n")
    return root, {}


def make_huge_id(directory: Path) -> Case:
    """A stream from a component of a 1 MiB name: the did-you-mean compares it with every id."""
    root = directory / "t.yaml"
    name = "w" * (1024 * 1024)
    root.write_text(HEADER + f"bolts:\n  - {{id: b, class: x.Y}}\nstreams:\n  - {{from: {name}, to: b}}\n")
    return root, {}


def make_placeholder_bomb(directory: Path) -> Case:
    """Half a million ``${big}`` placeholders, each replaced by a value of 4 KiB: 2.5 GiB of text."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "    kwargs: {words: [" + "${big}," * (BIG_BYTES // 8) + "]}\n")
    return root, {"big": "b" * 4096}


def make_unresolved_bomb(directory: Path) -> Case:
    """Half a million unresolved placeholders, each a problem to report."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "    kwargs: {words: [" + "${nope}," * (BIG_BYTES // 9) + "]}\n")
    return root, {}


def make_values_over(directory: Path) -> Case:
    """100,000 one-character list items in 200 KiB: within the bytes, over the values."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "    kwargs: {words: [" + "a," * 100_000 + "]}\n")
    return root, {}


def make_values_under(directory: Path) -> Case:
    """9,900 words in a spout's kwargs: just within the values, the most a load may build."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "    kwargs: {words: [" + "w," * 9_900 + "]}\n")
    return root, {}


def make_long_scalar(directory: Path) -> Case:
    """A class name of 200 KiB: within the bytes, over the longest value."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "bolts:\n  - id: b\n    class: " + "x" * 200 * 1024 + "\n")
    return root, {}


def make_long_id(directory: Path) -> Case:
    """A stream from a component of a name just within the longest value: every message that
    quotes it, and the did-you-mean that compares it with every id."""
    root = directory / "t.yaml"
    name = "w" * (64 * 1024 - 1)
    root.write_text(HEADER + f"bolts:\n  - {{id: b, class: x.Y}}\nstreams:\n  - {{from: {name}, to: b}}\n")
    return root, {}


def make_placeholders_over(directory: Path) -> Case:
    """20,000 ``${big}`` in 140 KiB, each replaced by 4 KiB: 80 MiB once substituted."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "    kwargs: {words: [" + "${big}," * 20_000 + "]}\n")
    return root, {"big": "b" * 4096}


def make_unresolved_many(directory: Path) -> Case:
    """8,000 unresolved placeholders, each a problem on the same line."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "    kwargs: {words: [" + "${nope}," * 8_000 + "]}\n")
    return root, {}


def make_config_typos(directory: Path) -> Case:
    """3,000 misspelt settings, each with a did-you-mean."""
    root = directory / "t.yaml"
    root.write_text(HEADER + "config:\n" + "".join(f"  max_spout_pendin{i}: 1\n" for i in range(3_000)))
    return root, {}


def make_many_components(directory: Path) -> Case:
    """700 bolts, each with a stream from the spout: near the most components the values allow."""
    root = directory / "t.yaml"
    bolts = "".join(f"  - {{id: b{i}, class: tests.topology_file_components.Upper}}\n" for i in range(700))
    streams = "".join(f"  - {{from: words, to: b{i}, grouping: {{type: shuffle}}}}\n" for i in range(700))
    root.write_text(HEADER + "bolts:\n" + bolts + "streams:\n" + streams)
    return root, {}


CASES: dict[str, Callable[[Path], Case]] = {
    "fanout_growing": make_fanout_growing,
    "same_big_include": make_same_big_include,
    "symlinks": make_symlinks,
    "symlink_cycle": make_symlink_cycle,
    "many_files": make_many_files,
    "fifo": make_fifo,
    "huge_file": make_huge_file,
    "many_values": make_many_values,
    "huge_scalar": make_huge_scalar,
    "huge_id": make_huge_id,
    "placeholder_bomb": make_placeholder_bomb,
    "unresolved_bomb": make_unresolved_bomb,
    "values_over": make_values_over,
    "values_under": make_values_under,
    "long_scalar": make_long_scalar,
    "long_id": make_long_id,
    "placeholders_over": make_placeholders_over,
    "unresolved_many": make_unresolved_many,
    "config_typos": make_config_typos,
    "many_components": make_many_components,
}
"""The generated cases by name. The corpus itself holds the cases small enough to keep as text
(``billion_laughs.yaml``, ``merge_laughs.yaml``, ``deep_nesting.yaml``, ``include_dev_zero.yaml``,
``include_fanout.yaml``)."""
