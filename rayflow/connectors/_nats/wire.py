"""NATS's client protocol, the part a JetStream pull consumer speaks: what keeps a
``NatsJetStreamSpout`` below the cost of a client library per message.

The protocol is lines of text, a message's bytes counted in its line::

    server -> client    INFO {json}            the server's options (first, and on changes)
                        MSG <subject> <sid> [reply] <size>\\r\\n<payload>
                        HMSG <subject> <sid> [reply] <header size> <total size>\\r\\n<headers><payload>
                        PING, PONG, +OK, -ERR '<text>'
    client -> server    CONNECT {json}, PING, PONG
                        SUB <subject> <sid>
                        PUB <subject> [reply] <size>\\r\\n<payload>

``parse`` turns the bytes read from the socket into frames with one ``find`` and one
``split`` per message; a message is a ``Message`` tuple, kept as it is in the spout's buffer.
A header block starts ``NATS/1.0``; JetStream's status messages (the end of a pull request, a
heartbeat) put a status code after it (``NATS/1.0 408 Request Timeout``) and have no payload.

A JetStream message's reply subject is where its ack goes, and it carries what the spout needs
to know about the message (``ack_metadata``), so no per-message object is built::

    $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
    $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>.<token>
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from .._errors import BrokerError

__all__ = [
    "OK",
    "PING",
    "PONG",
    "Err",
    "Frame",
    "Info",
    "Message",
    "NatsError",
    "ack_metadata",
    "header_fields",
    "parse",
    "pub",
    "refusal",
    "status",
    "with_sequence",
]

_CRLF = b"\r\n"
PING = "PING"
PONG = "PONG"
OK = "+OK"


class Message(NamedTuple):
    """A ``MSG`` or ``HMSG``: ``headers`` is the raw header block (``None`` for a ``MSG``)."""

    sid: int
    subject: str
    reply: str | None
    headers: bytes | None
    payload: bytes


class Info(NamedTuple):
    """An ``INFO``: the server's options."""

    options: dict[str, Any]


class Err(NamedTuple):
    """A ``-ERR``: the server's complaint, quotes removed."""

    text: str


Frame = Message | Info | Err | str
"""What ``parse`` yields: a message, an ``INFO``, a ``-ERR``, or ``PING``, ``PONG``, ``+OK``."""


class NatsError(BrokerError):
    """The NATS server refused something (``-ERR``, a JetStream API error, a status that ends
    a pull request with a fault) or spoke outside the protocol. ``code`` is the status or the
    API error's code when there is one."""

    def __init__(self, text: str, code: int = 0) -> None:
        super().__init__(text)
        self.code = code


def parse(buf: bytes, pos: int, out: list[Frame]) -> int:
    """Append the whole frames of ``buf[pos:]`` to ``out``; return where the first one that has
    not all arrived starts (``len(buf)`` when none). Raises ``NatsError`` on bytes outside the
    protocol."""
    find, size = buf.find, len(buf)
    append, new = out.append, tuple.__new__  # ``Message(...)`` costs twice as much: once per message
    while pos < size:
        end = find(_CRLF, pos)
        if end < 0:
            break
        first = buf[pos]
        if first == 77 or first == 72:  # MSG, HMSG: the usual case first
            parts = buf[pos:end].split()
            if first == 77 and len(parts) in (4, 5) and parts[0] == b"MSG":
                header_size, total = 0, int(parts[-1])
            elif first == 72 and len(parts) in (5, 6) and parts[0] == b"HMSG":
                header_size, total = int(parts[-2]), int(parts[-1])
            else:
                raise NatsError(f"a line outside the NATS protocol: {bytes(buf[pos:end])[:200]!r}")
            start = end + 2
            stop = start + total
            if stop + 2 > size:
                break
            if buf[stop] != 13:
                raise NatsError(f"a message does not end where its size says: {bytes(buf[pos:end])[:200]!r}")
            reply = parts[3].decode() if len(parts) == (5 if first == 77 else 6) else None
            headers = buf[start : start + header_size] if header_size else None
            append(new(Message, (int(parts[2]), parts[1].decode(), reply, headers, buf[start + header_size : stop])))
            pos = stop + 2
            continue
        line = buf[pos:end]
        pos = end + 2
        if line == b"PING":
            append(PING)
        elif line == b"PONG":
            append(PONG)
        elif line == b"+OK":
            append(OK)
        elif line.startswith(b"INFO "):
            append(Info(json.loads(line[5:])))
        elif line.startswith(b"-ERR"):
            append(Err(line[4:].strip().strip(b"'").decode(errors="replace")))
        else:
            raise NatsError(f"a line outside the NATS protocol: {bytes(line)[:200]!r}")
    return pos


def refusal(text: str) -> str:
    """A ``-ERR``'s text, with what to check when the server refused the client's rights."""
    lowered = text.lower()
    if lowered.startswith("permissions violation"):
        return (
            f"{text} (the URL's user lacks a permission the spout needs: publish to $JS.API.> and to "
            "$JS.ACK.>, subscribe to _INBOX.>)"
        )
    if lowered.startswith(("authorization violation", "user authentication")):
        return f"{text} (check the URL's user and password, or token)"
    return text


def pub(subject: str, payload: bytes = b"", reply: str | None = None) -> bytes:
    """The ``PUB`` of ``payload`` to ``subject`` (answered to ``reply``)."""
    head = f"PUB {subject} {reply} {len(payload)}\r\n" if reply else f"PUB {subject} {len(payload)}\r\n"
    return head.encode() + payload + _CRLF


def status(headers: bytes | None) -> tuple[int, str]:
    """The status code and description of a status message's header block
    (``NATS/1.0 408 Request Timeout``), or ``(0, "")`` for an ordinary message's."""
    if headers is None or len(headers) < 12 or headers[8] != 32:  # "NATS/1.0 ..."
        return 0, ""
    line = headers[9 : headers.find(_CRLF)].decode(errors="replace")
    code, _, description = line.partition(" ")
    return (int(code), description.strip()) if code.isdigit() else (0, "")


def header_fields(headers: bytes | None) -> dict[str, str] | None:
    """The fields of a header block as nats-py gives them (names as sent, values stripped and
    decoded, the last of repeated names), or ``None`` when it has none."""
    if not headers:
        return None
    fields: dict[str, str] = {}
    for line in headers.split(_CRLF)[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if key and not any(c.isspace() for c in key):
            fields[key] = value.strip().decode("utf-8", "replace")
    return fields or None


def with_sequence(reply: str, sequence: int) -> str:
    """The ack subject of stream sequence ``sequence``, made from ``reply``, the ack subject
    of another message of the same consumer: JetStream settles an ack by its stream sequence
    (what a restarted spout needs to ack a message it knows by its sequence only)."""
    tokens = reply.split(".")
    tokens[5 if len(tokens) == 9 else 7] = str(sequence)
    return ".".join(tokens)


def ack_metadata(reply: str) -> tuple[int, int]:
    """``(times delivered, stream sequence)`` of a JetStream message, from its reply subject.
    Raises ``NatsError`` for a subject that is not a JetStream ack subject."""
    tokens = reply.split(".")
    if tokens[:2] == ["$JS", "ACK"]:
        if len(tokens) == 9:
            return int(tokens[4]), int(tokens[5])
        if len(tokens) >= 11:
            return int(tokens[6]), int(tokens[7])
    raise NatsError(f"not a JetStream ack subject: {reply!r}")
