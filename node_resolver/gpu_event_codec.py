"""Conversion between GPU health event records and the agent's protobuf messages.

Page tokens are opaque to callers, as history's are: the (time, sequence) of
a page's last event, so the next page starts after it however many events
land meanwhile.
"""

from __future__ import annotations

import math

from .generated import agent_pb2
from .gpu_events.records import (
    AllocatedPod,
    EventPage,
    EventProcess,
    EventQuery,
    GpuEvent,
    GpuEventKind,
)
from .history_codec import (
    DEFAULT_PAGE,
    INT64,
    MAX_FILTER_VALUES,
    MAX_PAGE,
    BadHistoryRequestError,
    after_token,
    filter_values,
    page_position,
)

__all__ = [
    "MAX_WAIT_SECONDS",
    "event_from_proto",
    "event_page_from_proto",
    "event_query_from_proto",
    "event_query_to_proto",
    "event_to_proto",
    "kind_from_proto",
    "kind_to_proto",
]

# The longest a follower's call waits for an event (a caller asking more gets this).
MAX_WAIT_SECONDS = 30.0

_KIND_TO_PROTO = {
    GpuEventKind.XID: agent_pb2.GPU_EVENT_KIND_XID,
    GpuEventKind.ECC_DOUBLE_BIT: agent_pb2.GPU_EVENT_KIND_ECC_DOUBLE_BIT,
    GpuEventKind.ECC_SINGLE_BIT: agent_pb2.GPU_EVENT_KIND_ECC_SINGLE_BIT,
    GpuEventKind.GPU_LOST: agent_pb2.GPU_EVENT_KIND_GPU_LOST,
}
_KIND_FROM_PROTO = {value: kind for kind, value in _KIND_TO_PROTO.items()}


def kind_to_proto(kind: GpuEventKind) -> int:
    """A kind on the wire."""
    return _KIND_TO_PROTO[kind]


def kind_from_proto(value: int) -> GpuEventKind | None:
    """A kind from the wire; None for one this agent does not know."""
    return _KIND_FROM_PROTO.get(value)  # type: ignore[call-overload]


def event_query_from_proto(request: agent_pb2.GetGpuEventsRequest) -> tuple[EventQuery, float]:
    """The query a GetGpuEvents request asks and how long it may wait; BadHistoryRequestError
    when it makes no sense."""
    until = request.until if request.HasField("until") else None
    if not math.isfinite(request.since) or (until is not None and not math.isfinite(until)):
        raise BadHistoryRequestError("since and until must be finite Unix times")
    if until is not None and until <= request.since:
        raise BadHistoryRequestError("until must be after since")
    if not math.isfinite(request.wait_seconds) or request.wait_seconds < 0:
        raise BadHistoryRequestError("wait_seconds must be a finite number of seconds, 0 or more")
    # Capped as the other filters are: each value is a term of the log's query.
    if len(request.kinds) > MAX_FILTER_VALUES:
        raise BadHistoryRequestError(f"at most {MAX_FILTER_VALUES} kinds per request")
    kinds = []
    for value in request.kinds:
        kind = kind_from_proto(value)
        if kind is None:
            raise BadHistoryRequestError(f"unknown GPU event kind {value}")
        kinds.append(kind)
    follow = request.HasField("after_sequence")
    if follow and request.page_token:
        raise BadHistoryRequestError("after_sequence follows the log; it takes no page_token")
    if follow and request.after_sequence not in INT64:
        raise BadHistoryRequestError("after_sequence is past any sequence this agent gives out")
    query = EventQuery(
        since=request.since,
        until=until,
        gpu_uuids=filter_values("gpu_uuids", list(request.gpu_uuids)),
        namespaces=filter_values("namespaces", list(request.namespaces)),
        pod_uids=filter_values("pod_uids", list(request.pod_uids)),
        kinds=tuple(kinds),
        limit=min(request.limit, MAX_PAGE) if request.limit else DEFAULT_PAGE,
        after=page_position(request.page_token),
        after_sequence=request.after_sequence if follow else None,
    )
    wait = min(request.wait_seconds, MAX_WAIT_SECONDS) if follow else 0.0
    return query, wait


