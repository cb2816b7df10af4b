"""Small conversions shared by the connectors: payloads to values, URLs to safe text."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["redact_url", "text_or_bytes"]


def text_or_bytes(payload: bytes) -> str | bytes:
    """``payload`` decoded as UTF-8 when it is valid UTF-8, else the bytes unchanged."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, fit for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
