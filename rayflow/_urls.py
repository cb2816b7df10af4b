"""What rayflow shows of a URL in logs and error messages: never a secret.

Broker and state-store URLs carry passwords (``redis://:secret@host``, ``?auth_token=...``), and
both the connectors and the Redis state provider name their URL when something fails. So they
show it through ``redact_url``, and a URL they refuse by its scheme only (``url_scheme``): a
typo can leave a password anywhere in it. A URL whose password holds a ``/``, ``?`` or ``#``
written as it is, they refuse when they are given it (``cut_user_info``): every URL parser
(redis-py's, pika's, the NATS spout's) would end the host there and read a piece of the password
as the port, and its error quotes that piece. Plain Python, below both.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

__all__ = ["CUT_USER_INFO", "SECRET_PARAMETERS", "cut_user_info", "redact_url", "scheme", "url_scheme"]


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


def cut_user_info(url: object) -> bool:
    """Does a URL parser end ``url``'s host before its last ``@``, at a ``/``, ``?`` or ``#``?
    Then it reads what comes before as the host and port (``redis://:pa/ss@host``: port ``pa``)
    and its error (``Port could not be cast to integer value as 'pa'``) shows a piece of the
    password in the logs, the task's metrics and the web page. A connector refuses such a URL
    with ``CUT_USER_INFO``, which repeats none of it. (An ``@`` in a query value makes a URL
    refused too: percent-encoded, it means the same to every parser.)"""
    if not isinstance(url, str):
        return False
    scheme_end = url.find("://")
    start = scheme_end + 3 if scheme_end >= 0 else 0
    at = url.rfind("@", start)
    return at >= 0 and any(c in url[start:at] for c in "/?#")


CUT_USER_INFO = (
    "has an '@' after a '/', '?' or '#', where a URL parser takes the host to end: a password written as "
    "it is would be read as the host and port. Percent-encode these in the user info ('/' as %2F, '?' as %3F, "
    "'#' as %23, '@' as %40), and an '@' in the path or query as %40"
)
"""Why a URL that ``cut_user_info`` is refused, and the fix, after ``"<component>: url "``."""


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
"""A query parameter whose name ends so (ignoring case, ``_`` and ``-``) has its value redacted,
and so has one whose value holds any of these: a mapping with a secret in it (pika's
``ssl_options={'certfile': ..., 'password': ...}``, the client key's password)."""


def _redact_parameter(parameter: str) -> str:
    name, sep, value = parameter.partition("=")
    key, said = (unquote_plus(part).lower().replace("_", "").replace("-", "") for part in (name, value))
    secret = key.endswith(SECRET_PARAMETERS) or any(word in said for word in SECRET_PARAMETERS)
    return f"{name}=***" if sep and secret else parameter
