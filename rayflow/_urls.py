"""What rayflow shows of a URL in logs and error messages: never a secret.

Broker and state-store URLs carry passwords (``redis://:secret@host``, ``?auth_token=...``), and
both the connectors and the Redis state provider name their URL when something fails. So they
show it through ``redact_url``, and a URL they refuse by its scheme only (``url_scheme``): a
typo can leave a password anywhere in it. Plain Python, below both.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

__all__ = ["SECRET_PARAMETERS", "redact_url", "scheme", "url_scheme"]


def redact_url(url: str) -> str:
    """``url`` with every secret in it replaced by ``***``, fit for logs, errors and metrics:
    the user info's password (``redis://:secret@host``) or, without a ``:``, the whole user info
    (a NATS token: ``nats://secret@host``), and the value of each query parameter that carries
    one (``?password=secret``, ``?auth_token=...``).

    The user info ends at the *last* ``@`` of the URL, not at the first ``/``, ``?`` or ``#``:
    a password written without percent-encoding may hold those (``redis://:pa/ss#1@host``), and
    a URL parser would take them for the end of the host, leaving the password in clear. (An
    ``@`` later in the URL, in a query value, makes more of it hidden: never less.)"""
    scheme_end = url.find("://")
    start = scheme_end + 3 if scheme_end >= 0 else 0  # no "://" (a typo): any "@" still ends a secret
    at = url.rfind("@", start)
    if at < 0:
        return url[:start] + _redact_query(url[start:])
    user, colon, _ = url[start:at].partition(":")
    shown = f"{user}:***" if colon else "***"
    return url[:start] + shown + "@" + _redact_query(url[at + 1 :])


def _redact_query(rest: str) -> str:
    """``rest`` (what follows the user info) with each secret query parameter's value redacted."""
    base, qmark, query = rest.partition("?")
    if not qmark:
        return rest
    query, hash_, fragment = query.partition("#")
    query = "&".join(_redact_parameter(p) for p in query.split("&"))
    return f"{base}?{query}{hash_}{fragment}"


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


SECRET_PARAMETERS = ("password", "passwd", "pwd", "pass", "secret", "token", "auth", "apikey", "credentials")
"""A query parameter whose name ends so (ignoring case, ``_`` and ``-``) has its value redacted."""


def _redact_parameter(parameter: str) -> str:
    name, sep, _ = parameter.partition("=")
    key = unquote_plus(name).lower().replace("_", "").replace("-", "")
    return f"{name}=***" if sep and key.endswith(SECRET_PARAMETERS) else parameter
