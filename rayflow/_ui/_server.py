"""``UiServer``: a running topology's web page, its JSON API and ``/metrics``, served by the
standard library's threaded HTTP server on a daemon thread of the driver.

Routes (``docs/ui.md`` documents them for scripts):

    GET  /                      the page (static files of this package: no CDN, no internet)
    GET  /api/topology          name, state, components and their inputs
    GET  /api/metrics           the latest poll: per component and per task
    GET  /api/history?since=T   throughput and complete latency, a point per poll
    GET  /api/errors            recent errors, newest first, with time, task and component
    GET  /api/graph.svg         the topology drawn as ``rayflow graph`` draws it (Graphviz)
    GET  /metrics               Prometheus text
    POST /api/activate | /api/deactivate | /api/kill

Safety. It binds 127.0.0.1 unless told otherwise, and refuses another address without a token.
A POST must carry the header ``X-Rayflow-Token``: the token when there is one; without one
(loopback only) any value. A page of another origin cannot send that header without a CORS
preflight, which this server never grants, so it cannot act through a user's browser. On
loopback, a request whose ``Host`` is not a loopback name is refused (DNS rebinding). GETs
need no token: what they show is what ``/metrics`` gives a scraper anyway.

A kill is answered first and done after, on a thread of its own: the kill closes this server.

The page takes a handle; the runtime knows nothing of it. A server binds its port when it is
made and serves a topology from ``serve(handle)`` on, so ``rayflow run --ui`` can print the URL
before Ray has started (a browser opened at once waits for the first answer). It closes itself
once its recorder sees the handle killed, however that came about; whoever composed it (the
``rayflow run`` command, ``LocalCluster``) may close it sooner.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

from .._errors import ConfigError, RayflowError
from .._topology import Topology
from ._prometheus import CONTENT_TYPE, PrometheusExposition
from ._recorder import POLL_SECS, MetricsRecorder
from ._series import task_capacity

if TYPE_CHECKING:
    from .._runtime.handle import TopologyHandle

__all__ = ["TOKEN_HEADER", "UiServer", "is_loopback"]

logger = logging.getLogger("rayflow")

TOKEN_HEADER = "X-Rayflow-Token"
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
_ACTIONS = ("activate", "deactivate", "kill")
_NOT_SERVING = "this web page shows no topology yet: call serve(handle) first"
_TASK_FIELDS = (
    *("component", "kind", "alive", "restarts", "node_id", "pid", "emitted", "transferred", "acked", "failed"),
    *("executed", "errors", "last_error", "last_error_at", "pending", "timed_out", "exhausted", "dead_lettered"),
)


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class UiServer:
    """Listens on ``host:port`` (``port=0``: a free one) from the start, and serves a topology's
    page from ``serve`` until ``close``; the topology's kill closes it too.

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
    ) -> None:
        if not is_loopback(host) and not token:
            raise ConfigError(
                f"the web page would be reachable from other hosts on {host!r} and anyone there could kill the "
                "topology: give a token (token=..., or RAYFLOW_UI_TOKEN for `rayflow run --ui`), or bind 127.0.0.1"
            )
        self.token = token
        self.poll_secs = poll_secs
        self.ray_metrics = ray_metrics
        self._handle: TopologyHandle | None = None
        self.topology: Topology | None = None
        self._recorder: MetricsRecorder | None = None
        self._exposition: PrometheusExposition | None = None
        self._graph: bytes | None = None
        self._serving: threading.Thread | None = None
        self._closing = threading.Lock()
        try:
            self._http = ThreadingHTTPServer((host, port), _handler_for(self))
        except OSError as exc:
            raise ConfigError(f"cannot serve the web page on {host}:{port}: {exc.strerror or exc}") from None
        self._http.daemon_threads = True
        self.host = host
        self.port = int(self._http.server_address[1])
        self.closed = False

    @property
    def url(self) -> str:
        """Where the page is; with ``?token=`` when there is one (the page sends it on). Bound
        to every interface, it names this machine."""
        host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        host = f"[{host}]" if ":" in host else host
        query = f"?token={quote(self.token)}" if self.token else ""
        return f"http://{host}:{self.port}/{query}"

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
        self._serving = threading.Thread(target=self._http.serve_forever, name=f"rayflow-ui-{handle.name}", daemon=True)
        self._serving.start()
        self._recorder.start()
        return self

    def close(self) -> None:
        """Stop answering and polling; the port is free again. Safe to call twice, and from
        any thread."""
        with self._closing:
            if self.closed:
                return
            self.closed = True
        if self._recorder is not None:
            self._recorder.stop()
        if self._serving is not None:
            self._http.shutdown()  # waits for the serving loop to end
        self._http.server_close()

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
        """The drawing, rendered once. Raises ``LookupError`` without a topology and
        ``graphviz.ExecutableNotFound`` without Graphviz's ``dot``."""
        if self.topology is None:
            raise LookupError("the topology was not given to the page (serve(handle, topology)): no graph to draw")
        if self._graph is None:
            from ..topology_file._drawing import to_dot

            self._graph = to_dot(self.topology, self.handle.name).pipe(format="svg")
        return self._graph

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


