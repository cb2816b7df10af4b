"""What the broker tests share: reaching the brokers, driving a spout in-process (alone, or in
an in-process topology with a bolt that fails poison messages), cutting its connection (a TCP
proxy between the spout and the broker)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from rayflow import Bolt, OutputCollector, Spout, TopologyBuilder, Tuple
from rayflow._collectors import SpoutOutputCollector
from rayflow._context import TopologyContext
from rayflow.testing import InProcessTopology

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
REDIS_URL = "redis://127.0.0.1:6379/0"
NATS_URL = "nats://127.0.0.1:4222"
POISON = "poison"


def unique(prefix: str) -> str:
    return f"rayflow-test-{prefix}-{uuid.uuid4().hex[:10]}"


def reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return False
    return True


def require_rabbitmq() -> None:
    pytest.importorskip("pika", reason="the rabbitmq extra (pika) is not installed")
    if not reachable(5672):
        pytest.skip("RabbitMQ is not reachable on 127.0.0.1:5672")


def require_redis() -> None:
    pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
    if not reachable(6379):
        pytest.skip("Redis is not reachable on 127.0.0.1:6379")


def require_nats() -> None:
    pytest.importorskip("nats", reason="the nats extra (nats-py) is not installed")
    if not reachable(4222):
        pytest.skip("NATS is not reachable on 127.0.0.1:4222")


def context(task_id: int = 1, component: str = "source") -> TopologyContext:
    return TopologyContext(task_id, {task_id: component}, {component: {}})


class FakeCollector(SpoutOutputCollector):
    """Records what a spout emits and reports, as the spout executor would see it (a
    ``SpoutOutputCollector`` with no task behind it: only what a broker spout calls)."""

    def __init__(self) -> None:  # no task: SpoutOutputCollector's own __init__ is not called
        self.emitted: list[tuple[list[Any], Any]] = []
        self.errors: list[BaseException] = []
        self.counts: dict[str, int] = {}

    def emit(self, values: list[Any], msg_id: Any = None, stream: str = "default") -> list[int]:
        self.emitted.append((list(values), msg_id))
        return [2]

    def exhausted(self) -> None:
        pass

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)

    def count(self, name: str, amount: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + amount


def drive(
    spout: Any, collector: FakeCollector, until: Callable[[], bool], timeout: float = 10.0, upkeep_only: bool = False
) -> bool:
    """Call ``next_tuple`` as the spout loop does until ``until()`` holds (or ``timeout``); with
    ``upkeep_only``, ``upkeep`` instead, as while the spout's pending budget is spent or it is
    deactivated."""
    step = spout.upkeep if upkeep_only else spout.next_tuple
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if until():
            return True
        step()
        time.sleep(0.001)
    return until()


def run_starved(
    spout: Any,
    *,
    messages: int,
    max_pending: int,
    ack_every: float,
    conf: dict[str, Any] | None = None,
    timeout: float = 90.0,
) -> tuple[Counter[Any], FakeCollector]:
    """Drive ``spout`` as its task does, on an asyncio event loop (a task actor's spout runs on
    one, and so does its ``upkeep``): ``next_tuple`` only while fewer than ``max_pending``
    trees are pending, and every pending tree acked only every ``ack_every`` seconds, as by a
    bolt slower than the broker's patience. Returns how often each first value was emitted,
    once ``messages`` distinct ones were acked (or ``timeout`` passed), and the collector."""

    async def run() -> tuple[Counter[Any], FakeCollector]:
        collector = FakeCollector()
        spout.open({"max_spout_pending": max_pending, **(conf or {})}, context(), collector)
        spout.activate()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen: Counter[Any] = Counter()
        pending: list[tuple[Any, Any]] = []
        acked: set[Any] = set()
        released = loop.time()
        try:
            while len(acked) < messages and loop.time() < deadline:
                if len(pending) < max_pending:
                    before = len(collector.emitted)
                    spout.next_tuple()
                    for values, msg_id in collector.emitted[before:]:
                        seen[values[0]] += 1
                        pending.append((values[0], msg_id))
                if loop.time() - released >= ack_every:
                    for value, msg_id in pending:
                        spout.ack(msg_id)
                        acked.add(value)
                    pending, released = [], loop.time()
                await asyncio.sleep(0.01)
        finally:
            spout.close()
        return seen, collector

    return asyncio.run(run())


class FailPoison(Bolt):
    """Fails every tuple whose first value is ``POISON`` (or its bytes), acks the others."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        if tup[0] in (POISON, POISON.encode()):
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def poison_topology(spout: Spout, conf: dict[str, Any] | None = None) -> InProcessTopology:
    """source (the broker spout) -> work (``FailPoison``), in this process."""
    builder = TopologyBuilder()
    builder.set_spout("source", spout)
    builder.set_bolt("work", FailPoison()).shuffle_grouping("source")
    return InProcessTopology(builder.create_topology(), {"topology.max.spout.pending": 100, **(conf or {})})


