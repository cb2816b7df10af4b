"""What each hostile topology file costs the loader: CPU seconds and peak RSS, one process per case.

    python benchmarks/hostile_topology_files.py [--timeout S] [--memory MIB] [--before DIR] [CASE ...]

The cases are the generated ones of ``tests/topology_file_corpus/hostile.py`` and the hostile
files kept in the corpus itself. Each runs ``load_topology`` in a fresh interpreter under an
address-space limit (``--memory``, so that an attack that would exhaust the machine ends in a
``MemoryError`` instead) and is killed after ``--timeout`` seconds. Printed per case: the outcome
(the first problem, or the exception), the CPU seconds of the load alone (imports excluded), the
wall seconds of the whole process, and its peak RSS beside the RSS after the imports.
``--before DIR`` runs each case against the ``rayflow`` package in ``DIR`` too, just before this
tree's (``git archive REV rayflow | tar -x -C DIR``), so the two compare in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.topology_file_corpus.hostile import CASES  # noqa: E402

CORPUS = ROOT / "tests" / "topology_file_corpus"
CORPUS_CASES = ["billion_laughs", "merge_laughs", "deep_nesting", "include_dev_zero", "include_fanout"]

CHILD = """
import json, resource, sys, time
from rayflow.topology_file import SpecError, load_topology
path, properties = sys.argv[1], json.loads(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.process_time()
try:
    load_topology(path, properties, environ={})
    outcome = "loaded"
except SpecError as exc:
    outcome = f"SpecError, {len(exc.problems)} problem(s): {str(exc.problems[0])[:110]}"
except BaseException as exc:
    outcome = f"{type(exc).__name__}: {str(exc)[:110]}"
print(json.dumps({"outcome": outcome, "cpu": time.process_time() - started, "imported_kib": before}))
"""


def run(
    path: Path, properties: dict[str, str], cwd: Path, timeout: float, memory_mib: int, package: Path
) -> dict[str, object]:
    limit = memory_mib * 1024 * 1024

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", CHILD, str(path), json.dumps(properties)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=limit_memory,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(package), str(ROOT)]))},
    )
    killed = False
    while True:
        pid, _, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > timeout:
            child.kill()
            killed = True
            _, _, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    wall = time.monotonic() - started
    assert child.stdout is not None
    output = child.stdout.read().decode()
    child.returncode = 0  # reaped by wait4 above
    result: dict[str, object] = {"wall": wall, "peak_mib": usage.ru_maxrss / 1024}
    if killed:
        result.update(outcome=f"killed after {timeout:g} s", cpu=usage.ru_utime + usage.ru_stime)
    elif output:
        reported = json.loads(output)
        result.update(reported, imported_mib=reported["imported_kib"] / 1024)
    else:
        result.update(outcome="died without a word", cpu=usage.ru_utime + usage.ru_stime)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--memory", type=int, default=2048, help="address-space limit per case, MiB")
    parser.add_argument("--before", type=Path, help="a directory holding an older rayflow package")
    args = parser.parse_args()
    names = args.cases or [*CASES, *CORPUS_CASES]
    trees = [("before", args.before), ("after", ROOT)] if args.before else [("", ROOT)]
    print(f"{'case':<18} {'':<6} {'cpu s':>7} {'wall s':>7} {'peak MiB':>9} {'imports MiB':>11}  outcome")
    for name in names:
        for label, package in trees:
            with tempfile.TemporaryDirectory() as tmp:
                if name in CASES:
                    path, properties = CASES[name](Path(tmp))
                    cwd = Path(tmp)
                else:
                    path, properties, cwd = (CORPUS / f"{name}.yaml").relative_to(ROOT), {}, ROOT
                r = run(path, properties, cwd, args.timeout, args.memory, package)
            imported = f"{r['imported_mib']:.0f}" if "imported_mib" in r else "-"
            outcome = str(r["outcome"]).replace(tmp, "")
            figures = f"{r['cpu']:>7.2f} {r['wall']:>7.2f} {r['peak_mib']:>9.0f} {imported:>11}"
            print(f"{name:<18} {label:<6} {figures}  {outcome}", flush=True)


if __name__ == "__main__":
    main()