def _handler_for(server: UiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "rayflow"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("ui %s: " + format, server.handle.name, *args)

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            if server.closed:  # a kept-alive connection must not outlive the server
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, value: Any, status: int = HTTPStatus.OK) -> None:
            self._send(status, json.dumps(value, default=str).encode(), "application/json")

        def _error(self, status: int, message: str) -> None:
            self._json({"error": message}, status)

        def _host_ok(self) -> bool:
            """On loopback, only loopback names may be asked for (no DNS rebinding)."""
            if not is_loopback(server.host):
                return True
            host = urlsplit(f"//{self.headers.get('Host', '')}").hostname or ""
            if is_loopback(host):
                return True
            self._error(HTTPStatus.FORBIDDEN, f"this page answers to 127.0.0.1 or localhost, not {host!r}")
            return False

        def do_GET(self) -> None:
            if not self._host_ok():
                return
            url = urlsplit(self.path)
            path = url.path
            try:
                if path in _STATIC:
                    name, content_type = _STATIC[path]
                    self._send(HTTPStatus.OK, _static(name), content_type)
                elif path == "/metrics":
                    self._send(HTTPStatus.OK, server.exposition.render(), CONTENT_TYPE)
                elif path == "/api/topology":
                    self._json(server.topology_view())
                elif path == "/api/metrics":
                    self._json(server.metrics_view())
                elif path == "/api/history":
                    since = parse_qs(url.query).get("since", ["0"])[0]
                    try:
                        self._json(server.history_view(float(since)))
                    except ValueError:
                        self._error(HTTPStatus.BAD_REQUEST, f"since must be a time in seconds, got {since!r}")
                elif path == "/api/errors":
                    self._json(server.errors_view())
                elif path == "/api/graph.svg":
                    self._send_graph()
                else:
                    self._error(HTTPStatus.NOT_FOUND, f"no such page: {path}")
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_HEAD = do_GET

        def _send_graph(self) -> None:
            import graphviz

            try:
                self._send(HTTPStatus.OK, server.graph_svg(), "image/svg+xml")
            except LookupError as exc:
                self._error(HTTPStatus.NOT_FOUND, str(exc))
            except graphviz.ExecutableNotFound:
                self._error(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "drawing the graph needs Graphviz's `dot` program on the driver's PATH (apt-get install graphviz)",
                )

        def do_POST(self) -> None:
            if not self._host_ok():
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            action = urlsplit(self.path).path.removeprefix("/api/")
            if action not in _ACTIONS:
                self._error(HTTPStatus.NOT_FOUND, f"no such action: {self.path} (POST /api/{'|'.join(_ACTIONS)})")
            elif not server.allowed(self.headers.get(TOKEN_HEADER)):
                why = "the right token" if server.token else "any value (a page cannot send it from another site)"
                self._error(HTTPStatus.FORBIDDEN, f"acting needs the header {TOKEN_HEADER} with {why}")
            elif server.handle.killed:
                self._error(HTTPStatus.CONFLICT, f"topology {server.handle.name!r} was killed")
            else:
                self._json(server.act(action))

    return Handler
