"""What is checked of windowed bolts before a topology runs.

- ``check_windowed_bolt`` (at ``create_topology``, from the graph alone): a window is set; a
  slide is no longer than a length of the same kind; a late tuple stream has a timestamp
  field, and so do session windows; every input declares the timestamp field and the session key.
- ``check_window_settings`` (where the topology's config is known: at submit and when a runner
  starts): a duration window (length plus slide, and on event time the lag and the watermark
  interval too) fits in ``message_timeout_secs`` -- a tuple's tree stays pending until its last
  window fires, so a longer window would time out every tree -- and a count window (length
  plus slide) fits in ``max_spout_pending`` when that is set, or the spouts stop before the
  window fills and it never fires. Topology files put each problem on its bolt's line
  (``config_problems``). Under exactly-once a window holds no tree (its inputs are acked on
  arrival and the windows are in the checkpoint: ``contents.py``), so neither applies, and
  ``pending_advice`` has nothing to say.

Each problem names the bolt and the numbers.

The checks read a topology through two small protocols (``BoltSpec``, ``Bolts``), which
``_topology``'s ``ComponentSpec`` and ``Topology`` meet, rather than through those classes:
``create_topology`` calls ``check_windowed_bolt``, so this module sits below ``_topology`` and
must not import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .._components import StreamDeclaration
from .._config import Config
from .._errors import TopologyError
from .._state.checkpoint import CHECKPOINT_STREAM
from .bolt import WindowedBolt, WindowSettings
from .lengths import Count, Duration

__all__ = [
    "BoltSpec",
    "Bolts",
    "check_window_settings",
    "check_windowed_bolt",
    "config_problems",
    "held_secs",
    "pending_advice",
]


class _Input(Protocol):
    """A bolt's input, as the checks read it: the component and stream it subscribes to."""

    @property
    def component(self) -> str: ...

    @property
    def stream(self) -> str: ...


class BoltSpec(Protocol):
    """What the checks read of a bolt in a topology (``_topology.ComponentSpec``)."""

    @property
    def id(self) -> str: ...

    @property
    def component(self) -> object: ...

    @property
    def config(self) -> Mapping[str, Any]: ...

    @property
    def inputs(self) -> Sequence[_Input]: ...

    @property
    def streams(self) -> Mapping[str, StreamDeclaration]: ...


class Bolts(Protocol):
    """What the checks read of a topology (``_topology.Topology``): its bolts."""

    @property
    def bolts(self) -> Sequence[BoltSpec]: ...


def check_windowed_bolt(spec: BoltSpec, specs: Mapping[str, BoltSpec]) -> list[str]:
    """The problems of windowed bolt ``spec`` that the graph alone shows."""
    settings = spec.component.window_settings if isinstance(spec.component, WindowedBolt) else None
    where = f"windowed bolt {spec.id!r}"
    if settings is None:
        return [f"{where}: no window set: call with_window(length, slide) or with_tumbling_window(length)"]
    problems = []
    length, slide = settings.length, settings.slide
    if type(length) is type(slide) and _size(slide) > _size(length):
        problems.append(
            f"{where}: the slide ({slide}) is longer than the window ({length}): tuples between windows "
            "would be in none"
        )
    field = settings.timestamp_field
    if settings.session_key is not None and field is None:
        problems.append(
            f"{where}: session windows (key {settings.session_key!r}) need a timestamp field: they close on "
            "event time (call with_timestamp_field)"
        )
    if settings.late_stream is not None and field is None:
        problems.append(
            f"{where}: late tuple stream {settings.late_stream!r} without a timestamp field: only event-time "
            "windows have late tuples (call with_timestamp_field)"
        )
    for name, what in ((field, "timestamp field"), (settings.session_key, "session key field")):
        if name is None:
            continue
        for sub in spec.inputs:
            source = specs.get(sub.component)
            declared = source.streams.get(sub.stream) if source is not None else None
            if sub.stream == CHECKPOINT_STREAM or declared is None:
                continue  # not data, or reported by the input checks
            if name not in declared.fields:
                problems.append(
                    f"{where}: {what} {name!r} is not declared by input {sub.component!r} "
                    f"stream {sub.stream!r} (its fields: {list(declared.fields)})"
                )
    return problems


def held_secs(settings: WindowSettings) -> float:
    """How long (s) a window holds a tuple at most, on the bolt's clock: what the message
    timeout must cover. Zero for a window with no duration in it."""
    lengths = (settings.length,) if settings.session_key is not None else (settings.length, settings.slide)
    held = sum(x.seconds for x in lengths if isinstance(x, Duration))
    if held and settings.event_time:
        held += settings.lag_ms / 1000.0 + settings.watermark_interval.seconds
    return held


def check_window_settings(topology: Bolts, conf: Config) -> None:
    """Raise ``TopologyError`` listing every windowed bolt whose window the config cannot carry."""
    problems = []
    for spec in topology.bolts:
        component = spec.component
        if isinstance(component, WindowedBolt) and component.window_settings is not None:
            problems += config_problems(spec.id, component.window_settings, conf.merged(spec.config))
    if problems:
        raise TopologyError(problems)


def config_problems(bolt: str, settings: WindowSettings, conf: Config) -> list[str]:
    """What ``conf`` (the bolt's own, merged) cannot carry of windowed bolt ``bolt``'s window."""
    if conf.processing_guarantee == "exactly_once":
        return []
    problems = []
    where = f"windowed bolt {bolt!r}"
    held = held_secs(settings)
    if conf.enable_message_timeouts and held > conf.message_timeout_secs:
        extra = " plus lag and watermark interval" if settings.event_time else ""
        problems.append(
            f"{where}: the window holds a tuple up to {held:g} s (length plus slide{extra}), longer than "
            f"message_timeout_secs={conf.message_timeout_secs:g}: every tree would time out before its "
            f"window fires; raise message_timeout_secs to at least {held:g}"
        )
    counts = sum(x.n for x in (settings.length, settings.slide) if isinstance(x, Count))
    pending = conf.max_spout_pending
    if isinstance(settings.length, Count) and pending is not None and counts > pending:
        problems.append(
            f"{where}: a count window of {settings.length} sliding by {settings.slide} keeps up to {counts} "
            f"trees pending, more than max_spout_pending={pending}: the spouts would stop before it fires; "
            f"raise max_spout_pending to at least {counts}"
        )
    return problems


def pending_advice(topology: Bolts, conf: Config) -> list[str]:
    """What the pending budget lets a duration window take, said at submit: every tuple's tree
    stays pending while the window holds it, so a spout task feeds such a bolt at most
    ``max_spout_pending / held`` trees a second (the default budget caps a 10 s window near
    500 a second). Not an error: the rate the user needs is not known here."""
    pending = conf.max_spout_pending
    if conf.processing_guarantee == "exactly_once":
        return []
    advice = []
    for spec in topology.bolts:
        settings = spec.component.window_settings if isinstance(spec.component, WindowedBolt) else None
        held = held_secs(settings) if settings is not None else 0.0
        if held and pending is not None:
            advice.append(
                f"windowed bolt {spec.id!r} holds each tuple's tree up to {held:g} s, so with "
                f"max_spout_pending={pending:,} each spout task can feed it at most about {pending / held:,.0f} "
                f"trees a second; for R trees a second set max_spout_pending to R x {held:g} (or None)"
            )
    return advice


def _size(length: Count | Duration) -> float:
    return length.n if isinstance(length, Count) else length.seconds
