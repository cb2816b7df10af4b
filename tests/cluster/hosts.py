"""Separate hosts on one machine: network namespaces wired to a switch, each with its own IP.

    host 0 (10.x.y.1) --veth--+
    host 1 (10.x.y.2) --veth--+-- br0 in the switch namespace
    host 2 (10.x.y.3) --veth--+

Each host is a network namespace with its loopback and one ``eth0``; the other end of its
cable is a port of a bridge in a namespace of its own (the "switch"), so nothing of the machine's
own network is touched and the hosts reach nothing but each other. ``cut`` pulls a host's cable
at the switch (a partition), ``heal`` plugs it back; ``kill`` kills every process in a host (a
lost machine). ``close`` kills every process left in the hosts and deletes the namespaces.

Names carry this process' id, so several runs on one machine never meet; the /24 is one that
no route of the machine uses.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

__all__ = ["Hosts", "cannot_make_hosts"]

COMMAND_SECS = 20.0
KILL_WAIT_SECS = 10.0


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=COMMAND_SECS)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def cannot_make_hosts() -> str | None:
    """Why namespaces cannot be made here (``None``: they can)."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"rfprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"network namespaces cannot be made here: {exc}"
    _ip("netns", "del", probe)
    return None


def free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no address or route of this machine overlaps."""
    used = [ipaddress.ip_network(word, strict=False) for word in _ip("-4", "route").split() if "/" in word]
    used += [ipaddress.ip_network(word, strict=False) for word in _ip("-4", "-o", "addr").split() if "/" in word]
    for third in range(200, 256):
        net = ipaddress.ip_network(f"10.{os.getpid() % 200 + 20}.{third}.0/24")
        if not any(net.overlaps(other) for other in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the test's hosts")


class Hosts:
    def __init__(self, count: int) -> None:
        tag = f"rf{os.getpid()}"
        self.switch = f"{tag}-sw"
        self.names = [f"{tag}-h{i}" for i in range(count)]
        net = free_subnet()
        self.ips = [str(net.network_address + i + 1) for i in range(count)]
        self.prefix = net.prefixlen
        self._made: list[str] = []
        try:
            self._wire()
        except BaseException:
            self.close()
            raise

    @classmethod
    def of(cls, switch: str, names: list[str], ips: list[str]) -> Hosts:
        """The hosts another process made (to kill and cut them, not to close them)."""
        hosts = cls.__new__(cls)
        hosts.switch, hosts.names, hosts.ips, hosts._made = switch, names, ips, []
        return hosts

    def describe(self) -> dict[str, object]:
        """What ``of`` takes."""
        return {"switch": self.switch, "names": self.names, "ips": self.ips}

    def _wire(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (name, ip) in enumerate(zip(self.names, self.ips, strict=True)):
            _ip("netns", "add", name)
            self._made.append(name)
            _ip("link", "add", "eth0", "netns", name, "type", "veth", "peer", "name", f"p{i}", "netns", self.switch)
            _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", name, "addr", "add", f"{ip}/{self.prefix}", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` to run inside ``host``."""
        return ["ip", "netns", "exec", self.names[host], *argv]

    def pids(self, host: int) -> list[int]:
        return [int(p) for p in _ip("netns", "pids", self.names[host]).split()]

    def kill(self, host: int) -> int:
        """SIGKILL every process in ``host`` (again, until none is left); how many there were."""
        killed: set[int] = set()
        deadline = time.monotonic() + KILL_WAIT_SECS
        while time.monotonic() < deadline:
            pids = self.pids(host)
            if not pids:
                break
            for pid in pids:
                killed.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return len(killed)

    def cut(self, host: int) -> None:
        """Pull ``host``'s cable out of the switch: it reaches no other host, nor they it."""
        _ip("-n", self.switch, "link", "set", f"p{host}", "down")

    def heal(self, host: int) -> None:
        _ip("-n", self.switch, "link", "set", f"p{host}", "up")

    def close(self) -> None:
        """Kill every process left in the hosts, then delete the namespaces (and their cables)."""
        for name in reversed(self._made):
            if name != self.switch:
                self.kill(self.names.index(name))
            try:
                _ip("netns", "del", name)
            except RuntimeError:
                pass
        self._made.clear()
