"""``${...}`` placeholders, replaced in a file's text before it is parsed (as Storm's Flux does).

``${ENV-NAME}`` takes the environment variable ``NAME``; ``${key}`` takes ``key`` from the
properties (``--set key=value`` and ``--properties FILE``); ``$${...}`` is a literal ``${...}``.
Values are inserted as text, so ``parallelism: ${par}`` with ``par=2`` reads as the integer 2.

A placeholder that cannot be replaced (unset, or a value spanning lines, which would shift every
line number after it) is swapped for a plain token instead. The parser restores the token and
reports it with the line and path where it sits, so a placeholder inside a comment costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ._reading import MAX_LOAD_BYTES, OverBudget, read_text

__all__ = ["Placeholders", "read_properties", "substitute"]

ENV_PREFIX = "ENV-"
_PLACEHOLDER = re.compile(r"\$(\$?)\{([^{}\n]*)\}")
_TOKEN = re.compile(r"__rayflow_placeholder_(\d+)__")


@dataclass
class Placeholders:
    """The placeholders of one file left for the parser: original text and, if unresolved, why."""

    originals: list[str] = field(default_factory=list)
    problems: list[str | None] = field(default_factory=list)

    def token(self, original: str, problem: str | None) -> str:
        self.originals.append(original)
        self.problems.append(problem)
        return f"__rayflow_placeholder_{len(self.originals) - 1}__"

    def restore(self, text: str) -> tuple[str, list[str]]:
        """``text`` with its tokens turned back into what was written, and the problems they carry."""
        if "__rayflow_placeholder_" not in text:
            return text, []
        found: list[str] = []

        def back(match: re.Match[str]) -> str:
            i = int(match.group(1))
            problem = self.problems[i]
            if problem is not None:
                found.append(problem)
            return self.originals[i]

        return _TOKEN.sub(back, text), found


def substitute(
    text: str, properties: Mapping[str, str], environ: Mapping[str, str], limit: int | None = None
) -> tuple[str, Placeholders]:
    """Replace every ``${...}`` that can be; tokens stand in for the rest (see the module doc).
    Raises ``OverBudget`` as soon as the text would grow past ``limit`` characters, before it
    is built: a short file of ``${key}`` with a long value is not a way to exhaust memory."""
    left = Placeholders()
    length = len(text)

    def replace(match: re.Match[str]) -> str:
        nonlocal length
        escaped, name = match.group(1), match.group(2).strip()
        if escaped:
            out = left.token(match.group(0)[1:], None)
        else:
            value, problem = _lookup(name, properties, environ)
            if problem is None and ("\n" in value or "\r" in value):
                problem = f"the value of ${{{name}}} spans several lines; only single-line values can be substituted"
            out = left.token(match.group(0), problem) if problem else value
        length += len(out) - len(match.group(0))
        if limit is not None and length > limit:
            raise OverBudget(
                f"substituting ${{{name}}} here makes the text pass the {limit:,} characters left of the"
                f" {MAX_LOAD_BYTES // 1024} KiB one load may parse",
                text.count("\n", 0, match.start()) + 1,
            )
        return out

    return _PLACEHOLDER.sub(replace, text), left


def _lookup(name: str, properties: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, str | None]:
    if not name:
        return "", "empty placeholder ${}: write ${key} or ${ENV-NAME}"
    if name.startswith(ENV_PREFIX):
        var = name[len(ENV_PREFIX) :]
        if var in environ:
            return environ[var], None
        return "", f"unresolved ${{{name}}}: environment variable {var} is not set"
    if name in properties:
        return str(properties[name]), None
    return "", f"unresolved ${{{name}}}: pass --set {name}=VALUE or define it in a --properties file"


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-style properties file: ``key=value`` or ``key: value`` lines, ``#``/``!``
    comments. Raises ``ValueError`` naming the line of anything else, and as ``read_text`` does
    for a file that is not regular, too large or not UTF-8; ``OSError`` if it cannot be read."""
    try:
        text = read_text(path)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    props: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if match is None:
            # the line is not repeated: a properties file is where secrets are kept
            raise ValueError(f"{path}:{number}: expected key=value or key: value")
        props[match.group(1)] = match.group(2)
    return props
