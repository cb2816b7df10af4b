"""``LocalCluster``: a Ray for this program, the topologies it submits there, and their web pages.

It sits above the runtime (``_runtime``: placing and steering topologies) and the page (``_ui``:
watching a handle) and puts the two together, so that neither knows the other: the runtime
would otherwise start its own viewer, and the viewer import the runtime back.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import ray

from ._config import Config
from ._errors import RayflowError
from ._runtime import TopologyHandle, submit_topology
from ._runtime.cluster import local_ray_options
from ._topology import Topology

if TYPE_CHECKING:
    from ._ui import UiServer  # loaded by the first page served: a cluster without pages never needs it

__all__ = ["LocalCluster"]


class LocalCluster:
    """Run topologies on a local Ray instance.

    Starts Ray (sized for a small machine) unless this process is already connected, and on
    ``shutdown`` kills the topologies it submitted, closes their pages and stops Ray if it
    started it.

    With ``ui=True`` every topology submitted gets its web page on 127.0.0.1 (a free port) with
    ``/metrics`` for Prometheus. Its URL is printed on stderr when the topology starts -- as Ray
    prints its dashboard's, so that a plain script shows it -- and ``serve_ui(handle)`` returns it.
    """

    def __init__(self, num_cpus: int | None = None, *, ui: bool = False, **ray_init_kwargs: Any) -> None:
        self._handles: list[TopologyHandle] = []
        self._topologies: dict[TopologyHandle, Topology] = {}
        self._pages: dict[TopologyHandle, UiServer] = {}
        self._started_ray = False
        self._ui = ui
        if not ray.is_initialized():
            kwargs = local_ray_options(num_cpus)
            kwargs.update(ray_init_kwargs)
            ray.init(**kwargs)
            self._started_ray = True

    def submit_topology(
        self, name: str, conf: Config | dict[str, Any] | None, topology: Topology, *, active: bool = True
    ) -> TopologyHandle:
        """``rayflow.submit_topology`` on this cluster's Ray; the topology is killed at
        ``shutdown``, and with ``ui=True`` its page is served (its URL printed on stderr)."""
        handle = submit_topology(name, conf, topology, active=active)
        self._handles.append(handle)
        self._topologies[handle] = topology
        if self._ui:
            url = self.serve_ui(handle)
            print(f"topology {name!r}: web page {url}", file=sys.stderr, flush=True)
        return handle

    def serve_ui(
        self,
        handle: TopologyHandle,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        topology: Topology | None = None,
    ) -> str:
        """Serve ``handle``'s web page, its JSON API and ``/metrics`` (Prometheus), and record
        its metrics in Ray's (``docs/ui.md``); returns the page's URL. A topology has one page:
        a second call returns the first one's URL (with ``ui=True``, the page started at submit).

        The page lives until the topology is killed (from the page too) or the cluster shuts
        down. ``port=0`` takes a free port. On another address than loopback ``token`` is
        required (``ConfigError`` otherwise): the page's buttons act only with it. ``topology``
        draws the graph; this cluster knows the ones it submitted, any other handle needs it.

        Raises ``RayflowError`` when the topology was killed: there is nothing left to show."""
        page = self._pages.get(handle)
        if page is not None and not page.closed:
            return page.url
        if handle.killed:
            raise RayflowError(f"topology {handle.name!r} was killed: there is nothing left to show")
        from ._ui import UiServer

        page = UiServer(host=host, port=port, token=token)
        try:
            page.serve(handle, topology or self._topologies.get(handle))
        except BaseException:
            page.close()
            raise
        self._pages[handle] = page
        return page.url

    def shutdown(self) -> None:
        """Kill the topologies submitted here, close their pages, stop Ray if this started it."""
        for handle in self._handles:
            handle.kill()
        for page in self._pages.values():
            page.close()
        self._handles.clear()
        self._topologies.clear()
        self._pages.clear()
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
