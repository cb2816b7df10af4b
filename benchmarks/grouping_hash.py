"""What a fields grouping costs per tuple, by the type of its key.

    python benchmarks/grouping_hash.py [--repeat R]

Times ``choose_tasks`` of a fields grouping on one field, on two fields (the key and an int),
and of a partial-key grouping, over 1,000 distinct keys of each type, and prints nanoseconds a
call (best of ``--repeat``). Run it on two versions of ``rayflow/_groupings.py`` to see what a
change to ``key_bytes`` costs; string keys on one field take the fast path (one CRC-32 of the
UTF-8 bytes) and are the common case.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rayflow._context import TopologyContext  # noqa: E402
from rayflow._groupings import FieldsGrouping, PartialKeyGrouping, StreamId  # noqa: E402

KEYS: dict[str, list[Any]] = {
    "str": [f"word{i}" for i in range(1000)],
    "int": [i * 7919 for i in range(1000)],
    "float": [i * 0.5 for i in range(1000)],
    "tuple(str, int)": [(f"user{i}", i) for i in range(1000)],
    "Decimal": [Decimal(i) for i in range(1000)],
}


def grouping(kind: type[FieldsGrouping], fields: list[str]) -> FieldsGrouping:
    context = TopologyContext(1, {1: "src", 2: "dst", 3: "dst", 4: "dst", 5: "dst"}, {"src": {"default": ("k", "n")}})
    g = kind(fields)
    g.prepare(context, StreamId("src", "default"), [2, 3, 4, 5])
    return g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    groupings = {
        "fields(k)": grouping(FieldsGrouping, ["k"]),
        "fields(k, n)": grouping(FieldsGrouping, ["k", "n"]),
        "partial_key(k)": grouping(PartialKeyGrouping, ["k"]),
    }
    print(f"{'key':16} " + " ".join(f"{name:>15}" for name in groupings) + "   (ns a call)")
    for key_type, keys in KEYS.items():
        rows = [[key, i] for i, key in enumerate(keys)]
        cells = []
        for g in groupings.values():

            def run(choose: Any = g.choose_tasks, rows: list[list[Any]] = rows) -> None:
                for row in rows:
                    choose(1, row)

            best = min(timeit.repeat(run, number=20, repeat=args.repeat))
            cells.append(f"{best / (20 * len(rows)) * 1e9:15.0f}")
        print(f"{key_type:16} " + " ".join(cells))


if __name__ == "__main__":
    main()
