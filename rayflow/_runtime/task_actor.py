"""``TaskActor``: the Ray actor that runs one task -- a thin shell around its executor.

It is an asyncio actor, so everything it does runs on one event loop thread and the executor
needs no locks. The executor's lifecycle (``rayflow/_executors/base.py``) is the same for every
kind of task, so the actor never asks what kind it runs.

Ray places the actor, starts it and tells it where its peers are; tuples travel on direct
streams between the actors (``streams.py``), not as Ray calls. What runs here:

- data frames, executed one at a time in arrival order under ``_data_lock``; a frame is
  finished (its sender credited) only once it is executed and its output is within the
  transport's bounds, which is what makes backpressure travel upstream;
- acker traffic, handled as it arrives, never behind the data lock;
- background loops: the source loop of a spout (``next_tuple``), and the executor's timers
  (message-timeout rotation, tick tuples), each run under the data lock;
- ``lifeline``, a call that never returns: the supervisor holds it to learn at once that the
  actor died; ``replace``, which points this task at a peer's restarted actor, and ``give_up``,
  which stops it sending to a peer the supervisor will not restart;
- ``next_logs``, a long poll that returns what rayflow logged in this process (``task_logs.py``).

The tasks chained to this one (``rayflow/_chaining.py``) run here too, each with its own
executor: they get their data from this actor's executors, queued in this process
(``chain_link.py``), never from the streams, and they go where this actor goes, restarts
included.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import pickle
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import ray

from .._config import Config
from .._context import TopologyContext
from .._executors import Executor, make_executor
from .._graph import ACKER_COMPONENT
from .._outbox import Outbox
from .._topology import Topology
from .chain_link import ChainLink, ChainOutboxes
from .cpu_pinning import core_for, pin_process
from .stream_keys import TaskKeys
from .streams import CONTROL, Address, Listener, ListenError, data_credit_group
from .task_logs import LogBatch, install
from .transport import StreamTransport

__all__ = ["TaskActor"]

logger = logging.getLogger("rayflow")

SPOUT_BURST = 256
"""``next_tuple`` calls per turn of the spout loop before it yields to incoming calls."""
SPOUT_IDLE_SECS = (0.001, 0.01)
"""The spout loop sleeps this long (first, at most: doubling) while ``next_tuple`` emits nothing.
Every wake-up of a Ray actor costs CPU, so an idle spout must not spin at the shortest sleep."""
SPOUT_BLOCKED_SECS = 0.05
"""With no pending budget left the loop waits for acker results (or this long, at most)."""
GC_THRESHOLD = (50_000, 20, 100)
"""A task allocates a few objects per tuple and almost never makes cycles: with Python's
default threshold (700) the cycle collector ran thousands of times a second for nothing."""


class TaskActor:
    def __init__(
        self,
        topology: Topology,
        conf: Config,
        task_id: int,
        layout: dict[int, str],
        keys: TaskKeys,
        guests: list[int] | None = None,
    ) -> None:
        self._topology = topology
        self._conf = conf
        self._task_id = task_id
        self._layout = layout
        self._keys = keys
        """This task's certificate and key for its streams (``stream_keys.py``)."""
        self._guests = list(guests or [])
        """The tasks chained to this one (``rayflow/_chaining.py``), run here too, upstream first."""
        self._chain: ChainLink | None = None
        """How this actor's tasks reach each other, when tasks are chained to it."""
        self._chain_room = asyncio.Event()
        """Set when what waits for the chained tasks has shrunk to a quarter of its bound."""
        self._given_up: set[int] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._running = False
        self._calls_in = 0
        self._inbox: deque[tuple[bytes, Callable[[], None]]] = deque()
        """Data frames received, not yet executed, with what finishes each."""
        self._flush_due = False
        self._flushed = 0.0
        self._held_for_chain = False
        """The last flush sent data only, leaving the acker traffic for after the chained tasks'
        batch (``_flush_now``): the next one sends everything."""
        self._control_linger = 0.0
        self._core: int | None = None
        """The core this process is pinned to (``rayflow.worker.cpu.pinning``), if any."""
        self._node_id = ray.get_runtime_context().get_node_id()
        self._gpu_ids = list(ray.get_gpu_ids())
        """The GPUs Ray gave this actor (its component's ``num_gpus``), for ``task_metrics``."""
        self._log = install()
        """What rayflow logs in this process, kept for the driver (``next_logs``, ``shutdown``)."""

    async def listen(self) -> tuple[str, Address]:
        """Start listening for peers' streams; returns this actor's node id and address.

        It listens on ``rayflow.stream.bind.host``, by default the node's IP as Ray knows it
        (where peers on other nodes reach it). Peers are told that address, or the node's IP
        when the setting names every interface. Never all interfaces unless asked: an address
        that cannot be bound is a ``ListenError`` naming it."""
        conf = self._conf
        group = data_credit_group(conf.max_inflight_tuples, conf.max_inflight_batches, conf.batch_size)
        self._listener = Listener(
            self._keys,
            self._deliver,
            group,
            max_frame_bytes=conf.max_frame_bytes,
            max_handshakes=conf.max_handshakes,
            handshake_secs=conf.handshake_secs,
        )
        node_ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        host = conf.bind_host or node_ip
        try:
            _, port = await self._listener.start(host)
        except OSError as exc:
            setting = "rayflow.stream.bind.host" if conf.bind_host else "the node's IP (rayflow.stream.bind.host unset)"
            raise ListenError(
                f"task {self._task_id} cannot listen on {host} ({setting}): {exc.strerror or exc}. Set "
                "rayflow.stream.bind.host to an IP address of this node, or to 0.0.0.0 to listen on every interface"
            ) from None
        return self._node_id, (node_ip if ipaddress.ip_address(host).is_unspecified else host, port)

    async def connect(self, addresses: dict[int, Address], task_nodes: dict[int, str], restarted: bool = False) -> None:
        """Build the executor once every task listens (and those of the tasks chained to this
        one), start them and their loops. ``restarted``: this actor takes over a task that
        died, or joins after the rest of the topology started (the supervisor's restarts)."""
        self._data_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._has_data = asyncio.Event()
        conf = self._conf
        self._transport = StreamTransport(
            addresses,
            self._keys,
            conf.max_inflight_tuples,
            conf.max_inflight_batches,
            conf.max_frame_bytes,
            conf.handshake_secs,
        )
        for task in self._given_up:
            self._transport.give_up(task)
        actor_nodes = task_nodes  # the driver's: tasks with actors of their own
        task_nodes = {**task_nodes, **dict.fromkeys(self._guests, self._node_id)}
        link: ChainLink | StreamTransport = self._transport
        if self._guests:
            link = self._chain = ChainLink(self._transport, set(self._guests), self._has_data.set)
        executors: dict[int, Executor] = {}
        for task in [self._task_id, *self._guests]:
            context = TopologyContext(task, self._layout, self._topology.stream_fields(), task_nodes)
            executors[task] = make_executor(self._topology, conf, context, link)
            executors[task].restarted = restarted
            executors[task].flush_after_receive = False  # ``_execute_inbox`` sends data batches itself
        self._executors = executors
        executor = executors[self._task_id]
        self._executor: Executor = executor
        if self._chain is not None:
            for task in self._guests:  # one frame per acker per flush; acks fold into the host's inits
                executors[task].outbox.share_acker_mails(executor.outbox)
            self._outbox: Outbox | ChainOutboxes = ChainOutboxes([each.outbox for each in executors.values()])
        else:
            self._outbox = executor.outbox
        self._running = True
        if conf.cpu_pinning:
            self._core = self._pin(actor_nodes)
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLD)
        self._control_linger = executor.conf.control_linger_ms / 1000.0
        for each in executors.values():
            each.start()
        for each in executors.values():
            for period, action in each.timers():
                self._start(self._every(period, action))
        if executor.is_source:
            self._start(self._source_loop(executor.conf.linger_ms / 1000.0))
        self._start(self._execute_inbox())

    def _pin(self, actor_nodes: dict[int, str]) -> int | None:
        """Pin this process to its core (``cpu_pinning.py``), given the node of every task with
        an actor of its own; the core, or ``None``."""
        ackers = {task for task, component in self._layout.items() if component == ACKER_COMPONENT}
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        core = core_for(self._task_id, actor_nodes, ackers, cores)
        if core is None or not pin_process(core):
            return None
        logger.info("task %d: pinned to core %d (rayflow.worker.cpu.pinning)", self._task_id, core)
        return core

    def _start(self, coro: Any) -> None:
        self._loops.append(asyncio.get_running_loop().create_task(coro))

    def replace(self, task: int, address: Address) -> None:
        """Task ``task`` was restarted and listens at ``address``: send to it from now on."""
        self._transport.replace(task, address)
        for executor in self._executors.values():
            executor.peer_restarted(task)
        if self._executor.is_source:
            self._wake.set()  # what the hook emitted goes out now
        else:
            self._flush_later()

    def give_up(self, task: int) -> None:
        """The supervisor will not restart task ``task``: drop what is sent to it, never dial it
        (also when told before ``connect``)."""
        self._given_up.add(task)
        if hasattr(self, "_transport"):
            self._transport.give_up(task)

    async def lifeline(self) -> None:
        """Never returns: the call fails when this actor dies, which is how death is noticed."""
        await asyncio.Event().wait()

    # -- incoming frames ------------------------------------------------------------------------
    def _deliver(self, channel: int, sender: int, frame: bytes, finished: Callable[[], None]) -> None:
        self._calls_in += 1
        if channel != CONTROL:
            self._inbox.append((frame, finished))
            self._has_data.set()
            return
        try:
            self._executor.receive_control(pickle.loads(frame))
        except Exception:
            logger.exception("task %d: acker traffic from task %d could not be handled", self._task_id, sender)
        finished()
        if self._executor.is_source:
            self._wake.set()  # the source loop sends what waits, on its own lingers
        else:
            self._flush_later()

    async def _execute_inbox(self) -> None:
        """Execute data frames in arrival order. While more frames wait, what one produced
        joins theirs and the last of them sends it (fan-out would otherwise multiply small
        frames).

        What this actor's tasks sent the tasks chained to them goes first, a payload per turn
        of the event loop: a frame's output is worked off before the next frame is taken, and
        between payloads the spout loop, the timers and the calls get their turns."""
        inbox, executor, has_data, outbox = self._inbox, self._executor, self._has_data, self._outbox
        chain = self._chain
        low_tuples, low_batches = self._conf.max_inflight_tuples // 4, self._conf.max_inflight_batches // 4
        while self._running:
            if chain is not None and chain.inbox:
                async with self._data_lock:
                    self._execute_chained(chain)
                    if self._nothing_waits():
                        outbox.flush_data()
                    if not self._held_for_chain:
                        self._flush_later()
                    elif not chain.inbox:  # the flush held for the chained tasks' batches, now due
                        self._flush_now()
                    await self._transport.wait_for_room()
                if chain.tuples <= low_tuples and len(chain.inbox) <= low_batches:
                    self._chain_room.set()
                await asyncio.sleep(0)
                continue
            if not inbox:
                has_data.clear()
                await has_data.wait()
                continue
            frame, finished = inbox.popleft()
            async with self._data_lock:
                try:
                    executor.receive(pickle.loads(frame))
                except Exception:
                    logger.exception("task %d: a data frame could not be executed", self._task_id)
                if self._nothing_waits():
                    outbox.flush_data()
                self._flush_later()
                await self._transport.wait_for_room()
            finished()

    def _flush_later(self) -> None:
        """Send what waits in the outbox: at once if nothing went out for the control linger (or
        a batch' worth waits), else when the control linger has passed since the last send.

        So a quiet topology sends every message straight away, and a busy one sends at most
        one control frame per ``control_linger``: one frame carries the acks of many batches."""
        outbox = self._outbox
        if self._flush_due or outbox.is_empty():
            return
        wait = self._control_linger - (time.monotonic() - self._flushed)
        if wait <= 0 or outbox.urgent or outbox.control_size() >= outbox.batch_size:
            self._flush_now()
        else:
            self._flush_due = True
            asyncio.get_running_loop().call_later(wait, self._flush_now)

    def _flush_now(self) -> None:
        """Send what waits. In an actor with chained tasks, a batch for them (the host's partial
        one goes first) puts the acker traffic off until they have executed it -- once, and not
        when it is urgent: their acks of its trees then fold into the inits (``AckerMail``), and
        ``_execute_inbox`` flushes as soon as they have executed every batch queued for them
        (the spout loop emits nothing meanwhile: its new trees' inits would go unfolded)."""
        self._flush_due = False
        chain = self._chain
        if chain is not None and not self._held_for_chain and not self._outbox.urgent:
            self._outbox.flush_data()
            if chain.inbox:
                self._held_for_chain = True
                return
        self._held_for_chain = False
        self._flushed = time.monotonic()
        self._outbox.flush()

    async def activate(self) -> None:
        self._executor.activate()
        self._wake.set()

    async def deactivate(self) -> None:
        self._executor.deactivate()
        self._outbox.flush()

    async def metrics(self, task: int | None = None) -> dict[str, Any]:
        """The counters of this actor's task, or of ``task``, one chained to it (whose frames
        in and out are its host's)."""
        if task is None or task == self._task_id:
            snap = self._executor.snapshot()
            snap.update(calls_in=self._calls_in, calls_out=self._transport.calls)
        else:
            snap = self._executors[task].snapshot()
            snap.update(calls_in=0, calls_out=0)
        snap.update(pid=os.getpid(), node_id=self._node_id)
        snap["gpu_ids"] = self._gpu_ids
        snap["core"] = self._core
        return snap

    async def finished(self) -> bool:
        """For ``TopologyHandle.wait``: is this task done (a spout: exhausted, nothing pending)?"""
        return self._executor.finished

    async def quiesce(self) -> None:
        """The topology is being killed: what its peers' closing costs is not reported."""
        if hasattr(self, "_transport"):
            self._transport.quiet = True

    async def next_logs(self) -> LogBatch:
        """Returns once this task has logged something: what it logged since the last call
        (the supervisor's long poll, ``task_logs.py``)."""
        return await self._log.next_batch()

    async def shutdown(self) -> LogBatch:
        """Stop the loops, then close the executor (spouts close, bolts clean up); returns what
        was logged since the last ``next_logs``, closing included."""
        self._log.closing = True
        await self._close()
        return self._log.drain()

    async def _close(self) -> None:
        self._running = False
        for task in self._loops:
            task.cancel()
        if hasattr(self, "_listener"):
            self._listener.close()
        if not hasattr(self, "_executor"):
            return
        async with self._data_lock:
            for executor in self._executors.values():  # upstream first: its last batches reach the others
                executor.close()
                self._work_off_chain()
            self._outbox.flush()
        self._transport.close()

    def _nothing_waits(self) -> bool:
        """No data frame and no chained payload waits: time to send the partial batches."""
        return not self._inbox and (self._chain is None or not self._chain.inbox)

    def _execute_chained(self, chain: ChainLink) -> None:
        """Execute the oldest payload queued for a chained task."""
        task, payload = chain.take()
        try:
            self._executors[task].receive(payload)
        except Exception:  # as a frame that cannot be executed: its trees time out and replay
            logger.exception("task %d: a batch from task %d could not be executed", task, payload[0])

    def _work_off_chain(self) -> None:
        """Execute everything queued for the chained tasks, now."""
        chain = self._chain
        while chain is not None and chain.inbox:
            self._execute_chained(chain)

    async def _room_in_chain(self) -> None:
        """Wait while the chained tasks have more than ``max_inflight_tuples`` or
        ``max_inflight_batches`` queued, as a stream would make it wait: a spout must not run
        ahead of the bolt chained to it without bound."""
        chain, conf = self._chain, self._conf
        if chain is not None and (
            chain.tuples > conf.max_inflight_tuples or len(chain.inbox) > conf.max_inflight_batches
        ):
            self._chain_room.clear()
            await self._chain_room.wait()

    # -- background loops ---------------------------------------------------------------------
    async def _source_loop(self, linger: float) -> None:
        """Storm's spout loop: call ``next_tuple`` while allowed. While it emits, data goes out
        when a batch fills or ``linger`` passes, inits every control linger -- or, with tasks
        chained to this one, after those have executed every batch of these trees, the
        partial one included (``_flush_now``; ``_execute_inbox`` sends them): the chained
        tasks' acks of the same trees then fold into the inits (``AckerMail``), one acker
        message per tree fewer. (Inits sent while their tuples still wait in a partial batch
        would leave those trees' acks to a later mail, and the acker one message more each.)
        When it emits nothing the loop backs off, still sending on the same lingers (a
        rate-limited spout would otherwise make one small call per turn); when it may not emit
        (inactive, exhausted, or the pending budget spent), everything waiting goes out at
        once (the inits, again, once the chained tasks have executed what waits for them)."""
        executor = self._executor
        outbox = self._outbox
        chain = self._chain
        clock = time.monotonic
        data_sent = control_sent = clock()
        idle = SPOUT_IDLE_SECS[0]
        while self._running:
            if not executor.wants_next_tuple():
                outbox.flush_data()
                if self._nothing_waits():  # else the inits go once the chained tasks executed their batch
                    outbox.flush()
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), SPOUT_BLOCKED_SECS)
                continue
            if self._held_for_chain and chain is not None and chain.inbox:
                # Inits wait for the chained tasks' batch (``_flush_now``): they go once it
                # is executed, and with them the inits of whatever the spout emitted
                # meanwhile, whose acks then come a mail later. So they get their turn first.
                await self._transport.wait_for_room()
                await asyncio.sleep(0)
                continue
            if executor.run_burst(SPOUT_BURST):
                idle = SPOUT_IDLE_SECS[0]
                now = clock()
                if now - data_sent >= linger:
                    outbox.flush_data()
                    data_sent = now
                if now - control_sent >= self._control_linger and self._nothing_waits():
                    if chain is None:
                        outbox.flush_control()
                    else:  # the partial batch for the chained tasks first, the inits after it
                        self._flush_now()
                    control_sent = now
                await self._transport.wait_for_room()
                await self._room_in_chain()
                await asyncio.sleep(0)
            else:
                # Nothing emitted (a rate-limited or quiet spout): what waits still goes out on
                # the lingers, not at once, so a trickle does not become one call per turn.
                now = clock()
                wait = idle
                if now - data_sent >= linger:
                    outbox.flush_data()
                    data_sent = now
                elif not outbox.data_empty():
                    wait = min(wait, linger - (now - data_sent))
                if now - control_sent >= self._control_linger:
                    outbox.flush_control()
                    control_sent = now
                elif outbox.control_size():
                    wait = min(wait, self._control_linger - (now - control_sent))
                await asyncio.sleep(wait)
                idle = min(idle * 2, SPOUT_IDLE_SECS[1])

    async def _every(self, secs: float, action: Callable[[], None]) -> None:
        """Run a timer of the executor every ``secs``, like a batch: under the data lock, its
        output sent on (acker traffic after the linger)."""
        while self._running:
            await asyncio.sleep(secs)
            async with self._data_lock:
                action()
                if self._nothing_waits():
                    self._outbox.flush_data()
                self._flush_later()
                await self._transport.wait_for_room()
