"""How to test a topology with a batched model: ``inference.py`` without a cluster.

``complete_topology`` runs it in this process; the model bolt's partial batches go on the
simulated clock, so the last events do not wait for a real 20 ms. (``tests/test_batch_bolt.py``
runs it on Ray, its model tasks asking for GPUs.)

Run:  python -m pytest examples/test_inference.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from examples.inference import CONF, DEVICES, Alerts, Classify, Network, build, main
from rayflow.testing import complete_topology
from rayflow.topology_file import load_topology

ROOT = Path(__file__).resolve().parent.parent


def test_every_event_is_scored_once_and_acked() -> None:
    result = complete_topology(build(events=1_000), CONF)
    assert result.finished
    assert sorted(result.acked("events")) == list(range(1_000))
    assert sorted(event for event, _, _ in result.emitted("model")) == list(range(1_000))
    (alerts,) = result.components("alerts")
    assert isinstance(alerts, Alerts) and sum(alerts.labels.values()) == 1_000
    batch = result.metrics()["model"]["batch_size"]
    assert batch["p50"] == Classify.batch_size  # full batches but the last


def test_a_batch_scores_each_event_as_the_network_alone_would() -> None:
    """Batching changes how the network is called, not its answers: every score equals the
    network's on that event's features alone."""
    result = complete_topology(build(events=200), CONF)
    spout = np.random.default_rng(7).standard_normal((DEVICES, 16), dtype=np.float32)
    network = Network()
    for event, label, score in result.emitted("model"):
        r = spout[event % DEVICES]
        features = np.concatenate((r, r * r, np.log1p(np.abs(r)), np.sin(r)))
        labels, scores = network(features[None, :])
        assert label == labels[0] and score == pytest.approx(scores[0], rel=1e-5)


def test_the_topology_file_is_the_same_topology() -> None:
    loaded = load_topology(ROOT / "configs" / "inference.yaml")
    components = loaded.topology.components
    model = components["model"].component
    assert isinstance(model, Classify) and (model.batch_size, model.batch_timeout_ms) == (64, 20)
    components["events"].component.total = 300  # type: ignore[union-attr]
    result = complete_topology(loaded.topology, loaded.config)
    assert sorted(result.acked("events")) == list(range(300))


def test_main_prints_that_every_event_was_acked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--in-process", "--events", "300"]) == 0
    assert "every event acked: yes" in capsys.readouterr().out
