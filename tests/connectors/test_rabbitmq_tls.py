"""RabbitMQSpout over ``amqps://``: the spout reads deliveries off a non-blocking TLS socket.
The broker here listens without TLS, so a TLS terminator made by the test (a self-signed
certificate for ``localhost``) sits in front of it; the URL carries pika's ``ssl_options``."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import eventually
from tests.connectors.brokers import FakeCollector, context, drive, forward, publish, require_rabbitmq
from tests.connectors.test_rabbitmq_spout import ready

pytestmark = pytest.mark.broker


class TlsTerminator:
    """Takes TLS connections on a free port of 127.0.0.1 and forwards the plain bytes to
    RabbitMQ's 5672."""

    def __init__(self, cert: Path, key: Path) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
                client = self._context.wrap_socket(raw, server_side=True)
                upstream = socket.create_connection(("127.0.0.1", 5672))
            except OSError:
                return
            self._sockets += [client, upstream]
            forward(client, upstream)


@pytest.fixture
def terminator(tmp_path: Path) -> Iterator[tuple[TlsTerminator, Path]]:
    require_rabbitmq()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    running = TlsTerminator(cert_path, key_path)
    yield running, cert_path
    running.close()


def test_a_queue_drains_over_tls_and_every_message_is_acked(queue: str, terminator: tuple[TlsTerminator, Path]) -> None:
    """500 messages through ``amqps://`` (the CA and the server name from ``ssl_options``): each
    one emitted once, whole; acked, the queue is empty once the spout closes."""
    from rayflow.connectors.rabbitmq import RabbitMQSpout

    running, ca = terminator
    options = quote(repr({"ca_certs": str(ca), "server_hostname": "localhost"}))
    url = f"amqps://guest:guest@127.0.0.1:{running.port}/%2F?ssl_options={options}"
    bodies = [f"message {i} " + "x" * (i % 300) for i in range(500)]
    publish(queue, *bodies)
    spout = RabbitMQSpout(queue, url=url)
    collector = FakeCollector()
    spout.open({"max_spout_pending": 1000}, context(), collector)
    spout.activate()
    assert drive(spout, collector, lambda: len(collector.emitted) == 500, timeout=20)
    assert collector.errors == []
    assert sorted(values[0] for values, _ in collector.emitted) == sorted(bodies)
    for _, msg_id in collector.emitted:
        spout.ack(msg_id)
    spout.close()
    assert eventually(lambda: ready(queue) == 0, timeout=10)
