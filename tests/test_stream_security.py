"""Attacks on a task's streams, against the real ``Listener`` and ``StreamTransport`` on
127.0.0.1 in one event loop (no Ray): what an outsider on the network, a process squatting a
dead task's address, or a peer of another topology can make a task do.

Every payload an attacker sends is a ``Bomb``: unpickling it sets ``DETONATED``. The task
under attack unpickles every frame it is handed (``Receiver``), so a bomb that never goes off
is a frame never delivered. After each attack the task must still take a legitimate stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import pickle
import ssl
from collections.abc import Callable

import pytest

from rayflow import TopologyError
from rayflow._groupings import UNREACHABLE
from rayflow._runtime.stream_keys import TopologyKeys
from rayflow._runtime.streams import _HELLO, CONTROL, CREDIT, DATA, FRAME, Dialer, StreamRefused
from rayflow._runtime.transport import StreamTransport
from tests.test_transport import KEYS, Receiver, batch, run, until

DETONATED: list[str] = []


def _detonate(how: str) -> None:
    DETONATED.append(how)


class Bomb:
    """A payload whose unpickling runs code: what a stream must never deliver from an outsider."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __reduce__(self) -> tuple[Callable[[str], None], tuple[str]]:
        return (_detonate, (self.how,))


def bomb_frame(how: str) -> bytes:
    """A frame as the old protocol framed it: length, then the pickle."""
    payload = pickle.dumps((0, [Bomb(how)]), protocol=5)
    return FRAME.pack(len(payload)) + payload


def tls_record(body: bytes) -> bytes:
    """``body`` dressed as a TLS 1.3 application-data record."""
    return bytes([23, 3, 3]) + len(body).to_bytes(2, "big") + body


SECRET_TUPLE = "tuple-only-task-2-may-read"


def client_hello() -> bytes:
    """The first flight of a TLS 1.3 client, as a task's ``Dialer`` sends it (any key will do:
    the listener reads it before it knows who is calling)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.fixture(autouse=True)
def nothing_detonates():
    DETONATED.clear()
    yield
    assert DETONATED == [], "a frame from an attacker was unpickled"


async def still_works(receiver: Receiver, sender: int = 1) -> None:
    """A task of the topology can still open a stream to ``receiver`` and have a frame delivered."""
    link = StreamTransport({receiver.task: receiver.address}, KEYS.issue(sender), max_tuples=100, max_frames=100)
    link.send_data(receiver.task, batch(1, tag=4242))
    await until(lambda: (4242, [0]) in receiver.payloads())
    link.close()


class Relay:
    """A man in the middle: forwards TCP between whoever connects to it and ``target``,
    record by record from the client, and lets the test inject, alter or replay records."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.from_client: list[bytes] = []
        """Every TLS record the client sent, in order."""
        self.alter_next = False
        self.to_server: asyncio.StreamWriter | None = None

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return ("127.0.0.1", self._server.sockets[0].getsockname()[1])

    def inject(self, data: bytes) -> None:
        assert self.to_server is not None
        self.to_server.write(data)

    def close(self) -> None:
        self._server.close()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(*self.target)
        self.to_server = server_writer

        async def back() -> None:
            while data := await server_reader.read(65536):
                client_writer.write(data)
            client_writer.close()

        answer = asyncio.ensure_future(back())
        try:
            while True:
                header = await client_reader.readexactly(5)
                record = header + await client_reader.readexactly(int.from_bytes(header[3:5], "big"))
                self.from_client.append(record)
                if self.alter_next and record[0] == 23:
                    self.alter_next = False
                    record = record[:-1] + bytes([record[-1] ^ 1])
                server_writer.write(record)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            server_writer.close()
            answer.cancel()


