"""What rayflow shows of a URL in logs and error messages: never a secret.

Broker and state-store URLs carry passwords (``redis://:secret@host``, ``?auth_token=...``), and
both the connectors and the Redis state provider name their URL when something fails. So they
show it through ``redact_url``, and a URL they refuse by its scheme only (``url_scheme``): a
typo can leave a password anywhere in it. Plain Python, below both.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

__all__ = ["SECRET_PARAMETERS", "redact_url", "scheme", "url_scheme"]

SECRET_PARAMETERS = ("password", "passwd", "pwd", "pass", "secret", "token", "auth", "apikey", "credentials")
"""A query parameter whose name ends so (ignoring case, ``_`` and ``-``) has its value redacted."""


def redact_url(url: str) -> str:
    """``url`` with every secret in it replaced by ``***``, fit for logs and error messages: the
    password of its user info (``redis://:secret@host``) and the value of each query parameter
    that carries one (``?password=secret``, ``?auth_token=...``)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # e.g. an unbalanced "[" in the host: nothing to show safely
        return "<a malformed URL>"
    # Edited in place, not re-assembled: ``urlunsplit`` would turn ``unix:///path`` into ``unix:/path``.
    base, qmark, rest = url.partition("?")
    if password is not None:
        netloc = parts.netloc
        base = base.replace(netloc, f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[1]}", 1)
    query, hash_, fragment = rest.partition("#")
    query = "&".join(_redact_parameter(p) for p in query.split("&"))
    return f"{base}{qmark}{query}{hash_}{fragment}"


def scheme(url: object) -> str:
    """The scheme of ``url`` (``"redis"``), or ``""`` when it is not a URL that can be parsed."""
    if not isinstance(url, str):
        return ""
    try:
        return urlsplit(url).scheme
    except ValueError:  # e.g. an unbalanced "[" in the host
        return ""


def url_scheme(url: object) -> str:
    """What a URL that was refused is, for the error message, without repeating the URL (a
    typo can leave its password anywhere in it)."""
    if not isinstance(url, str):
        return f"a value of type {type(url).__name__}, not a URL"
    return f"a URL with scheme {scheme(url)!r}" if scheme(url) else "a URL without a scheme, or malformed"


def _redact_parameter(parameter: str) -> str:
    name, sep, _ = parameter.partition("=")
    key = unquote_plus(name).lower().replace("_", "").replace("-", "")
    return f"{name}=***" if sep and key.endswith(SECRET_PARAMETERS) else parameter
