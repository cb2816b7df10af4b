"""The public surface: exactly what ``rayflow`` exports, and the contract's names among it."""

from __future__ import annotations

import rayflow

CONTRACT = {
    # components and collectors
    "Spout",
    "Bolt",
    "BasicBolt",
    "OutputFieldsDeclarer",
    "SpoutOutputCollector",
    "OutputCollector",
    "BasicOutputCollector",
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
    # errors
    "RayflowError",
    "TopologyError",
    "ConfigError",
    "EmitError",
    "FailedException",
    "SpecError",
}


class TestExportedMembers:
    def test_all_is_the_contract(self):
        """``rayflow.__all__`` is exactly the public API, sorted."""
        assert set(rayflow.__all__) == CONTRACT
        assert rayflow.__all__ == sorted(rayflow.__all__)

    def test_every_name_is_importable(self):
        """Every exported name exists on the package and is defined inside rayflow."""
        for name in rayflow.__all__:
            member = getattr(rayflow, name)
            assert member.__module__.startswith("rayflow."), name

    def test_errors_form_one_tree(self):
        """rayflow's faults derive from RayflowError; FailedException is a signal, not one of them."""
        for error in (rayflow.TopologyError, rayflow.ConfigError, rayflow.EmitError):
            assert issubclass(error, rayflow.RayflowError)
        assert not issubclass(rayflow.FailedException, rayflow.RayflowError)

    def test_testing_helpers(self):
        """``rayflow.testing`` offers the contract's test helpers; importing it needs no Ray."""
        import rayflow.testing as testing

        assert {"FeederSpout", "complete_topology", "CompletedTopology", "InProcessTopology"} <= set(testing.__all__)
        for name in testing.__all__:
            assert getattr(testing, name).__module__.startswith("rayflow.testing."), name
