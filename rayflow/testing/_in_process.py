"""``InProcessTopology``: every task of a topology as an executor in this process, no Ray.

The tasks are the same executors the Ray actors run, built by the same ``make_executor`` and
driven through the same lifecycle; only the wire differs. Payloads travel through two queues --
acker traffic and data -- and are pickled on the way, as on Ray, so a value that could not cross
a process boundary fails here too. Time is simulated: ``advance(secs)`` fires the executors'
timers (message timeouts, ticks) in the order they fall due, so a test of a 30-second timeout
takes microseconds and never depends on the machine's speed.

A run is deterministic: the same topology, delivery order and ``seed`` make the same run, whatever
``PYTHONHASHSEED``. Every random choice rayflow makes is drawn from a generator seeded from
``seed`` and the task -- the order of each shuffle grouping's round, the root ids of the trees
(they pick a tree's acker), the ``random`` delivery order. Only what the components themselves
randomise is theirs to seed.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import pickle
import random
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Literal

from .._config import Config
from .._context import TopologyContext
from .._errors import RayflowError
from .._exactly_once.wiring import with_guarantee
from .._executors import Executor, SpoutExecutor, make_executor
from .._groupings import ShuffleGrouping
from .._metrics import merge_by_component
from .._run_checks import config_to_run
from .._state.checkpoint import CHECKPOINT_STREAM
from .._topology import ACKER_COMPONENT, Topology
from .._tuple import DEFAULT_STREAM

__all__ = ["Delivery", "InProcessTopology", "Recorder"]

Delivery = Literal["fifo", "newest_first", "random"]
"""The order queued payloads are delivered in: oldest first with acker traffic ahead of data
(``fifo``), newest first with data ahead of acker traffic (``newest_first``: every ack reaches
the acker before the init that opened its tree), or a seeded random pick (``random``)."""

MAX_RAISING_BURSTS = 100
"""``run`` takes a spout whose ``next_tuple`` raised this many bursts in a row, emitting
nothing, for idle."""
MAX_EMITS_PER_RUN = 1_000_000
"""``run`` gives up past this many spout tuples without the spouts going quiet: a spout that
never runs dry, or one that replays trees that keep failing, cannot be run to completion."""


class Recorder:
    """The observer of every task: what each component emitted, and what each spout was told."""

    def __init__(self) -> None:
        self.emits: dict[tuple[str, str], list[list[Any]]] = {}
        self.acks: dict[str, list[Any]] = {}
        self.fails: dict[str, list[Any]] = {}
        self.emit_count = 0
        self.fail_count = 0
        self._times_failed: dict[tuple[str, Any], int] = {}
        self.most_failed: tuple[str, Any, int] | None = None
        """The message that failed most often so far: ``(spout, msg_id, times)``. A spout
        replays a failed message under the same msg id, so ``times`` counts its replays."""

    def emitted(self, component: str, stream: str, values: list[Any]) -> None:
        self.emits.setdefault((component, stream), []).append(list(values))
        if stream != CHECKPOINT_STREAM:  # checkpoints run on the clock: not activity
            self.emit_count += 1

    def acked(self, component: str, msg_id: Any) -> None:
        self.acks.setdefault(component, []).append(msg_id)

    def failed(self, component: str, msg_id: Any) -> None:
        self.fails.setdefault(component, []).append(msg_id)
        self.fail_count += 1
        key = (component, _hashable(msg_id))
        times = self._times_failed[key] = self._times_failed.get(key, 0) + 1
        if self.most_failed is None or times > self.most_failed[2]:
            self.most_failed = (component, msg_id, times)

    @property
    def replays(self) -> int:
        """The most times one message failed (and, if its spout replays, was emitted again)."""
        return self.most_failed[2] if self.most_failed else 0


def _hashable(msg_id: Any) -> Any:
    try:
        hash(msg_id)
    except TypeError:
        return repr(msg_id)
    return msg_id


class _QueueLink:
    """One task's ``Link`` here: payloads are pickled and queued for ``settle``. What the task
    sends to a restarted task it has not heard of yet is lost, as if sent to the old task."""

    def __init__(self, topology: InProcessTopology, sender: int) -> None:
        self._topology = topology
        self._sender = sender

    def send_data(self, dest: int, payload: Any) -> None:
        if self._sender not in self._topology._unaware.get(dest, ()):
            self._topology.data.append((dest, pickle.dumps(payload, protocol=5)))

    def send_control(self, dest: int, payload: Any) -> None:
        if self._sender not in self._topology._unaware.get(dest, ()):
            self._topology.control.append((dest, pickle.dumps(payload, protocol=5)))

    def backlog(self, dest: int) -> int:
        return sum(1 for d, _ in self._topology.data if d == dest)


class InProcessTopology:
    """Run ``topology`` in this process. Spouts are opened and activated at once unless
    ``active=False``. Drive it with ``run`` (spouts emit, everything is delivered, until the
    spouts go quiet), ``settle`` (deliver what is queued), ``advance`` (simulated time) and
    ``close``. ``seed`` decides every random choice rayflow makes in the run (see above)."""

    def __init__(
        self,
        topology: Topology,
        conf: Config | dict[str, Any] | None = None,
        *,
        active: bool = True,
        delivery: Delivery = "fifo",
        seed: int = 0,
    ) -> None:
        config = Config.of(conf)
        if "state_provider" not in config.model_fields_set:
            # A test's state lives as long as the run: nothing written outside the process.
            config = config.merged({"state_provider": "memory"})
        self.conf = config_to_run(topology, config, reach=False)
        topology = with_guarantee(topology, self.conf)
        self.layout = topology.task_layout(self.conf.ackers)
        self.delivery = delivery
        self.seed = seed
        self._rng = random.Random(seed)
        self.data: deque[tuple[int, bytes]] = deque()
        self.control: deque[tuple[int, bytes]] = deque()
        self.recorder = Recorder()
        self.now = 0.0
        self._timers: list[tuple[float, int, float, Callable[[], None], int]] = []
        """(due, order, period, action, task): every task's timers, soonest first."""
        self._order = itertools.count()
        self._topology = topology
        self._restarts: dict[int, int] = {}
        self._unaware: dict[int, set[int]] = {}
        """Restarted task -> the peers that have not heard of it yet (``kill``)."""
        self._active = active
        self.executors: dict[int, Executor] = {task: self._make(task) for task in self.layout}
        for task, executor in self.executors.items():
            executor.start()
            self._add_timers(task, executor)
        if active:
            self.activate()

    def _make(self, task: int) -> Executor:
        # Every task gets its own copy of the components, as every Ray actor unpickles its own.
        context = TopologyContext(task, self.layout, self._topology.stream_fields())
        own = copy.deepcopy(self._topology)
        self._seed_groupings(own, task)
        executor = make_executor(own, self.conf, context, _QueueLink(self, task))
        if isinstance(executor, SpoutExecutor):
            restarts = self._restarts.get(task, 0)
            executor.root_bits = self._generator(task, f"roots {restarts}" if restarts else "roots").getrandbits
        executor.observer = self.recorder
        return executor

    def _add_timers(self, task: int, executor: Executor) -> None:
        for period, action in executor.timers():
            heapq.heappush(self._timers, (self.now + period, next(self._order), period, action, task))

    def kill(self, task: int, *, unaware: Iterable[int] = ()) -> None:
        """Kill task ``task`` and start it again, as Ray restarts a dead task actor: what was
        queued for it is lost, its component is built afresh from the topology and
        ``open``ed or ``prepare``d again, and every other task hears of the restart. What the
        task kept in memory is gone -- a ``"memory"`` state provider's state too; give the run
        ``state_provider="sqlite"`` with a ``{"dir": ...}`` to keep committed state, as a
        task on Ray does. ``metrics()`` counts the restart.

        On Ray the peers hear of a restart one by one. The tasks in ``unaware`` do not hear
        of it yet: what they send to ``task`` is lost (it goes to the old task) until
        ``tell_restart`` tells them."""
        if task not in self.executors:
            raise RayflowError(f"no task {task} in this topology (its tasks: {sorted(self.executors)})")
        late = set(unaware)
        if not late <= self.executors.keys() - {task}:
            raise RayflowError(f"unaware={sorted(late)}: not other tasks of this topology ({sorted(self.executors)})")
        self.data = deque(item for item in self.data if item[0] != task)
        self.control = deque(item for item in self.control if item[0] != task)
        self._restarts[task] = self._restarts.get(task, 0) + 1
        executor = self.executors[task] = self._make(task)
        executor.restarted = True
        self._timers = [timer for timer in self._timers if timer[4] != task]
        heapq.heapify(self._timers)
        executor.start()
        self._add_timers(task, executor)
        if self._active:
            executor.activate()
        self._unaware[task] = late
        for other, peer in self.executors.items():
            if other != task and other not in late:
                peer.peer_restarted(task)

    def tell_restart(self, task: int, peers: Iterable[int] | None = None) -> None:
        """Tell ``peers`` (all that have not heard yet, by default) that ``task`` was restarted
        (``kill(..., unaware=...)``): from now on what they send reaches it."""
        late = self._unaware.get(task, set())
        for peer in sorted(late if peers is None else late & set(peers)):
            late.discard(peer)
            self.executors[peer].peer_restarted(task)

    def _generator(self, task: int, purpose: str) -> random.Random:
        """A generator of its own for one use in one task, seeded from the run's ``seed`` (a
        string seed is hashed with SHA-512: the same in every process)."""
        return random.Random(f"{self.seed}:{task}:{purpose}")

    def _seed_groupings(self, topology: Topology, task: int) -> None:
        """Give each shuffle grouping in ``task``'s copy of the topology a seeded generator."""
        for spec in topology.components.values():
            for sub in spec.inputs:
                if isinstance(sub.grouping, ShuffleGrouping):
                    sub.grouping.rng = self._generator(task, f"shuffle {sub.component}:{sub.stream} -> {spec.id}")

    # -- looking inside -------------------------------------------------------------------------
    def tasks(self, component_id: str) -> list[Executor]:
        """The executors of ``component_id``'s tasks, by task id."""
        return [self.executors[t] for t, c in self.layout.items() if c == component_id]

    def task(self, component_id: str) -> Any:
        """The executor of ``component_id``'s first task."""
        return self.tasks(component_id)[0]

    def components(self, component_id: str) -> list[Any]:
        """The user's component object in each task of ``component_id`` (each task's own copy)."""
        found: list[Any] = []
        for executor in self.tasks(component_id):
            component = getattr(executor, "spout", None) or executor.bolt  # type: ignore[attr-defined]
            found.append(getattr(component, "user_component", component))  # an adapter holds the user's object
        return found

    def emitted(self, component: str, stream: str = DEFAULT_STREAM) -> list[list[Any]]:
        """Every tuple ``component`` emitted on ``stream`` so far, in order, replays included."""
        return [list(v) for v in self.recorder.emits.get((component, stream), [])]

    def acked(self, spout: str) -> list[Any]:
        """The msg ids ``spout`` was told were acked, in order."""
        return list(self.recorder.acks.get(spout, []))

    def failed(self, spout: str) -> list[Any]:
        """The msg ids ``spout`` was told failed (explicitly, or by timeout), in order."""
        return list(self.recorder.fails.get(spout, []))

    def pending_trees(self) -> int:
        """Trees the ackers are still tracking."""
        ackers: list[Any] = self.tasks(ACKER_COMPONENT)
        return sum(len(acker.ledger) for acker in ackers)

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per component, summed over its tasks: the shape of ``TopologyHandle.metrics()``."""
        snaps = {task: e.snapshot() for task, e in self.executors.items()}
        for task, snap in snaps.items():
            snap.update(alive=True, restarts=self._restarts.get(task, 0))
        merged = merge_by_component(self.layout, snaps)
        for component, summary in merged.items():  # as ``TopologyHandle.metrics``
            summary["restarts"] = sum(n for t, n in self._restarts.items() if self.layout[t] == component)
        return merged

    # -- driving ------------------------------------------------------------------------------
    def activate(self) -> None:
        self._active = True
        for executor in self.executors.values():
            executor.activate()

    def deactivate(self) -> None:
        self._active = False
        for executor in self.executors.values():
            executor.deactivate()

    def _next(self) -> tuple[deque[tuple[int, bytes]], tuple[int, bytes]] | None:
        if self.delivery == "random":
            queues = [q for q in (self.control, self.data) if q]
            if not queues:
                return None
            queue = self._rng.choice(queues)
            i = self._rng.randrange(len(queue))
            queue.rotate(-i)
            item = queue.popleft()
            queue.rotate(i)
            return queue, item
        newest = self.delivery == "newest_first"
        for queue in (self.data, self.control) if newest else (self.control, self.data):
            if queue:
                return queue, queue.pop() if newest else queue.popleft()
        return None

    def settle(self) -> None:
        """Flush every outbox and deliver every payload, until nothing moves."""
        while self.step():
            pass

    def step(self) -> bool:
        """Flush every outbox and deliver one payload; ``False`` if there was none. (A test
        can stop between any two deliveries: to kill a task at a chosen moment, say.)"""
        for executor in self.executors.values():
            executor.outbox.flush()
        picked = self._next()
        if picked is None:
            return False
        queue, (dest, payload) = picked
        executor = self.executors[dest]
        if queue is self.data:
            executor.receive(pickle.loads(payload))
        else:
            executor.receive_control(pickle.loads(payload))
        return True

    def run_spouts(self, max_calls: int = 1000) -> int:
        """Give every spout task that wants it one burst of ``next_tuple`` calls; returns the
        tuples emitted."""
        return sum(e.run_burst(max_calls) for e in self.executors.values() if e.wants_next_tuple())

    def run(self, max_replays: int | None = None) -> int:
        """Let the spouts emit and deliver everything, until the spouts emit nothing more (they
        are exhausted, at their pending limit with nothing left to complete, or idle). A
        ``next_tuple`` that raised counts as activity for a while -- on Ray the spout would be
        asked again at once -- so a source that fails now and then is not taken for idle.

        A spout that replays every failure, with a bolt that fails every tuple, never goes
        quiet: ``max_replays`` stops the run once one message has failed that many times
        (``recorder.most_failed`` names it). Without it, the run raises ``RayflowError`` past
        ``MAX_EMITS_PER_RUN`` tuples. Returns the tuples the spouts emitted."""
        total = 0
        raising = 0
        while True:
            errors = self._spout_errors()
            emitted = self.run_spouts()
            self.settle()
            raised = self._spout_errors() > errors
            raising = raising + 1 if raised and not emitted else 0
            if not emitted and (not raised or raising > MAX_RAISING_BURSTS):
                return total
            total += emitted
            if max_replays is not None and 0 < max_replays <= self.recorder.replays:
                return total
            if total > MAX_EMITS_PER_RUN:
                raise RayflowError(self._endless(total))

    def _endless(self, total: int) -> str:
        """Why ``run`` gave up after ``total`` tuples."""
        said = f"the spouts emitted {total:,} tuples without going quiet"
        most = self.recorder.most_failed
        if most is None:
            return (
                f"{said}, and no tree failed: a spout that never runs dry cannot be run to completion "
                "in-process (once it has emitted everything, its next_tuple calls collector.exhausted(); "
                "or mock it with mocked_sources, or drive it step by step)"
            )
        spout, msg_id, times = most
        return (
            f"{said}, and {self.recorder.fail_count:,} trees failed on the way (message {msg_id!r} of spout "
            f"{spout!r} {times:,} time(s)): a replay loop? A spout that replays every failure, with a bolt that "
            "fails every tuple, never finishes; look at the bolts' errors in metrics(). run(max_replays=...) "
            "and complete_topology's max_rounds stop a loop that replays under the same msg ids"
        )

    def _spout_errors(self) -> int:
        return sum(e.metrics.errors for e in self.executors.values() if e.is_source)

    def advance(self, secs: float) -> None:
        """Move the simulated clock ``secs`` forward, firing each timer (message-timeout
        rotations, tick tuples) when it falls due, and delivering what each firing sends."""
        until = self.now + secs
        timers = self._timers
        while timers and timers[0][0] <= until:
            due, order, period, action, task = heapq.heappop(timers)
            self.now = due
            action()
            heapq.heappush(timers, (due + period, order, period, action, task))
            self.settle()
        self.now = until

    def close(self) -> None:
        """Close every task (spouts close, bolts clean up) and deliver what that sends."""
        for executor in self.executors.values():
            executor.close()
        self.settle()

    @property
    def finished(self) -> bool:
        """Every spout task is exhausted with no tree pending."""
        return all(e.finished for e in self.executors.values())