class TestWhoMaySend:
    def test_a_relay_cannot_inject_into_a_stream_it_forwards(self):
        """A relay forwards an honest sender's handshake to the live listener, then injects a
        pickle -- raw, and dressed as a TLS record: the stream fails, nothing is unpickled."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            relay = Relay(task2.address)
            link = StreamTransport({2: await relay.start()}, KEYS.issue(1), max_tuples=100, max_frames=100)
            link.send_data(2, batch(1, tag=1))
            await until(lambda: len(task2.frames) == 1)
            relay.inject(tls_record(bomb_frame("relay, dressed as a record")))
            await until(lambda: not task2.listener._streams)
            relay.close()
            relay2 = Relay(task2.address)
            link2 = StreamTransport({2: await relay2.start()}, KEYS.issue(1), max_tuples=100, max_frames=100)
            link2.send_data(2, batch(1, tag=2))
            await until(lambda: len(task2.frames) == 2)
            relay2.inject(bomb_frame("relay, raw"))
            await until(lambda: not task2.listener._streams)
            assert [p[0] for p in task2.payloads()] == [1, 2]
            await still_works(task2)

        run(scenario)

    def test_a_relay_that_injects_before_the_handshake_is_refused(self):
        async def scenario() -> None:
            task2 = await Receiver().start()
            reader, writer = await asyncio.open_connection(*task2.address)
            writer.write(bomb_frame("before the handshake"))
            assert await asyncio.wait_for(reader.read(), 5) == b""  # the listener closes it
            await until(lambda: task2.listener.handshakes == 0)
            assert task2.frames == []
            await still_works(task2)

        run(scenario)

    def test_a_sender_certified_by_another_topology_is_refused(self, caplog):
        """It does not even check whom it talks to: the listener refuses its certificate."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            careless = TopologyKeys().issue(1).client_context()
            careless.verify_mode = ssl.CERT_NONE
            try:
                reader, writer = await asyncio.open_connection(*task2.address, ssl=careless, server_hostname="")
                writer.write(_HELLO.pack(1, DATA) + bomb_frame("another topology"))
                await reader.read()
            except (ssl.SSLError, ConnectionError):
                pass  # refused during the handshake, or at the first read after it
            with pytest.raises(StreamRefused):
                await Dialer(TopologyKeys().issue(1)).open(task2.address, 2, DATA)
            assert task2.frames == []
            await still_works(task2)

        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run(scenario)
        assert any("TLS handshake failed" in r.getMessage() for r in caplog.records)

    def test_a_certificate_for_task_3_cannot_claim_to_be_task_5(self, caplog):
        """Task 3's key is real, but the stream says it comes from task 5: refused before any
        frame is read, whatever follows the claim."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            reader, writer = await asyncio.open_connection(
                *task2.address, ssl=KEYS.issue(3).client_context(), server_hostname=""
            )
            writer.write(_HELLO.pack(5, DATA) + bomb_frame("task 3 as task 5"))
            assert await reader.read() == b""  # no OK: closed
            assert task2.frames == []
            await still_works(task2)

        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run(scenario)
        assert any("claims to be task 5 but its certificate names task 3" in r.getMessage() for r in caplog.records)

    def test_a_stream_on_a_channel_that_does_not_exist_is_refused(self):
        async def scenario() -> None:
            task2 = await Receiver().start()
            reader, writer = await asyncio.open_connection(
                *task2.address, ssl=KEYS.issue(1).client_context(), server_hostname=""
            )
            writer.write(_HELLO.pack(1, 7) + bomb_frame("channel 7"))
            assert await reader.read() == b""
            assert task2.frames == []
            await still_works(task2)

        run(scenario)

    def test_garbage_instead_of_a_handshake_is_refused_and_logged_once_per_period(self, caplog):
        """Forty connections of random bytes: each refused, one warning line for all of them."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            for _ in range(40):
                reader, writer = await asyncio.open_connection(*task2.address)
                writer.write(os.urandom(512))
                await reader.read()
                writer.close()
            await until(lambda: task2.listener.handshakes == 0)
            assert task2.frames == []
            await still_works(task2)

        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run(scenario)
        refusals = [r.getMessage() for r in caplog.records if "refused a stream" in r.getMessage()]
        assert 1 <= len(refusals) <= 2, refusals


