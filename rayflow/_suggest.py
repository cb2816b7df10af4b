"""``did_you_mean``: the one place rayflow guesses what a user meant by a name it does not know
(a config key, a field of a topology file, a name in a dotted import path)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["did_you_mean"]


def did_you_mean(word: Any, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else an empty string.

    ``cutoff`` is difflib's similarity ratio: raise it where a miss is more likely a name of the
    user's own than a typo (an unknown config key is passed to the components)."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""
