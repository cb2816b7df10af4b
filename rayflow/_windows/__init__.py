"""Windowed bolts (Storm's ``BaseWindowedBolt``), plain Python, no Ray.

How the package stacks, bottom up:

    lengths      ``Count`` and ``Duration``: how long a window is, how often it slides
    window       ``TupleWindow``: what one activation hands ``execute``
    manager      the windows themselves: which tuples each activation holds, when it fires,
                 and which tuples no later window can hold (the ones to ack)
    watermark    event time: the watermark over a bolt's input streams and tasks
    contents     exactly-once: a task's windows as they go into a checkpoint and come back
    bolt         ``WindowedBolt``, the class users subclass, and its settings
    validation   what ``create_topology`` and the runners check of those settings

The executor side (acks, timers, the late stream) is ``_executors/windowed_bolt.py``.
"""

from __future__ import annotations

from .bolt import WindowedBolt, WindowSettings
from .lengths import Count, Duration
from .window import TupleWindow

__all__ = ["Count", "Duration", "TupleWindow", "WindowSettings", "WindowedBolt"]
