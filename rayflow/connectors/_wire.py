"""Small conversions shared by the connectors: payloads to values. URLs to safe text come from
``rayflow._urls``, which the state providers share (one redaction for every secret a URL holds)."""

from __future__ import annotations

from .._urls import CUT_USER_INFO, cut_user_info, redact_url, scheme, url_scheme

__all__ = ["CUT_USER_INFO", "cut_user_info", "redact_url", "scheme", "text_or_bytes", "url_scheme"]


def text_or_bytes(payload: bytes) -> str | bytes:
    """``payload`` decoded as UTF-8 when it is valid UTF-8, else the bytes unchanged."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload
