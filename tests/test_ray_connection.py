"""``rayflow run --address``: an address that cannot work is said at once, with what to give."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rayflow._cli.ray_connection import join_problem


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections and never speaks (a service that is not Ray)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


class TestAddresses:
    def test_a_dashboard_url_is_named_for_what_it_is(self) -> None:
        problem = join_problem("http://127.0.0.1:8265")
        assert problem is not None and "web address" in problem and "HOST:PORT" in problem
        assert "RAY_ADDRESS" not in problem

    def test_a_host_without_a_port_asks_for_the_port(self) -> None:
        assert join_problem("127.0.0.1") == (
            "no port: give the cluster's GCS address as HOST:PORT (e.g. 127.0.0.1:6380; `ray start --head` prints it)"
        )

    def test_a_service_that_is_not_ray_is_told_apart_from_nothing(self, silent_listener: str) -> None:
        problem = join_problem(silent_listener)
        assert problem is not None and problem.startswith("something listens there but it is not a Ray GCS")

    def test_nothing_listening_says_so(self) -> None:
        with socket.socket() as probe:  # a port that was free a moment ago
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        problem = join_problem(f"127.0.0.1:{port}")
        assert problem is not None and problem.startswith("nothing answers there")

    def test_auto_and_ray_client_addresses_are_left_to_ray(self) -> None:
        assert join_problem("auto") is None
        assert join_problem("ray://127.0.0.1:10001") is None