class TestWhoMayListen:
    def test_an_impostor_without_keys_at_a_tasks_address_gets_no_tuple_bytes(self):
        """A plain TCP server where task 2 listened, answering like the old protocol (16 bytes
        of challenge, one byte OK): the sender never gets past TLS, and sends it nothing but
        its TLS hello."""

        async def scenario() -> None:
            received = bytearray()
            hung_up = asyncio.Event()  # the sender closed the connection: all it sent is read

            async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writer.write(os.urandom(16) + b"\x01")
                while data := await reader.read(65536):
                    received.extend(data)
                hung_up.set()

            server = await asyncio.start_server(impostor, "127.0.0.1", 0)
            address = ("127.0.0.1", server.sockets[0].getsockname()[1])
            link = StreamTransport({2: address}, KEYS.issue(1), max_tuples=1, max_frames=10)
            link.send_data(2, (0, [SECRET_TUPLE] * 10))
            await asyncio.wait_for(link.wait_for_room(), 20)  # the refusal frees the sender
            assert link.backlog(2) == UNREACHABLE  # refused: a shuffle sends it nothing for now
            await asyncio.wait_for(hung_up.wait(), 20)
            assert SECRET_TUPLE.encode() not in received
            assert received[:1] == b"\x16"  # a TLS handshake record, the ClientHello
            server.close()

        run(scenario)

    def test_a_listener_of_another_topology_gets_no_tuple_bytes(self):
        """A TLS server with a certificate of another topology: the sender refuses it."""

        async def scenario() -> None:
            stranger = await Receiver(keys=TopologyKeys().issue(2)).start()
            with pytest.raises(StreamRefused, match="did not prove it is task 2"):
                await Dialer(KEYS.issue(1)).open(stranger.address, 2, DATA)
            assert stranger.frames == []

        run(scenario)

    def test_a_task_of_this_topology_at_the_address_of_another_gets_nothing(self):
        """Task 3 listens where the sender looks for task 2 (a relay to it, or a stale address):
        the sender sees task 3's certificate and sends nothing."""

        async def scenario() -> None:
            task3 = await Receiver(task=3).start()
            relay = Relay(task3.address)
            with pytest.raises(StreamRefused, match="is task 3 of this topology, not task 2"):
                await Dialer(KEYS.issue(1)).open(await relay.start(), 2, DATA)
            link = StreamTransport({2: task3.address}, KEYS.issue(1), max_tuples=10, max_frames=10)
            link.send_data(2, batch(1))
            await asyncio.wait_for(link.wait_for_room(), 5)
            await asyncio.sleep(0.1)
            assert task3.frames == []
            await still_works(task3)

        run(scenario)


class TestRecords:
    def test_an_altered_record_drops_the_stream_and_delivers_nothing_of_it(self, caplog):
        async def scenario() -> None:
            task2 = await Receiver().start()
            relay = Relay(task2.address)
            link = StreamTransport({2: await relay.start()}, KEYS.issue(1), max_tuples=100, max_frames=100)
            link.send_data(2, batch(1, tag=1))
            await until(lambda: len(task2.frames) == 1)
            relay.alter_next = True
            link.send_data(2, batch(1, tag=2))
            await until(lambda: not task2.listener._streams)
            assert [p[0] for p in task2.payloads()] == [1]
            await still_works(task2)

        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run(scenario)
        assert any("closed the stream from task 1" in r.getMessage() for r in caplog.records)

    def test_a_replayed_record_drops_the_stream_and_is_not_delivered_twice(self):
        async def scenario() -> None:
            task2 = await Receiver().start()
            relay = Relay(task2.address)
            link = StreamTransport({2: await relay.start()}, KEYS.issue(1), max_tuples=100, max_frames=100)
            link.send_data(2, batch(1, tag=1))
            await until(lambda: len(task2.frames) == 1)
            relay.inject(relay.from_client[-1])  # the record that carried the frame, again
            await until(lambda: not task2.listener._streams)
            assert [p[0] for p in task2.payloads()] == [1]
            await still_works(task2)

        run(scenario)

    def test_a_recorded_session_replayed_on_a_new_connection_is_refused(self):
        async def scenario() -> None:
            task2 = await Receiver().start()
            relay = Relay(task2.address)
            link = StreamTransport({2: await relay.start()}, KEYS.issue(1), max_tuples=100, max_frames=100)
            link.send_data(2, batch(1, tag=1))
            await until(lambda: len(task2.frames) == 1)
            reader, writer = await asyncio.open_connection(*task2.address)
            writer.write(b"".join(relay.from_client))
            await reader.read()  # the listener closes it
            await until(lambda: task2.listener.handshakes == 0)
            assert [p[0] for p in task2.payloads()] == [1]
            await still_works(task2)

        run(scenario)


