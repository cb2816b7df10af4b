"""``UiServer``: a running topology's web page, its JSON API and ``/metrics``, served by aiohttp's
server on one event loop, on a daemon thread of the driver.

Routes (``docs/ui.md`` documents them for scripts):

    GET  /                      the page (static files of this package: no CDN, no internet)
    GET  /api/topology          name, state, components and their inputs
    GET  /api/metrics           the latest poll: per component and per task
    GET  /api/history?since=T   throughput and complete latency, a point per poll
    GET  /api/errors            recent errors, newest first, with time, task and component
    GET  /api/graph.svg         the topology drawn as ``rayflow graph`` draws it (Graphviz)
    GET  /metrics               Prometheus text
    POST /api/activate | /api/deactivate | /api/kill

Who may act. It binds 127.0.0.1 unless told otherwise, and refuses another address without a
token. A POST must carry the header ``X-Rayflow-Token``: the token when there is one; without one
(loopback only) any value. A page of another origin cannot send that header without a CORS
preflight, which this server never grants, so it cannot act through a user's browser. A request
whose ``Host`` is a name this machine does not answer to is refused (DNS rebinding: a site that
points its own name at this address still sends that name): on loopback only loopback names;
elsewhere also the machine's own names and any IP address. GETs need no token: what they show is
what ``/metrics`` gives a scraper anyway. The token is never in a URL (the page asks for it) nor
in a log line (requests are logged by path, at DEBUG).

What a client can make the driver hold (the driver owns the topology: if it dies of memory, the
topology dies with it). Everything is decided on the request line and headers: no request body
is ever read, and a request that announces one is answered (403 without the token, 413 with it)
and its connection closed, so what it sent is never buffered beyond a socket's read buffer
(``_READ_BUFFER``). Headers are bounded in number and length (aiohttp's parser). A connection
that has not sent a whole request within ``idle_secs`` of connecting, or of its last answer, is
closed (slowloris). At most ``max_connections`` are open; a new one over that closes the oldest.
Connections cost no thread: the loop serves them all, and what an answer computes (a poll's
view, a Ray call, Graphviz) runs on ``_WORKERS`` threads.

A kill is answered first and done after, on a thread of its own: the kill closes this server.

The page takes a handle; the runtime knows nothing of it. A server binds its port when it is
made and serves a topology from ``serve(handle)`` on, so ``rayflow run --ui`` can print the URL
before Ray has started (a browser opened at once waits in the listen backlog for the first
answer). It closes itself once its recorder sees the handle killed, however that came about;
whoever composed it (the ``rayflow run`` command, ``LocalCluster``) may close it sooner.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from .._errors import ConfigError, RayflowError
from .._topology import Topology
from ._prometheus import CONTENT_TYPE, PrometheusExposition
from ._recorder import POLL_SECS, MetricsRecorder
from ._series import task_capacity

if TYPE_CHECKING:
    from .._runtime.handle import TopologyHandle

__all__ = ["IDLE_SECS", "MAX_CONNECTIONS", "TOKEN_HEADER", "UiServer", "host_allowed", "is_loopback"]

logger = logging.getLogger("rayflow")

TOKEN_HEADER = "X-Rayflow-Token"
IDLE_SECS = 10.0
"""How long a connection may take to send a whole request, from its opening or its last answer
(the page asks every second, so its connection never idles that long)."""
MAX_CONNECTIONS = 64
"""Open connections at once; a browser keeps about six to a server."""
_WORKERS = 4
_READ_BUFFER = 64 * 1024
_MAX_HEADERS = 32
_CLOSE_SECS = 2.0
"""How long ``close`` lets answers under way finish before it drops their connections."""
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Server": "rayflow"}
_ACTIONS = ("activate", "deactivate", "kill")
_NOT_SERVING = "this web page shows no topology yet: call serve(handle) first"
_TASK_FIELDS = (
    *("component", "kind", "alive", "state", "restarts", "host", "node_id", "node_ip", "pid", "resources", "gpu_ids"),
    *("emitted", "transferred", "acked", "failed", "executed", "errors", "last_error", "last_error_at"),
    *("pending", "timed_out", "exhausted", "dead_lettered"),
)


@functools.cache
def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_allowed(host_header: str, bound: str, names: frozenset[str] = frozenset()) -> bool:
    """Whether a request naming ``host_header`` (its ``Host``) may be answered by a server bound
    to ``bound`` that also answers to ``names`` (lower case).

    DNS rebinding makes a browser send a site's own name to this address, so the rule is about
    names: on loopback only ``localhost`` and loopback addresses; elsewhere also ``names`` and
    any IP address (a page loaded from an address is of that address's origin: no rebinding)."""
    try:
        name = urlsplit(f"//{host_header}").hostname or ""
    except ValueError:
        return False
    if is_loopback(name):
        return True
    if is_loopback(bound):
        return False
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name in names
    return True


def _machine_names(host: str) -> frozenset[str]:
    """The names this machine answers to: the address bound, its host name and domain name."""
    if is_loopback(host):
        return frozenset()
    return frozenset(n.lower() for n in (host, socket.gethostname(), socket.getfqdn()) if n)


class _Connections(web.Server):
    """aiohttp's low-level server, with at most ``cap`` connections: a new one over it closes
    the oldest still open."""

    def __init__(self, handler: Callable[[web.BaseRequest], Any], cap: int, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._cap = cap
        self._open: dict[web.RequestHandler, asyncio.Transport] = {}  # oldest first
        self._closed = False

    def close_all(self) -> None:
        """Drop every connection, and from now on each one as it is made (one the listener
        took just before it closed is made a moment later)."""
        self._closed = True
        for transport in self._open.values():
            transport.abort()

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if self._closed:
            transport.abort()
            return
        self._open[handler] = transport
        for old, old_transport in list(self._open.items()):
            if len(self._open) <= self._cap:
                break
            if not old_transport.is_closing():
                old.force_close()
            del self._open[old]

    def connection_lost(self, handler: web.RequestHandler, exc: BaseException | None = None) -> None:
        self._open.pop(handler, None)
        super().connection_lost(handler, exc)


class UiServer:
    """Listens on ``host:port`` (``port=0``: a free one) from the start, and serves a topology's
    page from ``serve`` until ``close``; the topology's kill closes it too. ``idle_secs`` and
    ``max_connections`` bound what clients can hold (the module's doc).

    Raises ``ConfigError`` for another address than loopback without a ``token``, or a port it
    cannot bind."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        poll_secs: float = POLL_SECS,
        ray_metrics: bool = True,
        idle_secs: float = IDLE_SECS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if not is_loopback(host) and not token:
            raise ConfigError(
                f"the web page would be reachable from other hosts on {host!r} and anyone there could kill the "
                "topology: give a token (token=..., or RAYFLOW_UI_TOKEN for `rayflow run --ui`), or bind 127.0.0.1"
            )
        self.token = token
        self.poll_secs = poll_secs
        self.ray_metrics = ray_metrics
        self.idle_secs = idle_secs
        self.max_connections = max_connections
        self._handle: TopologyHandle | None = None
        self.topology: Topology | None = None
        self._recorder: MetricsRecorder | None = None
        self._exposition: PrometheusExposition | None = None
        self._graph: bytes | None = None
        self._names = _machine_names(host)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.ServerRunner | None = None
        self._connections: _Connections
        self._serving: threading.Thread | None = None
        self._workers = ThreadPoolExecutor(_WORKERS, thread_name_prefix="rayflow-ui")
        self._closing = threading.Lock()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._socket = socket.create_server((host, port), family=family, backlog=128)
        except OSError as exc:
            raise ConfigError(f"cannot serve the web page on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        self.closed = False

    @property
    def url(self) -> str:
        """Where the page is; bound to every interface, it names this machine. The token is not
        in it: the page asks for it when a button needs it."""
        host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/"

    @property
    def handle(self) -> TopologyHandle:
        """The topology shown (``serve`` was called: no request is answered before)."""
        if self._handle is None:
            raise RayflowError(_NOT_SERVING)
        return self._handle

    @property
    def recorder(self) -> MetricsRecorder:
        if self._recorder is None:
            raise RayflowError(_NOT_SERVING)
        return self._recorder

    @property
    def exposition(self) -> PrometheusExposition:
        if self._exposition is None:
            raise RayflowError(_NOT_SERVING)
        return self._exposition

    def serve(self, handle: TopologyHandle, topology: Topology | None = None) -> UiServer:
        """Show ``handle``'s topology from now on: poll it, answer requests. ``topology``, the
        one submitted, lets the page draw the graph; without it the page lists the components."""
        if self._handle is not None:
            shown = self._handle.name
            raise RayflowError(f"this web page shows topology {shown!r} already: make another for {handle.name!r}")
        if self.closed:
            raise RayflowError(f"this web page was closed: make a new one for {handle.name!r}")
        if handle.killed:
            raise RayflowError(f"topology {handle.name!r} was killed: there is nothing left to show")
        self._handle, self.topology = handle, topology
        self._recorder = MetricsRecorder(handle, self.poll_secs, when_killed=self.close)
        self._exposition = PrometheusExposition(self._recorder)
        if self.ray_metrics:
            from ._ray_metrics import RayMetricsExporter  # imports Ray's metrics only when asked

            RayMetricsExporter(self._recorder)
        self._recorder.poll()  # the first answers have numbers
        # Serving before the recorder's thread runs: a close (that thread seeing the kill) waits
        # for the serving loop, which must have started.
        loop = self._loop = asyncio.new_event_loop()
        self._serving = threading.Thread(target=loop.run_forever, name=f"rayflow-ui-{handle.name}", daemon=True)
        self._serving.start()
        asyncio.run_coroutine_threadsafe(self._listen(), loop).result()
        self._recorder.start()
        return self

    async def _listen(self) -> None:
        server = _Connections(
            self._answer,
            self.max_connections,
            keepalive_timeout=self.idle_secs,
            lingering_time=0,  # a body not read is not drained either: the connection closes
            read_bufsize=_READ_BUFFER,
            max_headers=_MAX_HEADERS,
            access_log=None,
        )
        self._connections = server
        self._runner = web.ServerRunner(server, shutdown_timeout=_CLOSE_SECS)
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket, shutdown_timeout=_CLOSE_SECS).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            # Accept no more, and let the connections accepted already be set up (two turns of
            # the loop): one set up after its server closed is never answered nor closed
            # (Python 3.11's asyncio drops it on an assertion).
            asyncio.get_running_loop().remove_reader(self._socket)
            for _ in range(3):
                await asyncio.sleep(0)
            await self._runner.cleanup()  # the socket closed, answers under way let finish
            self._connections.close_all()
            deadline = time.monotonic() + _CLOSE_SECS
            while (rest := asyncio.all_tasks() - {asyncio.current_task()}) and time.monotonic() < deadline:
                await asyncio.wait(rest, timeout=deadline - time.monotonic())
            await asyncio.sleep(0)  # the dropped sockets are closed by callbacks that one turn runs
        asyncio.get_running_loop().stop()

    def close(self) -> None:
        """Stop answering and polling; the port is free again. Safe to call twice, and from
        any thread."""
        with self._closing:
            if self.closed:
                return
            self.closed = True
        if self._recorder is not None:
            self._recorder.stop()
        if self._loop is not None and self._serving is not None:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
            if threading.current_thread() is not self._serving:  # a request's thread is not this one
                self._serving.join()
                self._loop.close()
        self._socket.close()
        self._workers.shutdown(wait=False, cancel_futures=True)

    # -- what the routes answer ---------------------------------------------------------------
    def state(self) -> str:
        if self.handle.killed:
            return "killed"
        return "active" if self.handle.active else "inactive"

    def topology_view(self) -> dict[str, Any]:
        components: list[dict[str, Any]] = []
        if self.topology is not None:
            for spec in self.topology.components.values():
                inputs = [
                    {"component": sub.component, "stream": sub.stream, "grouping": sub.grouping.describe()}
                    for sub in spec.inputs
                ]
                kind = "spout" if spec.is_spout else "bolt"
                components.append({"id": spec.id, "kind": kind, "tasks": spec.parallelism, "inputs": inputs})
        else:
            poll = self.recorder.last
            for cid, summary in (poll.components if poll else {}).items():
                if summary["kind"] != "acker":
                    components.append({"id": cid, "kind": summary["kind"], "tasks": summary["tasks"], "inputs": None})
        return {
            "name": self.handle.name,
            "state": self.state(),
            "started": self.recorder.started,
            "uptime_secs": time.time() - self.recorder.started,
            "poll_secs": self.recorder.poll_secs,
            "graph": self.topology is not None,
            "token_required": self.token is not None,
            "components": components,
        }

    def metrics_view(self) -> dict[str, Any]:
        poll = self.recorder.last
        if poll is None:
            return {"time": None, "state": self.state(), "components": {}, "tasks": {}}
        tasks = {}
        for task, m in sorted(poll.tasks.items()):
            view = {name: m[name] for name in _TASK_FIELDS if name in m}
            latency = m["latencies"].get("complete_latency_ms" if m["kind"] == "spout" else "process_latency_ms")
            view["latency_ms"] = latency["total"] / latency["count"] * 1000.0 if latency and latency["count"] else None
            view["capacity"] = task_capacity(m) if m["kind"] == "bolt" else None
            tasks[str(task)] = view
        return {"time": poll.time, "state": self.state(), "components": poll.components, "tasks": tasks}

    def history_view(self, since: float) -> dict[str, Any]:
        return {"points": self.recorder.history_since(since)}

    def errors_view(self) -> dict[str, Any]:
        return {"errors": self.recorder.recent_errors()}

    def graph_svg(self) -> bytes:
        """The drawing, rendered once, its chains as the tasks run them (``chained``). Raises
        ``LookupError`` without a topology and ``graphviz.ExecutableNotFound`` without
        Graphviz's ``dot``."""
        if self.topology is None:
            raise LookupError("the topology was not given to the page (serve(handle, topology)): no graph to draw")
        if self._graph is None:
            from ..topology_file._drawing import to_dot

            self._graph = to_dot(self.topology, self.handle.name, chained=self.chained()).pipe(format="svg")
        return self._graph

    def chained(self) -> dict[str, str]:
        """Each chained bolt -> its upstream, read off the tasks' ``host``: the page is given a
        handle, not the config that decided what is chained, and the hosts are what runs. A
        chained bolt takes every input from its upstream (``rayflow/_chaining.py``)."""
        poll = self.recorder.last
        topology = self.topology
        if poll is None or topology is None:
            return {}
        guests = {m["component"] for task, m in poll.tasks.items() if m.get("host", task) != task}
        return {bolt: topology.components[bolt].inputs[0].component for bolt in guests & topology.components.keys()}

    def act(self, action: str) -> dict[str, Any]:
        if action == "activate":
            self.handle.activate()
        elif action == "deactivate":
            self.handle.deactivate()
        else:
            threading.Thread(target=self._kill, name=f"rayflow-ui-kill-{self.handle.name}", daemon=True).start()
            return {"action": action, "state": "killed"}
        return {"action": action, "state": self.state()}

    def _kill(self) -> None:
        self.handle.kill()
        self.close()

    def allowed(self, token: str | None) -> bool:
        if token is None:
            return False
        return self.token is None or hmac.compare_digest(token.encode(), self.token.encode())

    # -- on the loop ----------------------------------------------------------------------------
    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        """Every request: decided on its line and headers, its body never read."""
        response = await self._route(request)
        if request.body_exists or self.closed:  # a body left unread, or no server soon: no reuse
            response.force_close()
        response.headers.update(_HEADERS)
        logger.debug("ui %s: %s %s %d", self.handle.name, request.method, request.path, response.status)
        return response

    async def _route(self, request: web.BaseRequest) -> web.Response:
        host = request.headers.get("Host", "")
        if not host_allowed(host, self.host, self._names):
            return _error(403, f"this page does not answer to the host name {host!r} (a DNS rebinding attack?)")
        path = request.path
        if request.method == "POST":
            action = path.removeprefix("/api/")
            if action not in _ACTIONS:
                return _error(404, f"no such action: {path} (POST /api/{'|'.join(_ACTIONS)})")
            if not self.allowed(request.headers.get(TOKEN_HEADER)):
                why = "the right token" if self.token else "any value (a page cannot send it from another site)"
                return _error(403, f"acting needs the header {TOKEN_HEADER} with {why}")
        if request.body_exists:
            return _error(413, f"{request.method} {path} takes no request body")
        if request.method == "POST":
            if self.handle.killed:
                return _error(409, f"topology {self.handle.name!r} was killed")
            return await self._work(lambda: _json(self.act(action)))
        if request.method not in ("GET", "HEAD"):
            return _error(405, f"{request.method} is not answered here: GET, or POST /api/{'|'.join(_ACTIONS)}")
        return await self._work(lambda: self._get(path, request.query.get("since", "0")))

    async def _work(self, answer: Callable[[], web.Response]) -> web.Response:
        """``answer`` on a worker thread: it may poll, call Ray or run Graphviz."""
        return await asyncio.get_running_loop().run_in_executor(self._workers, answer)

    def _get(self, path: str, since: str) -> web.Response:
        if path in _STATIC:
            name, content_type = _STATIC[path]
            return web.Response(body=_static(name), headers={"Content-Type": content_type})
        if path == "/metrics":
            return web.Response(body=self.exposition.render(), headers={"Content-Type": CONTENT_TYPE})
        if path == "/api/topology":
            return _json(self.topology_view())
        if path == "/api/metrics":
            return _json(self.metrics_view())
        if path == "/api/history":
            try:
                return _json(self.history_view(float(since)))
            except ValueError:
                return _error(400, f"since must be a time in seconds, got {since!r}")
        if path == "/api/errors":
            return _json(self.errors_view())
        if path == "/api/graph.svg":
            return self._graph_answer()
        return _error(404, f"no such page: {path}")

    def _graph_answer(self) -> web.Response:
        import graphviz

        try:
            return web.Response(body=self.graph_svg(), headers={"Content-Type": "image/svg+xml"})
        except LookupError as exc:
            return _error(404, str(exc))
        except graphviz.ExecutableNotFound:
            return _error(
                503, "drawing the graph needs Graphviz's `dot` program on the driver's PATH (apt-get install graphviz)"
            )


def _json(value: Any, status: int = 200) -> web.Response:
    body = json.dumps(value, default=str).encode()
    return web.Response(body=body, status=status, headers={"Content-Type": "application/json"})


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)
