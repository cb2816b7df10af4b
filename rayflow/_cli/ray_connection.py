"""Connecting ``rayflow run`` to Ray: a local Ray of its own, or the cluster at ``--address``.

A cluster at an explicit address is asked first (in well under a second) whether it will let
this process in, so that a missing or wrong token (Ray 2.60's token authentication) or a wrong
address is said at once, with what to set, rather than after ``ray.init``'s ~20 s of retries.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from . import console
from .exit_codes import ExitCode
from .progress import progress

__all__ = ["JOIN_PROBE_SECS", "join_problem", "ray_connection"]

JOIN_PROBE_SECS = 5.0
"""How long the cluster at --address gets to answer whether it lets this process in."""
_HOST_PORT = re.compile(r"[^:/\s]+:\d+\Z")


@contextmanager
def ray_connection(address: str | None) -> Iterator[None]:
    """Connected to Ray for the block: the cluster at ``address``, or a new local one sized for
    this machine (as ``rayflow.LocalCluster`` starts it), shut down afterwards. Ray's own log
    lines stay quiet either way."""
    import ray

    from .._runtime.cluster import local_ray_options, no_usage_stats

    no_usage_stats()
    if address is None or address == "local":
        kwargs = local_ray_options()
        steps = (
            "starting a local Ray",
            f"{kwargs['num_cpus']} CPUs; waiting for its GCS, raylet and worker processes, usually 5-30 s",
            "Ray started",
        )
    else:
        problem = join_problem(address)
        if problem is not None:
            console.err.print(f"cannot join the Ray cluster at {address}: {problem}", markup=False, soft_wrap=True)
            raise typer.Exit(ExitCode.NOT_STARTED)
        kwargs = {"address": address, "log_to_driver": False, "logging_level": logging.ERROR}
        steps = (f"joining the Ray cluster at {address}", "waiting for its GCS to accept this driver", "joined")
    try:
        with progress(*steps):
            ray.init(**kwargs)
        if address == "auto":  # say which cluster "auto" found
            joined = ray.get_runtime_context().gcs_address
            console.err.print(f"joined the Ray cluster at {joined} (found by --address auto)", markup=False)
    except Exception as exc:
        where = "a local Ray" if kwargs.get("address") == "local" else f"the Ray cluster at {address}"
        console.err.print(f"cannot start {where}: {type(exc).__name__}: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(ExitCode.NOT_STARTED) from None
    try:
        yield
    finally:
        ray.shutdown()


def join_problem(address: str) -> str | None:
    """Why joining the cluster at ``address`` cannot work, asked of its GCS in well under a
    second; ``None`` when it can (or when only ``ray.init`` can tell).

    Ray 2.60 clusters use token authentication, and ``ray.init`` joins an explicit address
    without a token unless ``RAY_AUTH_MODE=token``: it then retries for ~20 s and fails with a
    ``ConnectionError`` that does not say why. So: when the cluster wants a token and this
    machine has one (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``) that
    the cluster accepts, token mode is switched on here; otherwise the answer says what to set."""
    if re.match(r"https?://", address):
        return (
            "that is a web address (Ray's dashboard or Jobs API, port 8265 by default); rayflow joins a cluster "
            "at its GCS address, HOST:PORT, which `ray start --head` prints (e.g. 127.0.0.1:6380)"
        )
    if address != "auto" and "://" not in address and ":" not in address:
        return (
            f"no port: give the cluster's GCS address as HOST:PORT (e.g. {address}:6380; `ray start --head` prints it)"
        )
    if not _HOST_PORT.match(address):
        return None  # "auto", ray:// and the like: ray.init resolves them itself
    try:
        grpc: Any = importlib.import_module("grpc")  # ships with Ray; untyped
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]
        from ray._raylet import Config as RayConfig  # type: ignore[attr-defined]
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # not the Ray this was written against: let ray.init speak
        return None

    def refused(metadata: tuple[tuple[str, str], ...]) -> Any:
        """The gRPC status code the GCS refuses us with, or ``None`` when it answers."""
        with grpc.insecure_channel(address) as channel:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)  # type: ignore[no-untyped-call]
            request = gcs_service_pb2.GetClusterIdRequest()  # type: ignore[attr-defined]
            try:
                stub.GetClusterId(request, timeout=JOIN_PROBE_SECS, metadata=metadata)
            except grpc.RpcError as exc:
                return exc.code()
        return None

    code = refused(())
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and _listens(address):
        return (
            f"something listens there but it is not a Ray GCS ({code.name}: it does not answer Ray's gRPC): is "
            f"{address} another service (Redis holds 6379, where `ray start --head` puts its GCS by default)? "
            "Give the address `ray start --head --port ...` printed"
        )
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return (
            f"nothing answers there ({code.name}): is the cluster running, and is {address} its GCS address "
            "(`ray start --head` prints it)?"
        )
    if code != grpc.StatusCode.UNAUTHENTICATED:
        return None
    mode = os.environ.get("RAY_AUTH_MODE", "token")
    if mode != "token":
        return f"the cluster requires token authentication, but RAY_AUTH_MODE={mode}: set RAY_AUTH_MODE=token"
    tokens = AuthenticationTokenLoader.instance()
    if not tokens.has_token(ignore_auth_mode=True):
        return (
            "the cluster requires token authentication and this machine has no token. Set RAY_AUTH_TOKEN to the "
            "cluster's token (`ray get-auth-token` on its head node prints it), or RAY_AUTH_TOKEN_PATH to a file "
            "holding it, or copy it to ~/.ray/auth_token."
        )
    if refused(tuple(tokens.get_token_for_http_header(ignore_auth_mode=True).items())) is not None:
        return (
            f"the cluster rejects the token from {_token_source()}: set RAY_AUTH_TOKEN to the cluster's token "
            "(`ray get-auth-token` on its head node prints it)."
        )
    os.environ["RAY_AUTH_MODE"] = "token"
    RayConfig.initialize("")  # Ray caches its settings: let it see token mode, as ray.init does for itself
    return None


def _listens(address: str) -> bool:
    """Does anything accept a TCP connection at ``address`` (HOST:PORT)?"""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _token_source() -> str:
    """Where this machine's token came from, in the order Ray looks."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"RAY_AUTH_TOKEN_PATH ({os.environ['RAY_AUTH_TOKEN_PATH']})"
    return "~/.ray/auth_token"
