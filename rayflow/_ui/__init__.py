"""A running topology seen from outside the terminal: a web page, its JSON API, and its metrics
for Prometheus and Ray.

How it stacks, bottom up:

    _recorder      MetricsRecorder: polls the handle once a second; history and recent errors
    _series        a poll as named families of labelled series (task and component level)
    _prometheus    those families as Prometheus text, for ``/metrics``
    _ray_metrics   the same recorded with ``ray.util.metrics``, for Ray's metrics endpoint
    _server        UiServer: the page (``static/``), the JSON API, ``/metrics``, the buttons

A page takes a ``TopologyHandle`` and watches it; the runtime does not know it is watched. It is
composed from above: ``LocalCluster`` (``ui=True``, ``serve_ui``) and ``rayflow run --ui`` make a
``UiServer`` and hand it the handle. ``docs/ui.md`` and ``docs/metrics.md`` are the user's side
of it.
"""

from ._server import UiServer

__all__ = ["UiServer"]