def run_until(run: InProcessTopology, until: Callable[[], bool], timeout: float = 15.0) -> bool:
    """Let the spouts emit and deliver everything until ``until()`` holds (or ``timeout``): a
    broker spout never runs dry, so ``run()`` alone would not return."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if until():
            return True
        if not run.run_spouts():
            time.sleep(0.002)
        run.settle()
    return until()


class Proxy:
    """A TCP forwarder to ``127.0.0.1:target``. ``cut()`` drops every connection through it and
    refuses new ones (as when the broker or the network goes away); ``hang()`` drops them and
    takes new ones without a word (a broker that does not answer); ``freeze()`` keeps every
    connection open and forwards nothing either way (a half-open connection: the broker or the
    network gone without a word); ``stall()`` keeps them open and holds what either side sends
    until ``restore()`` (a broker that stopped answering for a while: nothing is lost);
    ``restore()`` lets them in and forwards again. ``inject(data)``
    sends ``data`` to the client of the newest connection, as if the broker had sent it."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._up = True
        self._silent = False
        self._frozen = threading.Event()
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        return url.replace(f":{self.target}", f":{self.port}")

    def cut(self) -> None:
        with self._lock:
            self._up = False
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self._sockets.clear()

    def hang(self) -> None:
        self.cut()
        with self._lock:
            self._up, self._silent = True, True

    def freeze(self) -> None:
        self._frozen.set()

    def stall(self) -> None:
        self._flowing.clear()

    def inject(self, data: bytes) -> None:
        with self._lock:
            self._sockets[-2].sendall(data)  # the newest (client, upstream) pair

    def restore(self) -> None:
        with self._lock:
            self._up, self._silent = True, False
        self._frozen.clear()
        self._flowing.set()

    def close(self) -> None:
        self._flowing.set()
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if not self._up:
                    client.close()
                    continue
                if self._silent:  # held open, never answered, closed by the next cut()
                    self._sockets.append(client)
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target))
                except OSError:
                    client.close()
                    continue
                self._sockets += [client, upstream]
            forward(client, upstream, self._frozen, self._flowing)


def forward(
    client: socket.socket,
    upstream: socket.socket,
    frozen: threading.Event | None = None,
    flowing: threading.Event | None = None,
) -> None:
    """Copy bytes both ways between ``client`` and ``upstream`` on two daemon threads (dropping
    them while ``frozen`` is set, holding them while ``flowing`` is clear); when either side
    ends, both are shut down (closing them is the caller's)."""
    threading.Thread(target=_pump, args=(client, upstream, frozen, flowing), daemon=True).start()
    threading.Thread(target=_pump, args=(upstream, client, frozen, flowing), daemon=True).start()


def _pump(
    source: socket.socket, sink: socket.socket, frozen: threading.Event | None, flowing: threading.Event | None
) -> None:
    try:
        while data := source.recv(65536):
            if flowing is not None:
                flowing.wait()
            if frozen is None or not frozen.is_set():
                sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def publish(queue: str, *bodies: bytes | str) -> None:
    """Publish each of ``bodies`` to ``queue`` through the default exchange."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    for body in bodies:
        channel.basic_publish("", queue, body)
    connection.close()


def take_all(queue: str) -> list[bytes]:
    """Take every message of ``queue`` (acking it) and return the bodies, oldest first."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    bodies = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        bodies.append(body)
    connection.close()
    return bodies


def nats_call(work: Callable[[Any], Any]) -> Any:
    """Run ``await work(js)`` with a JetStream context of a fresh connection to the NATS on
    127.0.0.1 (the test's side of the broker: streams, publishing, consumer state)."""
    import asyncio

    import nats

    async def run() -> Any:
        client = await nats.connect(NATS_URL)
        try:
            return await work(client.jetstream())
        finally:
            await client.close()

    return asyncio.run(run())


def nats_api(subject: str, body: dict[str, Any]) -> dict[str, Any]:
    """A JetStream API request (``$JS.API.CONSUMER.DURABLE.CREATE...``) and its JSON answer, for
    what nats-py's helpers cannot say (a consumer's ``max_batch``)."""
    import json

    import nats

    async def run() -> dict[str, Any]:
        client = await nats.connect(NATS_URL)
        try:
            answer = await client.request(subject, json.dumps(body).encode(), timeout=5)
        finally:
            await client.close()
        reply: dict[str, Any] = json.loads(answer.data)
        return reply

    return asyncio.run(run())


def nats_consumer(stream: str, durable: str, **config: Any) -> None:
    """Create durable consumer ``durable`` of ``stream`` with ``config`` (JetStream's names)."""
    body = {"stream_name": stream, "config": {"durable_name": durable, **config}}
    reply = nats_api(f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}", body)
    assert "error" not in reply, reply


def nats_publish(subject: str, *payloads: bytes | str) -> None:
    async def publish_all(js: Any) -> None:
        for payload in payloads:
            await js.publish(subject, payload.encode() if isinstance(payload, str) else payload)

    nats_call(publish_all)


def nats_pending(stream: str, durable: str) -> tuple[int, int] | None:
    """(messages delivered and not acked, messages not delivered yet) of consumer ``durable``
    (``None`` while it does not exist)."""
    import nats.js.errors

    async def info(js: Any) -> tuple[int, int] | None:
        try:
            consumer = await js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            return None
        return int(consumer.num_ack_pending), int(consumer.num_pending)

    result: tuple[int, int] | None = nats_call(info)
    return result
