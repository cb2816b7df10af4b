"""What unauthenticated half-handshakes leave in a task's memory, for one or more source trees side
by side in one run (``docs/security.md``, *Limits on what a peer can make a task do*):

    python benchmarks/half_handshakes.py [--tree DIR ...] [--connections N] [--handshake-secs S]

Each tree (default: this repository; give an older checkout, e.g. ``git archive REV rayflow |
tar -x -C /tmp/before``, to compare) runs a task's stream ``Listener`` in a process of its own
(its default cap of 128 handshakes at once), on 127.0.0.1. ``--connections`` clients each open a
TCP connection and send the first half of a TLS 1.3 client hello, then nothing: the listener
starts a TLS handshake for each, evicts the oldest over the cap (``busy``) and cuts the rest at
``--handshake-secs`` (``slow``). Printed per tree: the listener process's RSS before, once every
connection was refused, and after an explicit ``gc.collect()`` (what only a cycle collection
would have given back), in MB.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.test_stream_security import client_hello  # noqa: E402

SERVE = """
import asyncio, gc, sys
from rayflow._runtime.stream_keys import TopologyKeys
from rayflow._runtime.streams import Listener

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0

async def main():
    listener = Listener(TopologyKeys().issue(2), lambda *a: None, handshake_secs=float(sys.argv[1]))
    listener.refusals.warn = lambda kind, message: None
    host, port = await listener.start("127.0.0.1")
    print(port, flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        if line == "gc":
            gc.collect()
        elif line == "idle":
            while listener.handshakes:
                await asyncio.sleep(0.05)
        print(f"{rss_mb():.1f}", flush=True)

asyncio.run(main())
"""


def measure(tree: Path, connections: int, handshake_secs: float) -> tuple[float, float, float]:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(handshake_secs)],
        cwd=tree,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None

    def ask(what: str) -> float:
        server.stdin.write(what + "\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        return float(server.stdout.readline())  # type: ignore[union-attr]

    port = int(server.stdout.readline())
    half = client_hello()
    half = half[: len(half) // 2]
    before = ask("rss")
    held: list[socket.socket] = []
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(half)
        held.append(sock)
        if len(held) > 200:  # the oldest were evicted long ago: let them go client-side too
            held.pop(0).close()
    time.sleep(0.2)
    after = ask("idle")
    collected = ask("gc")
    for sock in held:
        sock.close()
    server.stdin.close()
    server.wait(timeout=30)
    return before, after, collected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", type=Path, help="a source tree (repeatable)")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--handshake-secs", type=float, default=2.0)
    args = parser.parse_args()
    print(f"{args.connections} half-handshakes, listener RSS in MB")
    print(f"{'tree':<40} {'before':>8} {'after':>8} {'growth':>8} {'after gc':>9}")
    for tree in args.tree or [ROOT]:
        before, after, collected = measure(tree, args.connections, args.handshake_secs)
        print(f"{str(tree):<40} {before:>8.1f} {after:>8.1f} {after - before:>+8.1f} {collected:>9.1f}")


if __name__ == "__main__":
    main()
