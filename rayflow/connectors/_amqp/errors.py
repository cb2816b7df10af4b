"""What can end a RabbitMQ consumer: ``AmqpError`` and its three kinds. After any of them the
consumer is dead, and the broker requeues every message it had not heard an ack for."""

from __future__ import annotations

from .._errors import BrokerError

__all__ = ["AmqpError", "BrokerClosed", "ConnectionLost", "ConsumerCancelled"]


class AmqpError(BrokerError):
    """The connection to RabbitMQ is over, or could not be made."""


class ConnectionLost(AmqpError):
    """The socket closed, failed, timed out, or carried something that is not AMQP 0-9-1."""


class BrokerClosed(AmqpError):
    """The broker closed the channel or the connection, and said why (``code``, ``text``):
    403 is a login or permission refused (check the URL's user, password and virtual host),
    404 a queue that does not exist (declare it, or ``declare=True``), 406 a queue declared
    with other arguments than asked."""

    def __init__(self, what: str, code: int, text: str) -> None:
        super().__init__(f"RabbitMQ closed the {what}: {code} {text}")
        self.code = code
        self.text = text


class ConsumerCancelled(AmqpError):
    """The broker cancelled the consumer: its queue was deleted, or the node holding it left."""
