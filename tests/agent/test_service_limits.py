"""The agent's server-wide bounds, through a real agent process: every method, no exemptions."""

from __future__ import annotations

import concurrent.futures
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.generated import agent_pb2, agent_pb2_grpc
from node_resolver.log_limits import AGENT_LOGGERS, TracebackRateLimit, limit_tracebacks
from node_resolver.models import NodeSample
from node_resolver.service import (
    HANDSHAKE_TIMEOUT_SECONDS,
    MAX_CONNECTIONS,
    MAX_REQUEST_BYTES,
    MAX_STREAMS_PER_CONNECTION,
)
from tests.support.agents import (
    AgentProcess,
    AgentThread,
    gpu_json,
    nvml_json,
    start_agent_process,
    start_agent_thread,
)
from tests.support.polling import eventually

TOKEN = "limits-token"
AUTHORIZED = (("authorization", f"Bearer {TOKEN}"),)
# Lets the test's own channel send what an attacker would.
UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
MiB = 1024 * 1024


def vm_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` figure in KiB (VmHWM is the peak RSS so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with start_agent_process(nvml, log_path=tmp_path / "agent.log", token_file=token) as running:
        yield running


class _WithToken(grpc.UnaryUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token to every call (reflection needs it, like every method but health)."""

    def _authorized(self, details: Any) -> Any:
        return details._replace(metadata=[*(details.metadata or ()), *AUTHORIZED])

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._authorized(details), request)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._authorized(details), requests)


def served_methods(address: str) -> dict[str, descriptor_pb2.MethodDescriptorProto]:
    """Every method the agent serves: its services as reflection lists them and as the
    agent's proto declares them, so a method added to either is checked here."""
    names = {s.full_name for s in agent_pb2.DESCRIPTOR.services_by_name.values()}
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(grpc.intercept_channel(channel, _WithToken()))
        names.update(database.get_services())
        methods = {}
        for name in sorted(names):
            described = database.FindFileContainingSymbol(name)
            for service in described.service:
                if f"{described.package}.{service.name}" == name:
                    for method in service.method:
                        methods[f"/{name}/{method.name}"] = method
    return methods


def call(
    channel: grpc.Channel,
    path: str,
    method: descriptor_pb2.MethodDescriptorProto,
    payload: bytes,
    metadata: tuple[tuple[str, str], ...] = (),
) -> grpc.StatusCode:
    """Send ``payload`` as the one request message of ``path``; the status it ends with."""
    try:
        if method.client_streaming:
            stream = channel.stream_stream(
                path, request_serializer=None, response_deserializer=None
            )
            list(stream(iter((payload,)), metadata=metadata, timeout=20))
        elif method.server_streaming:
            replies = channel.unary_stream(
                path, request_serializer=None, response_deserializer=None
            )
            list(replies(payload, metadata=metadata, timeout=20))
        else:
            unary = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
            unary(payload, metadata=metadata, timeout=20)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_every_method_refuses_an_oversized_request_with_or_without_the_token(
    agent: AgentProcess,
) -> None:
    methods = served_methods(agent.address)
    assert "/gpugraph.agent.v1.NodeAgent/GetSnapshot" in methods
    assert "/grpc.health.v1.Health/Watch" in methods
    # Field 1, length-delimited, just over the limit: a well-formed message no method takes.
    size = MAX_REQUEST_BYTES + 1024
    payload = b"\x0a" + _varint(size) + b"x" * size
    refusals = {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAUTHENTICATED}
    with grpc.insecure_channel(agent.address, options=UNLIMITED) as channel:
        for path, method in methods.items():
            # With the token the size limit is all that refuses it, for every method.
            status = call(channel, path, method, payload, AUTHORIZED)
            assert status == grpc.StatusCode.RESOURCE_EXHAUSTED, (path, status)
            # Without, the token check may come first (streamed requests are refused unread).
            status = call(channel, path, method, payload)
            assert status in refusals, (path, status)
    assert "Traceback" not in agent.logs()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


@pytest.mark.parametrize("connections", [1, 100], ids=["one connection", "100 connections"])
def test_a_hundred_unauthenticated_4_mib_messages_barely_move_the_agents_peak_rss(
    agent: AgentProcess, connections: int
) -> None:
    pid = agent.process.pid
    before = vm_kib(pid, "VmHWM")
    payload = b"\x0a" + _varint(4 * MiB - 16) + b"x" * (4 * MiB - 16)
    method = "/gpugraph.agent.v1.NodeAgent/GetSnapshot"
    channels = [
        grpc.insecure_channel(
            agent.address, options=[*UNLIMITED, ("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(connections)
    ]
    try:

        def send(i: int) -> grpc.StatusCode:
            unary = channels[i % connections].unary_unary(
                method, request_serializer=None, response_deserializer=None
            )
            try:
                unary(payload, timeout=30)
            except grpc.RpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

        with concurrent.futures.ThreadPoolExecutor(100) as pool:
            statuses = set(pool.map(send, range(100)))
    finally:
        for channel in channels:
            channel.close()
    # Refused for its size or, past the connection cap, never connected at all.
    assert statuses <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE}
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in statuses
    growth_mb = (vm_kib(pid, "VmHWM") - before) / 1024
    # Before the server-wide bounds: +115 MB on one connection, +360 MB on 100.
    assert growth_mb <= 50, f"the agent's peak RSS grew by {growth_mb:.0f} MB"


def test_a_small_authenticated_request_still_passes(agent: AgentProcess) -> None:
    method = "/gpugraph.agent.v1.NodeAgent/GetSnapshot"
    with grpc.insecure_channel(agent.address) as channel:
        unary = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        assert unary(b"", metadata=AUTHORIZED, timeout=10)


# -- the health service's Watch, which the request guard once broke ---------------


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[AgentThread]:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    with start_agent_thread(FakeGpuSource(nvml), token=TOKEN, interval=3600) as running:
        assert running.sampler.wait_ready(15)
        yield running


def test_health_watch_streams_the_status(secured: AgentThread) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        replies = stub.Watch(health_pb2.HealthCheckRequest(), metadata=AUTHORIZED, timeout=10)
        first = next(replies)
        replies.cancel()
    assert first.status == health_pb2.HealthCheckResponse.SERVING


def test_a_health_watch_flood_logs_no_traceback(
    secured: AgentThread, caplog: pytest.LogCaptureFixture
) -> None:
    # As many watches as a connection may carry at once, on three connections.
    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.insecure_channel(secured.address, options=own) for _ in range(3)]
    with caplog.at_level(logging.DEBUG):
        watches = [
            health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(), metadata=AUTHORIZED, timeout=10
            )
            for channel in channels
            for _ in range(MAX_STREAMS_PER_CONNECTION)
        ]
        statuses = {next(watch).status for watch in watches}
        for watch in watches:
            watch.cancel()
        for channel in channels:
            channel.close()
    assert statuses == {health_pb2.HealthCheckResponse.SERVING}
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a health watch"


# -- connections that never finish their handshake -------------------------------


def closed_by_peer(sock: socket.socket) -> bool:
    """Read ``sock`` until the agent closes it; False if it is still open at its timeout."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def test_silent_connections_are_dropped_and_stop_locking_callers_out(
    secured: AgentThread,
) -> None:
    host, port = secured.address.rsplit(":", 1)
    # Enough sockets that send nothing to take every connection the agent allows.
    silent = [socket.create_connection((host, int(port))) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in silent:
            # Well past the handshake timeout, well short of gRPC's default 120 s.
            sock.settimeout(HANDSHAKE_TIMEOUT_SECONDS * 4)
        assert all(closed_by_peer(sock) for sock in silent), "a silent socket stayed open"
    finally:
        for sock in silent:
            sock.close()
    own = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(secured.address, options=own) as channel:
        stub = agent_pb2_grpc.NodeAgentStub(channel)
        snapshot = stub.GetSnapshot(agent_pb2.GetSnapshotRequest(), metadata=AUTHORIZED, timeout=10)
    assert snapshot.gpus


class FailingSource:
    """A GPU source whose every scan fails, counting them."""

    def __init__(self) -> None:
        self.scans = 0

    def sample(self) -> NodeSample:
        self.scans += 1
        raise RuntimeError("the driver went away")

    def close(self) -> None:
        pass


@pytest.fixture
def no_traceback_limit() -> Iterator[None]:
    """Takes the process-wide limit off the agent's loggers for one test, then puts it back.

    The limit is shared by every agent in the process, so its window may have been
    opened by an earlier test and close in the middle of this one.
    """
    removed = [
        (logger, existing)
        for logger in map(logging.getLogger, AGENT_LOGGERS)
        for existing in logger.filters
        if isinstance(existing, TracebackRateLimit)
    ]
    for logger, existing in removed:
        logger.removeFilter(existing)
    yield
    for logger in map(logging.getLogger, AGENT_LOGGERS):
        for existing in [f for f in logger.filters if isinstance(f, TracebackRateLimit)]:
            logger.removeFilter(existing)
    for logger, existing in removed:
        logger.addFilter(existing)


@pytest.mark.usefixtures("no_traceback_limit")
def test_an_agent_puts_one_traceback_limit_on_each_of_its_loggers() -> None:
    with start_agent_thread(FailingSource(), interval=60.0, wait_serving=False):
        limits = [
            [f for f in logging.getLogger(name).filters if isinstance(f, TracebackRateLimit)]
            for name in AGENT_LOGGERS
        ]
    assert all(len(found) == 1 for found in limits), limits
    assert len({id(found[0]) for found in limits}) == 1, "one limit shared by every logger"


@pytest.mark.usefixtures("no_traceback_limit")
def test_a_flood_of_agent_tracebacks_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    # One window for the whole test: the clock stands still.
    limit = limit_tracebacks(AGENT_LOGGERS, TracebackRateLimit(clock=lambda: 0.0))
    source = FailingSource()
    with (
        caplog.at_level(logging.ERROR, logger="node_resolver.sampler"),
        start_agent_thread(source, interval=0.01, wait_serving=False),
    ):
        eventually(lambda: source.scans >= 30)
    failures = [r for r in caplog.records if r.getMessage().startswith("GPU scan failed")]
    assert len(failures) >= 30, "every failure is still logged"
    assert len([r for r in failures if r.exc_info]) == limit.burst
    assert all("traceback left out" in r.getMessage() for r in failures[limit.burst :])
    assert limit.suppressed == len(failures) - limit.burst
