"""Key material for the streams between a topology's tasks: who may send, who may listen.

At submit the driver makes a certificate authority for the topology alone (``TopologyKeys``):
an elliptic-curve key pair that lives in the driver's memory and nowhere else, and dies with
it. Each task actor -- and each restart of one -- gets its own key and a certificate signed by
that authority (``TaskKeys``), whose one identity is the URI ``rayflow://<topology-id>/task/<n>``.
A task's TLS contexts trust that authority and nothing else (not the system's roots), speak
TLS 1.3 only and demand a certificate from the peer, so a stream is between two holders of this
topology's certificates; ``peer_task`` then says which task the other end is.

``TaskKeys`` travels to its actor through Ray, in the constructor's arguments: the transport
is as private as Ray's own channels (``docs/security.md``).

A task only loads what it was given into ``ssl``; ``cryptography``, which makes the keys and
certificates, is imported by the driver's ``TopologyKeys`` alone, so a task actor's process
starts without it (``benchmarks/topology_start.py``).
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["TaskKeys", "TopologyKeys", "peer_task", "task_identity"]

_VALIDITY = datetime.timedelta(days=3650)
"""Certificates outlive any topology: what bounds them is the authority, forgotten with the driver."""
_CLOCK_SKEW = datetime.timedelta(days=1)
"""Certificates are valid from this long before they were made: nodes' clocks differ."""
_IDENTITY = re.compile(r"rayflow://([0-9a-f]{32})/task/(0|[1-9][0-9]*)")


def task_identity(topology_id: str, task: int) -> str:
    """The identity a task's certificate carries (a subject alternative name URI)."""
    return f"rayflow://{topology_id}/task/{task}"


def _new_key() -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem(certificate: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return certificate.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class TaskKeys:
    """What one task actor proves itself with: its certificate and key, and the topology's
    authority certificate that its peers' certificates must chain to."""

    topology_id: str
    task: int
    authority_pem: bytes
    certificate_pem: bytes
    key_pem: bytes = field(repr=False)

    def server_context(self) -> ssl.SSLContext:
        """For the task's listener: TLS 1.3, the task's certificate, a peer certificate required."""
        context = self._context(ssl.PROTOCOL_TLS_SERVER)
        context.num_tickets = 0  # streams are long-lived and never resumed: no session tickets
        return context

    def client_context(self) -> ssl.SSLContext:
        """For the task's outgoing streams: TLS 1.3, the task's certificate, the listener's
        certificate verified against the topology's authority. Which task the listener must be
        is checked by the caller with ``peer_task`` (no host names: tasks move between nodes)."""
        context = self._context(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        return context

    def _context(self, protocol: ssl._SSLMethod) -> ssl.SSLContext:
        context = ssl.SSLContext(protocol)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=self.authority_pem.decode("ascii"))
        _load_identity(context, self.certificate_pem + self.key_pem)
        return context


def _load_identity(context: ssl.SSLContext, chain: bytes) -> None:
    """``ssl`` loads a certificate and key only from a file: a private, memory-backed one where
    the system has them, else a file in a fresh private directory, deleted at once."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("rayflow-task-key")
        try:
            os.write(fd, chain)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="rayflow-") as private:
        path = Path(private) / "task.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, chain)
        finally:
            os.close(fd)
        context.load_cert_chain(str(path))


class TopologyKeys:
    """A topology's certificate authority, held by the driver: issues each task's keys."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import NameOID

        self.topology_id = secrets.token_hex(16)
        self._key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"rayflow topology {self.topology_id}")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._name = name
        self._authority = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.authority_pem = _pem(self._authority)

    def issue(self, task: int) -> TaskKeys:
        """A fresh key and certificate for ``task`` (every start and restart of its actor)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = _new_key()
        now = datetime.datetime.now(datetime.timezone.utc)
        identity = task_identity(self.topology_id, task)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity)]), critical=True)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return TaskKeys(self.topology_id, task, self.authority_pem, _pem(certificate), key_pem)


def peer_task(ssl_object: ssl.SSLObject | None, topology_id: str) -> int | None:
    """The task the other end of a verified TLS stream is, by its certificate; ``None`` when it
    carries no identity of this topology (or the stream is not TLS)."""
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert()
    if not certificate:
        return None
    uris = [name[1] for name in certificate.get("subjectAltName", ()) if name[0] == "URI"]
    if len(uris) != 1 or not isinstance(uris[0], str):
        return None
    match = _IDENTITY.fullmatch(uris[0])
    if match is None or match.group(1) != topology_id:
        return None
    return int(match.group(2))
