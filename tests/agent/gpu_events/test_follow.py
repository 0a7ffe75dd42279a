"""Following the event log over real gRPC: a waiting follower is woken by the event, the
waits an agent holds are bounded, and so are the bytes of a page."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource
from node_resolver.generated import agent_pb2, agent_pb2_grpc
from node_resolver.gpu_events.node_events import NodeGpuEvents
from node_resolver.gpu_events.nvml_events import RawEvent
from node_resolver.gpu_events.records import EventProcess, EventQuery, GpuEvent, GpuEventKind
from node_resolver.history.log import HistoryLog, HistorySettings
from node_resolver.pod_names import PodNames
from node_resolver.service import MAX_EVENT_PAGE_BYTES, MAX_EVENT_WAITERS
from tests.support.agents import AgentThread, gpu_json, nvml_json, start_agent_thread
from tests.support.polling import eventually


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentThread]:
    fake = tmp_path / "nvml.json"
    fake.write_text(json.dumps(nvml_json([gpu_json(0)])))
    names = PodNames()
    history = HistoryLog(
        HistorySettings(directory=tmp_path / "history", retention_seconds=3600.0),
        boot_id="b",
        pod_names=names,
    )
    events = NodeGpuEvents(node_name="node-a", pod_names=names, nvml=None, sink=history.add_events)
    with start_agent_thread(FakeGpuSource(fake), history=history, events=events) as running:
        yield running


def lost(uuid: str) -> RawEvent:
    return RawEvent(GpuEventKind.GPU_LOST, uuid, time.time(), time.monotonic(), "scan")


async def test_a_waiting_follower_is_answered_by_the_event_not_its_deadline(
    agent: AgentThread,
) -> None:
    events = agent.server.servicer._events
    assert events is not None
    async with AgentClient(agent.address) as client:
        first = await client.get_gpu_events(EventQuery(), timeout=10)
        assert (first.status, first.event_status, first.last_sequence) == ("ok", "off", 0)
        # Waits up to 30 s on the agent; the call's own deadline is 20 s, so only the
        # event, not the agent's wait running out, can answer it in time.
        call = asyncio.create_task(
            client.get_gpu_events(EventQuery(after_sequence=0), wait_seconds=30, timeout=20)
        )
        await asyncio.to_thread(
            eventually, lambda: agent.server.servicer._event_waiters == 1, what="a waiter"
        )
        events.recorder.submit(lost("GPU-x"))
        page = await call
    assert [(e.kind, e.gpu_uuid, e.id) for e in page.events] == [
        (GpuEventKind.GPU_LOST, "GPU-x", 1)
    ]
    assert (page.last_sequence, page.log_id) == (1, first.log_id)


async def test_waiters_past_the_bound_are_answered_at_once(agent: AgentThread) -> None:
    async with AgentClient(agent.address) as client:
        held = [
            asyncio.create_task(
                client.get_gpu_events(EventQuery(after_sequence=0), wait_seconds=30, timeout=60)
            )
            for _ in range(MAX_EVENT_WAITERS)
        ]
        await asyncio.to_thread(
            eventually,
            lambda: agent.server.servicer._event_waiters == MAX_EVENT_WAITERS,
            what="every waiter slot taken",
        )
        # One more: answered empty at once, its 5 s deadline far from the agent's 30 s wait.
        extra = await client.get_gpu_events(
            EventQuery(after_sequence=0), wait_seconds=30, timeout=5
        )
        assert extra.events == []
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)


def fat_event(index: int) -> GpuEvent:
    """An XID on a GPU that 48 processes shared, in the last 10 minutes: about 10 kB on the wire."""
    processes = tuple(
        EventProcess(
            pid=10_000 + j,
            process_name="python3",
            container_id=f"{j:064x}",
            container_name="trainer-worker",
            pod_uid=f"{j:08d}-aaaa-bbbb-cccc-000011112222",
            pod_namespace="ml-research-team",
            pod_name=f"llm-finetune-job-{j}-worker-abcde",
            allocation_verdict="allocated",
        )
        for j in range(48)
    )
    event = GpuEvent(
        time=time.time() - 600 + index,
        kind=GpuEventKind.XID,
        gpu_uuid="GPU-00000000-0000-0000-0000-000000000000",
        xid=13,
        message="Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
        processes=processes,
    )
    event.index_pods()
    return event


def test_a_page_of_fat_events_is_cut_at_its_byte_budget(agent: AgentThread) -> None:
    history = agent.server.history
    assert history is not None
    # Together more than the 4 MiB a gRPC client receives by default, as the server's does.
    count = 450
    history.add_events([fat_event(i) for i in range(count)])
    assert history.flush()
    with grpc.insecure_channel(agent.address) as channel:
        stub = agent_pb2_grpc.NodeAgentStub(channel)
        paged: list[agent_pb2.GpuEventPage] = []
        token = ""
        while not paged or token:
            request = agent_pb2.GetGpuEventsRequest(limit=1000, page_token=token)
            paged.append(stub.GetGpuEvents(request, timeout=10))
            token = paged[-1].next_page_token
        followed: list[agent_pb2.GpuEventPage] = []
        after = 0
        while not followed or followed[-1].events:
            request = agent_pb2.GetGpuEventsRequest(limit=1000, after_sequence=after)
            followed.append(stub.GetGpuEvents(request, timeout=10))
            after = max([after, *(e.sequence for e in followed[-1].events)])
    for pages in (paged, followed):
        assert [e.sequence for p in pages for e in p.events] == list(range(1, count + 1))
        assert len(pages) > 2
        assert all(sum(e.ByteSize() for e in p.events) <= MAX_EVENT_PAGE_BYTES for p in pages)
