"""What a hostile client can make the web page's process hold, for one or more source trees side
by side in one run (``docs/security.md``, *The web page*):

    python benchmarks/ui_bounds.py [--tree DIR ...] [--connections N] [--trickle-secs S]

Each tree (default: this repository; give an older checkout, e.g. ``git archive REV rayflow
tests | tar -x -C /tmp/before``, to compare) serves a page in a process of its own, watching a
handle without Ray (``tests.ui_helpers.FakeHandle``), and is attacked on 127.0.0.1:

1. one ``POST /api/kill`` without a token announcing and sending a 100 MB body, then three at
   once (what a cross-site page open in the user's browser can send): the server process's
   peak RSS growth over its RSS before (sampled every 10 ms, and ``VmHWM``), how much of the
   body it took before it answered or closed, and the status it answered;
2. ``--connections`` slowloris clients that send a request line and then one header line per
   second, never the blank line: the process's threads and RSS at the peak, how many of those
   connections it has closed after ``--trickle-secs``, and how long a normal ``GET`` takes
   meanwhile.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODY = 100 * 1024 * 1024
CHUNK = 1024 * 1024
SERVE = """
import sys, time
from rayflow._ui import UiServer
from tests.ui_helpers import FakeHandle
page = UiServer(ray_metrics=False).serve(FakeHandle("bench"))
print(page.port, flush=True)
time.sleep(3600)
"""


def status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (kB) and Threads of a process."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(value.split()[0])
    return out


@dataclass
class Peak:
    """The largest RSS and thread count of ``pid`` seen while it runs (a 10 ms sampler)."""

    pid: int
    rss_kb: int = 0
    threads: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Peak:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            now = status(self.pid)
            self.rss_kb, self.threads = max(self.rss_kb, now["VmRSS"]), max(self.threads, now["Threads"])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def post_body(port: int, result: list[tuple[int, str]]) -> None:
    """Send the 100 MB POST without a token; append (MB sent before the server answered or
    closed, its status line)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = f"POST /api/kill HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {BODY}\r\n\r\n"
    sent = 0
    chunk = b"x" * CHUNK
    try:
        sock.sendall(head.encode())
        sock.setblocking(False)
        while sent < BODY:  # stop as soon as the server has answered: a client would
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    break
            except BlockingIOError:
                pass
            try:
                sent += sock.send(chunk[: BODY - sent])
            except BlockingIOError:
                time.sleep(0.001)
        sock.setblocking(True)
        line = sock.makefile("rb").readline().decode().strip()
    except OSError as exc:
        line = f"closed ({type(exc).__name__})"
    finally:
        sock.close()
    result.append((sent // (1024 * 1024), line or "closed"))


def big_posts(pid: int, port: int, clients: int) -> str:
    before = status(pid)
    results: list[tuple[int, str]] = []
    with Peak(pid) as peak:
        threads = [threading.Thread(target=post_body, args=(port, results)) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(0.5)
    after = status(pid)
    grew = (max(peak.rss_kb, after["VmHWM"]) - before["VmRSS"]) / 1024
    took = ", ".join(f"{mb} MB -> {line}" for mb, line in results)
    kept = (after["VmRSS"] - before["VmRSS"]) / 1024
    return f"{clients} x 100 MB POST: peak RSS +{grew:.0f} MB (RSS after +{kept:.0f} MB); {took}"


def get_secs(port: int) -> float:
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(f"GET /api/topology HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        while sock.recv(65536):
            pass
    return time.perf_counter() - start


def slowloris(pid: int, port: int, connections: int, seconds: float) -> str:
    before = status(pid)
    socks = []
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        socks.append(sock)
    closed: set[int] = set()
    gets = []
    with Peak(pid) as peak:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for i, sock in enumerate(socks):
                if i in closed:
                    continue
                try:
                    sock.sendall(b"X-Trickle: 1\r\n")
                    sock.setblocking(False)
                    try:
                        if sock.recv(4096) == b"":
                            closed.add(i)
                    except BlockingIOError:
                        pass
                    finally:
                        sock.setblocking(True)
                except OSError:
                    closed.add(i)
            gets.append(get_secs(port))
            time.sleep(1.0)
    for sock in socks:
        sock.close()
    threads, rss = peak.threads - before["Threads"], (peak.rss_kb - before["VmRSS"]) / 1024
    return (
        f"{connections} slowloris connections for {seconds:.0f} s: threads +{threads} at the peak, RSS +{rss:.1f} MB; "
        f"{len(closed)} closed by the server; a GET meanwhile {max(gets) * 1000:.0f} ms at worst"
    )


def run(tree: Path, connections: int, seconds: float) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    server = subprocess.Popen([sys.executable, "-c", SERVE], cwd=tree, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        posts = [big_posts(server.pid, port, clients) for clients in (1, 3)]
        return [*posts, slowloris(server.pid, port, connections, seconds)]
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", help="a source tree (default: this one)")
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--trickle-secs", type=float, default=20.0)
    args = parser.parse_args()
    for tree in args.tree or [ROOT]:
        print(f"{tree}:")
        for line in run(tree.resolve(), args.connections, args.trickle_secs):
            print(f"  {line}")


if __name__ == "__main__":
    main()
