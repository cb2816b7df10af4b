"""How a connector lives through a broker that goes away: retry with backoff, report once.

A spout's ``next_tuple`` runs on its task's event loop, so a connector must neither block
waiting for a broker that is down nor raise on every call (that is a crash loop in slow motion:
the error count climbs, the log fills, nothing gets better). ``Outage`` keeps the schedule
instead: the connector asks ``due()`` before it tries to (re)connect, tells ``failed(exc)`` or
``recovered()`` how it went, and the first failure of an outage is reported to the collector
(``report_error``, so it shows in the task's metrics and log) while the retries are only logged
at debug level. What is reported is a ``BrokerError`` (``_errors``): where (the spout, its task,
the URL with its secrets redacted), what failed, and for the failures that have one, what to
check; the failure itself is its ``__cause__``.
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
import time
from collections.abc import Callable

from ._errors import BrokerError

__all__ = ["Outage", "explain"]

logger = logging.getLogger("rayflow.connectors")

FIRST_DELAY_SECS = 0.1
MAX_DELAY_SECS = 5.0
JITTER = 0.2
"""Each delay is spread by this fraction, so that the tasks of one spout do not retry in step."""


class Outage:
    """The retry schedule of one connection. ``where`` names it in messages
    (e.g. ``"RabbitMQSpout 'events' task 3 (amqp://guest:***@127.0.0.1:5672/%2F)"``)."""

    def __init__(
        self,
        where: str,
        report: Callable[[BaseException], None],
        *,
        first_delay: float = FIRST_DELAY_SECS,
        max_delay: float = MAX_DELAY_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.where = where
        self._report = report
        self._first_delay = first_delay
        self._max_delay = max_delay
        self._clock = clock
        self._delay = first_delay
        self._retry_at = 0.0
        self.since: float | None = None
        """When the current outage began (``None`` while connected)."""
        self.attempts = 0
        """Failed attempts in the current outage."""
        self.outages = 0
        """Outages so far (each one reported once)."""

    @property
    def down(self) -> bool:
        return self.since is not None

    def due(self) -> bool:
        """May the connector try to connect now?"""
        return self._clock() >= self._retry_at

    def failed(self, exc: BaseException) -> None:
        """An attempt failed, or a working connection was lost: schedule the next attempt."""
        now = self._clock()
        if self.since is None:
            self.since = now
            self.outages += 1
            self._delay = self._first_delay
            message = f"{self.where}: {explain(exc)}; retrying with backoff"
            logger.warning("%s", message)
            report = BrokerError(message)
            report.__cause__ = exc
            self._report(report)
        else:
            logger.debug("%s: attempt %d failed: %s", self.where, self.attempts + 1, exc)
        self.attempts += 1
        spread = 1.0 + JITTER * (2.0 * random.random() - 1.0)
        self._retry_at = now + self._delay * spread
        self._delay = min(self._delay * 2.0, self._max_delay)

    def recovered(self) -> None:
        """A connection is up (again)."""
        if self.since is not None:
            logger.warning(
                "%s: connected again after %.1f s and %d attempt(s)",
                self.where,
                self._clock() - self.since,
                self.attempts,
            )
        self.since = None
        self.attempts = 0
        self._delay = self._first_delay
        self._retry_at = 0.0


def explain(exc: BaseException) -> str:
    """What ``exc`` means for a connection to a broker, and what to check where that is clear."""
    said = f"{type(exc).__name__}: {exc}" if not isinstance(exc, BrokerError) else str(exc)
    for kind, hint in _HINTS:
        if isinstance(exc, kind):
            return f"{said} ({hint})"
    return said


_HINTS: list[tuple[type[BaseException], str]] = [
    (ConnectionRefusedError, "nothing listens there: is the broker running, and are the URL's host and port right?"),
    (socket.gaierror, "the URL's host name does not resolve"),
    (ssl.SSLCertVerificationError, "set SSL_CERT_FILE for a private CA; the URL's host must match the certificate"),
    (ssl.SSLError, "does the broker speak TLS on that port, and the URL ask for it?"),
    (TimeoutError, "no answer in time: is the host reachable, or a firewall in the way?"),
]