def event_query_to_proto(
    query: EventQuery, *, page_token: str = "", wait_seconds: float = 0.0
) -> agent_pb2.GetGpuEventsRequest:
    """A GetGpuEvents request for ``query``."""
    return agent_pb2.GetGpuEventsRequest(
        since=query.since,
        until=query.until,
        gpu_uuids=list(query.gpu_uuids),
        namespaces=list(query.namespaces),
        pod_uids=list(query.pod_uids),
        kinds=[_KIND_TO_PROTO[k] for k in query.kinds],
        limit=query.limit,
        page_token=page_token or ("" if query.after is None else after_token(query.after)),
        after_sequence=query.after_sequence,
        wait_seconds=wait_seconds,
    )


def page_token(event: GpuEvent) -> str:
    """The token of the page that starts after ``event``."""
    return after_token((event.time, event.id))


def event_to_proto(event: GpuEvent) -> agent_pb2.GpuEvent:
    """One event on the wire."""
    return agent_pb2.GpuEvent(
        sequence=event.id,
        time=event.time,
        kind=_KIND_TO_PROTO[event.kind],
        xid=event.xid,
        gpu_uuid=event.gpu_uuid,
        mig_device_uuid=event.mig_device_uuid,
        pci_bus_id=event.pci_bus_id,
        culprit_pid=event.culprit_pid,
        culprit_name=event.culprit_name,
        processes=[
            agent_pb2.GpuEventProcess(
                pid=p.pid,
                process_name=p.process_name,
                container_id=p.container_id,
                container_name=p.container_name,
                pod_uid=p.pod_uid,
                pod_namespace=p.pod_namespace,
                pod_name=p.pod_name,
                allocation_verdict=p.allocation_verdict,
                mig_device_uuid=p.mig_device_uuid,
            )
            for p in event.processes
        ],
        allocated=[
            agent_pb2.GpuEventAllocatedPod(namespace=a.namespace, name=a.name)
            for a in event.allocated
        ],
        count=event.count,
        source=event.source,
        message=event.message,
        cursor=page_token(event),
    )


def event_from_proto(message: agent_pb2.GpuEvent) -> GpuEvent | None:
    """One event as a client reads it; None for a kind this code does not know."""
    kind = kind_from_proto(message.kind)
    if kind is None:
        return None
    event = GpuEvent(
        id=message.sequence,
        time=message.time,
        kind=kind,
        xid=message.xid if message.HasField("xid") else None,
        gpu_uuid=message.gpu_uuid,
        mig_device_uuid=message.mig_device_uuid,
        pci_bus_id=message.pci_bus_id,
        culprit_pid=message.culprit_pid if message.HasField("culprit_pid") else None,
        culprit_name=message.culprit_name,
        source=message.source,
        message=message.message,
        count=message.count,
        processes=tuple(
            EventProcess(
                pid=p.pid,
                process_name=p.process_name,
                container_id=p.container_id,
                container_name=p.container_name,
                pod_uid=p.pod_uid,
                pod_namespace=p.pod_namespace,
                pod_name=p.pod_name,
                allocation_verdict=p.allocation_verdict,
                mig_device_uuid=p.mig_device_uuid,
            )
            for p in message.processes
        ),
        allocated=tuple(AllocatedPod(a.namespace, a.name) for a in message.allocated),
    )
    event.index_pods()
    return event


def event_page_from_proto(reply: agent_pb2.GpuEventPage) -> EventPage:
    """A GetGpuEvents reply."""
    events: list[GpuEvent] = []
    cursors: list[str] = []
    for message in reply.events:
        event = event_from_proto(message)
        if event is not None:
            events.append(event)
            cursors.append(message.cursor)
    return EventPage(
        node_name=reply.node_name,
        events=events,
        cursors=cursors,
        next_page_token=reply.next_page_token,
        status=reply.status,
        last_sequence=reply.last_sequence,
        log_id=reply.log_id,
        event_status=reply.event_status,
    )
