"""``python -m rayflow``: the ``rayflow`` command."""

from ._cli import main

main()