class TestLimits:
    def test_an_oversized_length_closes_the_stream_before_anything_is_read(self, caplog):
        """A length of 2^40 from an authenticated peer: the stream is closed at once, not
        buffered until the task runs out of memory."""

        async def scenario() -> None:
            task2 = await Receiver(max_frame_bytes=1 << 20).start()
            reader, writer = await Dialer(KEYS.issue(1)).open(task2.address, 2, DATA)
            writer.write(FRAME.pack(1 << 40) + b"x" * 65536)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert task2.frames == []
            await still_works(task2)

        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run(scenario)
        assert any("is over rayflow.stream.max.frame.bytes" in r.getMessage() for r in caplog.records)

    def test_idle_connections_cannot_keep_a_sender_out(self):
        """Twenty connections that never start a handshake, against a cap of four in progress:
        at most four are held, each new one evicts the oldest, a task's sender still gets its
        stream at once, and the idlers are all closed by the handshake deadline."""

        async def scenario() -> None:
            task2 = await Receiver(max_handshakes=4, handshake_secs=2.0).start()
            idlers = [await asyncio.open_connection(*task2.address) for _ in range(20)]
            await until(lambda: task2.listener.handshakes == 4)
            started = asyncio.get_running_loop().time()
            await still_works(task2)
            assert asyncio.get_running_loop().time() - started < 2.0  # before any idler timed out
            assert task2.listener.handshakes <= 4
            for reader, _ in idlers:  # evicted, or cut at the deadline
                assert await asyncio.wait_for(reader.read(), 5) == b""
            assert task2.listener.handshakes == 0

        run(scenario)

    def test_a_slow_handshake_is_cut_at_the_deadline(self, caplog):
        """A client that dribbles its TLS hello a byte at a time is closed at the deadline."""

        async def scenario() -> None:
            task2 = await Receiver(handshake_secs=0.5).start()
            reader, writer = await asyncio.open_connection(*task2.address)
            for byte in bytes([22, 3, 1, 0, 200]):
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert task2.listener.handshakes == 0
            await still_works(task2)

        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run(scenario)
        assert any("no handshake within 0.5 s" in r.getMessage() for r in caplog.records)

    def test_refused_half_handshakes_give_their_tls_objects_back_at_once(self):
        """Thirty connections send half a TLS client hello and stop, against a cap of eight:
        evicted (busy), cut at the deadline (slow) or ending in garbage (a TLS failure). With
        the cycle collector off, every TLS protocol the listener made for them (each holds a
        256 KiB buffer) is gone once they are refused: freed as they end, not by a full cycle
        collection, so what half-handshakes hold is bounded by the cap (``docs/security.md``
        has the figures of ``benchmarks/half_handshakes.py``)."""
        from asyncio.sslproto import SSLProtocol

        def tls_protocols() -> int:
            return sum(isinstance(o, SSLProtocol) for o in gc.get_objects())

        async def scenario() -> None:
            task2 = await Receiver(max_handshakes=8, handshake_secs=1.0).start()
            hello = client_hello()
            clients = []
            for i in range(30):
                reader, writer = await asyncio.open_connection(*task2.address)
                writer.write(hello[: len(hello) // 2] if i % 3 else b"\x16\x03\x01\x00\x05garbage")
                clients.append((reader, writer))
            await until(lambda: task2.listener.handshakes == 0)
            for reader, _ in clients:
                assert await asyncio.wait_for(reader.read(), 5) == b""
            await until(lambda: tls_protocols() == 0)
            for _, writer in clients:
                writer.close()

        gc.collect()
        gc.disable()
        try:
            run(scenario)
        finally:
            gc.enable()

    def test_failed_dials_give_their_tls_objects_back_at_once(self):
        """A sender dialling an address where something else answers (not TLS) twenty times:
        each dial is refused, and with the cycle collector off no TLS protocol of them is left."""
        from asyncio.sslproto import SSLProtocol

        def tls_protocols() -> int:
            return sum(isinstance(o, SSLProtocol) for o in gc.get_objects())

        async def scenario() -> None:
            async def squatter(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                writer.close()

            server = await asyncio.start_server(squatter, "127.0.0.1", 0)
            address = ("127.0.0.1", server.sockets[0].getsockname()[1])
            dialer = Dialer(KEYS.issue(1))
            for _ in range(20):
                with pytest.raises((StreamRefused, ConnectionError)):
                    await dialer.open(address, 2, DATA, handshake_secs=2.0)
            await until(lambda: tls_protocols() == 0)
            server.close()

        gc.collect()
        gc.disable()
        try:
            run(scenario)
        finally:
            gc.enable()

    def test_a_credit_flood_closes_the_stream_instead_of_spinning(self, caplog):
        """A listener with task 2's key (the worst case: a task of the topology gone wrong)
        credits 2^32-1 frames for one sent: the sender closes the stream as a violation, is
        not held, and reaches the real task once pointed at it."""

        async def scenario() -> None:
            context = KEYS.issue(2).server_context()

            async def flooding(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await reader.readexactly(_HELLO.size)
                writer.write(b"\x01")
                (size,) = FRAME.unpack(await reader.readexactly(FRAME.size))
                await reader.readexactly(size)
                writer.write(CREDIT.pack(2**32 - 1))
                await reader.read()

            server = await asyncio.start_server(flooding, "127.0.0.1", 0, ssl=context)
            address = ("127.0.0.1", server.sockets[0].getsockname()[1])
            link = StreamTransport({2: address}, KEYS.issue(1), max_tuples=1, max_frames=10)
            link.send_data(2, batch(5))
            await asyncio.wait_for(link.wait_for_room(), 5)
            assert link.backlog(2) == UNREACHABLE  # the stream is closed as a violation
            task2 = await Receiver().start()
            link.replace(2, task2.address)
            link.send_data(2, batch(1, tag=7))
            await until(lambda: task2.payloads() == [(7, [0])])
            server.close()

        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run(scenario)
        assert any("credited 4294967295 frame(s) with 1 outstanding" in r.getMessage() for r in caplog.records)

    def test_acker_traffic_is_held_to_the_same_rules(self):
        """The control channel is authenticated and bounded like the data channel."""

        async def scenario() -> None:
            acker = await Receiver(task=9, max_frame_bytes=1 << 20).start()
            reader, writer = await Dialer(KEYS.issue(1)).open(acker.address, 9, CONTROL)
            writer.write(FRAME.pack(1 << 40))
            assert await asyncio.wait_for(reader.read(), 5) == b""
            with pytest.raises(StreamRefused):
                await Dialer(TopologyKeys().issue(1)).open(acker.address, 9, CONTROL)
            assert acker.frames == []
            await still_works(acker)

        run(scenario)


def test_contexts_speak_tls_1_3_only():
    keys = KEYS.issue(1)
    for context in (keys.client_context(), keys.server_context()):
        assert context.minimum_version == ssl.TLSVersion.TLSv1_3
        assert context.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.ray
class TestBindAddress:
    """Where task actors listen, on the session's Ray."""

    def test_an_address_the_node_does_not_have_fails_the_submit_naming_it(self, ray_cluster: str) -> None:
        """No silent fallback to every interface: the error names the address and the setting."""
        from rayflow import TopologyBuilder, submit_topology

        from .topology_helpers import Bounded, Sink

        builder = TopologyBuilder()
        builder.set_spout("in", Bounded(3))
        builder.set_bolt("sink", Sink()).shuffle_grouping("in")
        conf = {"rayflow.stream.bind.host": "192.0.2.77", "topology.acker.executors": 0}
        with pytest.raises(TopologyError, match=r"cannot listen on 192\.0\.2\.77 \(rayflow\.stream\.bind\.host\)"):
            submit_topology("bind-test", conf, builder.create_topology())

    def test_every_interface_when_asked_and_peers_are_told_the_nodes_address(self, ray_cluster: str) -> None:
        from rayflow import TopologyBuilder, submit_topology

        from .topology_helpers import Bounded, Sink

        builder = TopologyBuilder()
        builder.set_spout("in", Bounded(20))
        builder.set_bolt("sink", Sink(), parallelism=2).shuffle_grouping("in")
        handle = submit_topology("bind-all", {"rayflow.stream.bind.host": "0.0.0.0"}, builder.create_topology())
        try:
            assert handle.wait(timeout=60)
            assert handle.metrics()["in"]["acked"] == 20
        finally:
            handle.kill()
