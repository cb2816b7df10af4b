"""The public surface, pinned both ways (as httpx's test does): every public name a package
holds is in its ``__all__``, everything in ``__all__`` is there, and the contract's names are
among them. Implementation modules are private; a new public module must be listed here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import rayflow

CONTRACT = {
    # components and collectors
    "Spout",
    "Bolt",
    "BasicBolt",
    "BatchBolt",
    "OutputFieldsDeclarer",
    "SpoutOutputCollector",
    "OutputCollector",
    "BasicOutputCollector",
    "BatchOutputCollector",
    "TopologyContext",
    "Tuple",
    # building and configuring
    "TopologyBuilder",
    "BoltDeclarer",
    "Topology",
    "CustomStreamGrouping",
    "StreamId",
    "Config",
    # running
    "LocalCluster",
    "TopologyHandle",
    "submit_topology",
    # state that survives restarts
    "StatefulBolt",
    "KeyValueState",
    # exactly-once sinks
    "TwoPhaseCommitSink",
    # windows
    "WindowedBolt",
    "TupleWindow",
    "Count",
    "Duration",
    # errors
    "RayflowError",
    "TopologyError",
    "ConfigError",
    "EmitError",
    "FailedException",
    "SpecError",
    "StateError",
}

PUBLIC_MODULES = {
    "rayflow",
    "rayflow.connectors",
    "rayflow.connectors.nats",
    "rayflow.connectors.rabbitmq",
    "rayflow.connectors.redis",
    "rayflow.spark",
    "rayflow.state",
    "rayflow.testing",
    "rayflow.topology_file",
}
"""Every module a user may import. Anything else under ``rayflow`` has a leading underscore."""

SIGNALS = {"FailedException"}
"""Exceptions that are not faults: a user raises them to say something (fail this tuple)."""


def _import(name: str) -> ModuleType | None:
    """The module, or ``None`` when an optional extra it needs is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if exc.name and not exc.name.startswith("rayflow"):
            return None
        raise


def _all_modules() -> list[ModuleType]:
    found = [rayflow]
    for info in pkgutil.walk_packages(rayflow.__path__, "rayflow.", onerror=lambda name: None):
        if info.name.startswith("rayflow.__main__"):
            continue  # running it starts the CLI
        module = _import(info.name)
        if module is not None:
            found.append(module)
    return found


def _public_members(module: ModuleType) -> set[str]:
    """Names a user would take for public: no leading underscore, not a module, and defined in
    rayflow (``Any`` and ``TYPE_CHECKING`` imported for annotations are not rayflow's)."""
    names = set()
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, ModuleType):
            continue
        if str(getattr(value, "__module__", "")).startswith("rayflow") and not _is_top_level_export(name, value):
            names.add(name)
    return names


def _is_top_level_export(name: str, value: object) -> bool:
    """A subpackage that imports ``rayflow.Spout`` for its own use leaks nothing: that very
    object is public already."""
    return name in rayflow.__all__ and getattr(rayflow, name) is value


class TestExportedMembers:
    def test_all_is_the_contract(self) -> None:
        """``rayflow.__all__`` is exactly the contract's names, sorted."""
        assert set(rayflow.__all__) == CONTRACT
        assert rayflow.__all__ == sorted(rayflow.__all__)

    @pytest.mark.parametrize(
        "name",
        sorted(PUBLIC_MODULES - {"rayflow.connectors.nats", "rayflow.connectors.rabbitmq", "rayflow.connectors.redis"}),
    )
    def test_every_public_name_is_exported_and_every_export_exists(self, name: str) -> None:
        module = _import(name)
        if module is None:
            pytest.skip(f"{name} needs an extra that is not installed")
        exported = set(getattr(module, "__all__", []))
        leaked = _public_members(module) - exported
        assert not leaked, f"{name} holds public names missing from its __all__: {sorted(leaked)}"
        for member in exported:
            value = getattr(module, member)  # lazy names load here
            assert str(getattr(value, "__module__", "")).startswith("rayflow"), member

    def test_implementation_modules_are_private(self) -> None:
        """A module is either one a user imports (listed above) or has a leading underscore in
        its path, so that a reader knows what is promised."""
        for module in _all_modules():
            parts = module.__name__.split(".")
            if module.__name__ not in PUBLIC_MODULES:
                assert any(p.startswith("_") for p in parts[1:]), f"{module.__name__} is neither public nor private"

    def test_errors_form_one_family(self) -> None:
        """Every exception rayflow defines derives from RayflowError, except the signals a user
        raises on purpose, so ``except rayflow.RayflowError`` catches all of rayflow's faults."""
        outside = set()
        for module in _all_modules():
            for name, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                    if name.startswith("_"):
                        continue  # a module's own control flow, never raised to a user
                    if not issubclass(value, rayflow.RayflowError) and name not in SIGNALS:
                        outside.add(f"{module.__name__}.{name}")
        assert not outside
        assert not issubclass(rayflow.FailedException, rayflow.RayflowError)

    def test_testing_helpers(self) -> None:
        """``rayflow.testing`` offers the contract's test helpers; importing it needs no Ray."""
        import rayflow.testing as testing

        assert {"FeederSpout", "complete_topology", "CompletedTopology", "InProcessTopology"} <= set(testing.__all__)
