"""A module that fails on import, for module_raises.yaml."""

RATIO = 1 / 0
