"""GetGpuEvents requests: what the agent refuses, and events both ways on the wire."""

from __future__ import annotations

from typing import Any, cast

import pytest

from node_resolver.generated import agent_pb2
from node_resolver.gpu_event_codec import (
    MAX_WAIT_SECONDS,
    event_from_proto,
    event_query_from_proto,
    event_query_to_proto,
    event_to_proto,
)
from node_resolver.gpu_events.records import (
    AllocatedPod,
    EventProcess,
    EventQuery,
    GpuEvent,
    GpuEventKind,
)
from node_resolver.history_codec import BadHistoryRequestError, after_token


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (agent_pb2.GetGpuEventsRequest(since=10, until=5), "until must be after since"),
        (agent_pb2.GetGpuEventsRequest(since=float("nan")), "finite"),
        (agent_pb2.GetGpuEventsRequest(kinds=[cast(Any, 99)]), "kind 99"),
        (agent_pb2.GetGpuEventsRequest(page_token="not-a-token"), "page_token"),
        (
            agent_pb2.GetGpuEventsRequest(after_sequence=3, page_token="eA=="),
            "takes no page_token",
        ),
        (agent_pb2.GetGpuEventsRequest(after_sequence=3, wait_seconds=-1), "wait_seconds"),
        (agent_pb2.GetGpuEventsRequest(namespaces=["ns"] * 257), "at most 256 namespaces"),
        (
            agent_pb2.GetGpuEventsRequest(kinds=[agent_pb2.GPU_EVENT_KIND_XID] * 257),
            "at most 256 kinds",
        ),
        # Past SQLite's INTEGER: failed binding, an UNKNOWN with a traceback.
        (agent_pb2.GetGpuEventsRequest(after_sequence=2**63), "after_sequence is past any"),
        (agent_pb2.GetGpuEventsRequest(page_token=after_token((1.0, 2**63))), "page_token"),
        # Matched every event not on a MIG device.
        (agent_pb2.GetGpuEventsRequest(gpu_uuids=[""]), "gpu_uuids holds an empty value"),
    ],
)
def test_requests_that_make_no_sense_are_refused_with_the_reason(
    request_: agent_pb2.GetGpuEventsRequest, says: str
) -> None:
    with pytest.raises(BadHistoryRequestError, match=says):
        event_query_from_proto(request_)


def test_a_follower_waits_at_most_the_agents_cap_and_a_range_never_waits() -> None:
    query, wait = event_query_from_proto(
        agent_pb2.GetGpuEventsRequest(after_sequence=0, wait_seconds=3600)
    )
    assert (query.after_sequence, wait) == (0, MAX_WAIT_SECONDS)
    query, wait = event_query_from_proto(agent_pb2.GetGpuEventsRequest(wait_seconds=3600))
    assert (query.after_sequence, wait) == (None, 0.0)


def test_an_event_and_a_query_survive_the_wire() -> None:
    event = GpuEvent(
        time=12.5,
        kind=GpuEventKind.XID,
        gpu_uuid="GPU-0",
        mig_device_uuid="MIG-1",
        xid=13,
        pci_bus_id="00000000:3B:00.0",
        culprit_pid=4242,
        culprit_name="python3",
        source="nvml+kernel",
        message="Out Of Range Address",
        count=3,
        processes=(
            EventProcess(4242, "python3", "c1", "main", "u1", "ml", "trainer", "ALLOCATED"),
        ),
        allocated=(AllocatedPod("ml", "trainer"),),
        id=7,
    )
    event.index_pods()
    back = event_from_proto(event_to_proto(event))
    assert back == event
    query = EventQuery(since=1.0, until=2.0, namespaces=["ml"], kinds=[GpuEventKind.GPU_LOST])
    assert event_query_from_proto(event_query_to_proto(query))[0] == EventQuery(
        since=1.0, until=2.0, namespaces=("ml",), kinds=(GpuEventKind.GPU_LOST,)
    )
