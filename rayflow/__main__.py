"""``python -m rayflow``: the ``rayflow`` command."""

from .cli import main

main()
