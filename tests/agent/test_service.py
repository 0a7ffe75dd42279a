"""The agent over real gRPC on loopback: snapshot, auth, health, reflection, CLI."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from api.demo.cluster.fake_proc import kubelet_cgroup
from node_resolver.cli import add_agent_arguments
from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.generated import agent_pb2, agent_pb2_grpc
from node_resolver.models import ContainerRef, NodeSample
from tests.support.agents import (
    CONTAINER_ID,
    POD_UID,
    AgentThread,
    CountingSource,
    FakeProc,
    StaticResolver,
    agent_command,
    agent_env,
    gpu_json,
    nvml_json,
    resolved,
    sample_of,
    start_agent_process,
    start_agent_thread,
    write_proc_tree,
)
from tests.support.polling import eventually
from tests.support.project import project_version

TOKEN = "s3cret-token"
SERVICE = "gpugraph.agent.v1.NodeAgent"


@pytest.fixture
def nvml_file(tmp_path: Path) -> Path:
    path = tmp_path / "nvml.json"
    processes = [{"pid": 4242, "usedMemoryBytes": 1 << 30, "smUtilization": 50}, {"pid": 7}]
    write_fake_nvml(path, nvml_json([gpu_json(0, processes), gpu_json(1, error="GPU_IS_LOST")]))
    return path


@pytest.fixture
def source(nvml_file: Path) -> CountingSource:
    return CountingSource(FakeGpuSource(nvml_file))


RESOLVER = {4242: resolved(4242, "trainer", container_id=CONTAINER_ID, pod_uid=POD_UID)}


@pytest.fixture
def agent(source: CountingSource) -> Iterator[AgentThread]:
    with start_agent_thread(
        source, node_name="gpu-node-1", resolver=StaticResolver(RESOLVER), interval=3600
    ) as running:
        assert running.sampler.wait_ready(15)
        yield running


@pytest.fixture
def secured(source: CountingSource) -> Iterator[AgentThread]:
    with start_agent_thread(
        source, resolver=StaticResolver(RESOLVER), token=TOKEN, interval=3600
    ) as running:
        assert running.sampler.wait_ready(15)
        yield running


async def test_get_snapshot_over_grpc(agent: AgentThread) -> None:
    async with AgentClient(agent.address) as client:
        first = await client.get_snapshot(timeout=10)
        await asyncio.sleep(0.2)
        second = await client.get_snapshot(timeout=10)
    assert first.node_name == "gpu-node-1"
    assert first.sample.driver_version == "550.90.07" and first.sample.cuda_driver_version == 12040
    gpu0, gpu1 = first.sample.gpus
    assert gpu0.uuid.startswith("GPU-") and gpu0.utilization_gpu == 87
    # PID 7 is unknown to the resolver (exited): it is not reported.
    (process,) = gpu0.processes
    assert (process.pid, process.name, process.used_memory_bytes, process.sm_utilization) == (
        4242,
        "trainer",
        1 << 30,
        50,
    )
    assert process.container == ContainerRef(CONTAINER_ID, "containerd", POD_UID)
    assert gpu1.error == "GPU_IS_LOST" and gpu1.memory_total_bytes is None
    # Same snapshot, older by the time between the calls.
    assert second.sampled_at == first.sampled_at
    assert 0 <= first.age_seconds < second.age_seconds


async def test_fifty_concurrent_calls_within_one_interval_cost_one_scan(
    agent: AgentThread, source: CountingSource
) -> None:
    async with AgentClient(agent.address) as client:
        replies = await asyncio.gather(*(client.get_snapshot(timeout=20) for _ in range(50)))
    assert len(replies) == 50 and all(r.sample.gpus for r in replies)
    assert len({r.sampled_at for r in replies}) == 1
    assert source.samples == 1 and agent.sampler.scans == 1
    assert agent.server.calls_served == 50


async def test_without_a_token_calls_are_refused(secured: AgentThread) -> None:
    async with AgentClient(secured.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client.get_snapshot(timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert secured.server.calls_served == 0


async def test_a_wrong_token_is_refused(secured: AgentThread) -> None:
    for wrong in ("s3cret-toke", "s3cret-token-and-more", "S3CRET-TOKEN"):
        async with AgentClient(secured.address, token=wrong) as client:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await client.get_snapshot(timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_the_right_token_is_answered(secured: AgentThread) -> None:
    async with AgentClient(secured.address, token=TOKEN) as client:
        snapshot = await client.get_snapshot(timeout=10)
    assert snapshot.sample.gpus[0].processes[0].pid == 4242
    assert secured.server.calls_served == 1


def test_an_unauthenticated_garbage_payload_is_refused_before_it_is_parsed(
    secured: AgentThread, caplog: pytest.LogCaptureFixture
) -> None:
    method = f"/{agent_pb2.DESCRIPTOR.services_by_name['NodeAgent'].full_name}/GetSnapshot"
    garbage = b"\xff\x00\x12" * 300  # not a GetSnapshotRequest
    with caplog.at_level(logging.DEBUG), grpc.insecure_channel(secured.address) as channel:
        raw = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        for _ in range(20):
            with pytest.raises(grpc.RpcError) as caught:
                raw(garbage, timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a refused call"
    # With the token, the same bytes are decoded (so the refusal above came before
    # they were touched), and refused as malformed, still without a traceback.
    with caplog.at_level(logging.DEBUG), grpc.insecure_channel(secured.address) as channel:
        raw = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as authed:
            raw(garbage, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
    assert authed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed request" in (authed.value.details() or "")
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a malformed call"
    assert secured.server.calls_served == 0


def test_a_garbage_message_on_a_snapshot_stream_ends_it_without_a_traceback(
    secured: AgentThread, caplog: pytest.LogCaptureFixture
) -> None:
    method = f"/{SERVICE}/StreamSnapshots"
    good = agent_pb2.GetSnapshotRequest().SerializeToString()
    garbage = b"\xff\x00\x12" * 300  # not a GetSnapshotRequest
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    with caplog.at_level(logging.DEBUG), grpc.insecure_channel(secured.address) as channel:
        raw = channel.stream_stream(method, request_serializer=None, response_deserializer=None)
        answered: list[agent_pb2.Snapshot] = []
        with pytest.raises(grpc.RpcError) as caught:
            for reply in raw(iter([good, garbage, good]), metadata=metadata, timeout=10):
                answered.append(agent_pb2.Snapshot.FromString(reply))
        # Without the token the stream is refused before a message is decoded.
        with pytest.raises(grpc.RpcError) as refused:
            list(raw(iter([garbage]), timeout=10))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed request" in (caught.value.details() or "")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a malformed message"
    # The good message before the garbage was answered; none after it.
    assert len(answered) == 1 and answered[0].gpus
    assert secured.server.calls_served == 1


def test_the_bearer_scheme_is_matched_in_any_case(secured: AgentThread) -> None:
    request = agent_pb2.GetSnapshotRequest()
    with grpc.insecure_channel(secured.address) as channel:
        stub = agent_pb2_grpc.NodeAgentStub(channel)
        for scheme in ("bearer", "BEARER", "Bearer"):
            metadata = (("authorization", f"{scheme} {TOKEN}"),)
            assert stub.GetSnapshot(request, metadata=metadata, timeout=10).gpus
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetSnapshot(request, metadata=(("authorization", f"Basic {TOKEN}"),), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_snapshot_that_cannot_be_encoded_is_internal_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unencodable:
        def sample(self) -> NodeSample:
            return NodeSample(cuda_driver_version=2**40)

        def close(self) -> None:
            pass

    with (
        caplog.at_level(logging.ERROR, logger="node_resolver.service"),
        start_agent_thread(Unencodable(), interval=3600) as agent,
        grpc.insecure_channel(agent.address) as channel,
    ):
        stub = agent_pb2_grpc.NodeAgentStub(channel)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetSnapshot(agent_pb2.GetSnapshotRequest(), timeout=10)
            assert caught.value.code() == grpc.StatusCode.INTERNAL
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "cannot encode" in errors[0].getMessage()


def health_check(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def test_health_stays_open_with_a_token(secured: AgentThread) -> None:
    assert health_check(secured.address) == health_pb2.HealthCheckResponse.SERVING


def test_a_health_watch_needs_the_token(secured: AgentThread) -> None:
    # A Watch holds its connection for as long as its caller likes; tokenless
    # ones could take every connection the agent allows, kubelet's probes included.
    with grpc.insecure_channel(secured.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            next(stub.Watch(health_pb2.HealthCheckRequest(), timeout=10))
        watch = stub.Watch(
            health_pb2.HealthCheckRequest(),
            metadata=(("authorization", f"Bearer {TOKEN}"),),
            timeout=10,
        )
        watched = next(watch).status
        watch.cancel()
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert watched == health_pb2.HealthCheckResponse.SERVING
    assert health_check(secured.address) == health_pb2.HealthCheckResponse.SERVING


def test_reflection_needs_the_token_when_one_is_set(secured: AgentThread) -> None:
    with grpc.insecure_channel(secured.address) as channel, pytest.raises(grpc.RpcError) as caught:
        ProtoReflectionDescriptorDatabase(channel).get_services()
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_health_is_serving_only_once_a_sample_exists(source: CountingSource) -> None:
    source.gate = threading.Event()  # the first scan waits until the test lets it go
    with start_agent_thread(source, wait_serving=False) as agent:
        assert health_check(agent.address) == health_pb2.HealthCheckResponse.NOT_SERVING
        with grpc.insecure_channel(agent.address) as channel:
            stub = agent_pb2_grpc.NodeAgentStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetSnapshot(agent_pb2.GetSnapshotRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        source.gate.set()
        eventually(
            lambda: health_check(agent.address, SERVICE) == health_pb2.HealthCheckResponse.SERVING
        )
        assert health_check(agent.address) == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(agent: AgentThread) -> None:
    with grpc.insecure_channel(agent.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = database.get_services()
        assert SERVICE in services and "grpc.health.v1.Health" in services
        described = database.FindFileContainingSymbol(SERVICE)
    assert described.package == "gpugraph.agent.v1"
    assert [m.name for m in described.service[0].method] == [
        "GetSnapshot",
        "StreamSnapshots",
        "GetHistory",
        "GetUsage",
        "PutPodNames",
        "GetGpuEvents",
    ]


# -- the command line, as a subprocess --------------------------------------------


def test_cli_resolves_pids_from_proc_root_drops_missing_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    proc = write_proc_tree(
        tmp_path / "proc",
        {
            4242: FakeProc("trainer", kubelet_cgroup(POD_UID, CONTAINER_ID)),
            100: FakeProc("Xorg"),
        },
    )
    nvml = tmp_path / "nvml.json"
    # PID 555 is in the NVML file but not under --proc-root: it has exited.
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 4242}, {"pid": 100}, {"pid": 555}])]))
    agent = start_agent_process(
        nvml, log_path=tmp_path / "agent.log", proc_root=proc, pid_resolver="cgroup"
    )
    with agent:
        (gpu,) = sample_of(agent.address).gpus
        found = {p.pid: (p.name, p.container) for p in gpu.processes}
        assert found == {
            4242: ("trainer", ContainerRef(CONTAINER_ID, "", POD_UID)),
            100: ("Xorg", None),
        }
        # The agent re-reads the fake file while it runs.
        write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 100}], utilizationGpu=3)]))
        eventually(lambda: sample_of(agent.address).gpus[0].utilization_gpu == 3)
        assert [p.pid for p in sample_of(agent.address).gpus[0].processes] == [100]
        assert agent.stop() == 0
    logs = agent.logs()
    assert f"agent listening on {agent.address}" in logs
    assert "agent stopped after" in logs and "Traceback" not in logs


def test_cli_stops_cleanly_on_sigint(tmp_path: Path, nvml_file: Path) -> None:
    agent = start_agent_process(nvml_file, log_path=tmp_path / "agent.log")
    agent.process.send_signal(signal.SIGINT)
    assert agent.process.wait(20) == 0
    assert "agent stopped after" in agent.logs()
    # The startup line names the installed release.
    assert f"; gpugraph {project_version()})" in agent.logs()


def test_cli_token_file(tmp_path: Path, nvml_file: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with start_agent_process(
        nvml_file, log_path=tmp_path / "agent.log", token_file=token_file, host="127.0.0.2"
    ) as agent:
        assert agent.address.startswith("127.0.0.2:")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            sample_of(agent.address)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert sample_of(agent.address, token=TOKEN).gpus
        assert health_check(agent.address) == health_pb2.HealthCheckResponse.SERVING


def cmdlines(address: str) -> dict[int, str | None]:
    with grpc.insecure_channel(address) as channel:
        reply = agent_pb2_grpc.NodeAgentStub(channel).GetSnapshot(
            agent_pb2.GetSnapshotRequest(), timeout=10
        )
    return {p.pid: p.cmdline if p.HasField("cmdline") else None for p in reply.gpus[0].processes}


def test_cli_sends_command_lines_only_with_expose_cmdline(tmp_path: Path) -> None:
    proc = write_proc_tree(tmp_path / "proc", {4242: FakeProc(cmdline=("python", "--key=s"))})
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 4242}])]))
    with start_agent_process(nvml, log_path=tmp_path / "hidden.log", proc_root=proc) as hidden:
        assert cmdlines(hidden.address) == {4242: None}
    assert "--expose-cmdline" not in hidden.logs()
    with start_agent_process(
        nvml, log_path=tmp_path / "shown.log", proc_root=proc, extra_args=["--expose-cmdline"]
    ) as shown:
        assert cmdlines(shown.address) == {4242: "python --key=s"}
    # Without a token anyone can read them: said at startup.
    assert "--expose-cmdline without --token-file" in shown.logs()


@pytest.mark.parametrize(("given", "level"), [("debug", "DEBUG"), ("Warning", "WARNING")])
def test_log_level_in_either_case(given: str, level: str) -> None:
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    assert parser.parse_args(["--log-level", given]).log_level == level


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agent_command(*args), capture_output=True, text=True, timeout=60, env=agent_env(**env)
    )


def test_cli_without_a_node_name_fails(nvml_file: Path) -> None:
    result = run_cli("--nvml-fake", str(nvml_file), "--listen", "127.0.0.1:0")
    assert result.returncode == 2 and "NODE_NAME" in result.stderr


def test_cli_reads_node_name_and_fake_file_from_the_environment(
    tmp_path: Path, nvml_file: Path
) -> None:
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            agent_command("--listen", "127.0.0.1:0"),
            env=agent_env(NODE_NAME="from-env", GPUGRAPH_NVML_FAKE=str(nvml_file)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually(lambda: "agent listening on" in log_path.read_text())
        address = log_path.read_text().split("agent listening on ")[1].split()[0]
        eventually(lambda: health_check(address) == health_pb2.HealthCheckResponse.SERVING)
        sample = sample_of(address)
        assert sample.gpus[0].uuid == nvml_json([gpu_json(0)])["gpus"][0]["uuid"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    assert "node from-env" in log_path.read_text()


def test_cli_with_a_malformed_fake_file_fails_with_its_location(tmp_path: Path) -> None:
    bad = tmp_path / "nvml.json"
    bad.write_text('{"gpus": [}')
    result = run_cli("--node-name", "n", "--nvml-fake", str(bad), "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert f"{bad}:1:11: invalid JSON" in result.stderr


def test_cli_with_an_empty_token_file_fails(tmp_path: Path, nvml_file: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    result = run_cli("--node-name", "n", "--nvml-fake", str(nvml_file), "--token-file", str(empty))
    assert result.returncode == 2 and "is empty" in result.stderr


def test_cli_rejects_a_bad_listen_address(nvml_file: Path) -> None:
    result = run_cli("--node-name", "n", "--nvml-fake", str(nvml_file), "--listen", "nope")
    assert result.returncode == 2 and "HOST:PORT" in result.stderr


def test_cli_on_a_port_in_use_fails(tmp_path: Path, nvml_file: Path) -> None:
    with start_agent_process(nvml_file, log_path=tmp_path / "first.log") as first:
        result = run_cli(
            "--node-name", "n", "--nvml-fake", str(nvml_file), "--listen", first.address
        )
    assert result.returncode == 1 and f"cannot listen on {first.address}" in result.stderr
