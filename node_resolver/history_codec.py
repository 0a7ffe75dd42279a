"""Conversion between the occupancy log's records and the agent's protobuf messages.

Page tokens are opaque to callers: the (first seen, row id) of a page's last
record, so the next page starts after it however many records arrive meanwhile.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Sequence

from .generated import agent_pb2
from .history.records import (
    MAX_FILTER_VALUES,
    HistoryPage,
    HistoryQuery,
    OccupancyRecord,
    UsageGroup,
    UsageQuery,
    UsageRow,
)
from .pod_names import DeviceShareKey, PodName

__all__ = [
    "DEFAULT_PAGE",
    "INT64",
    "MAX_FILTER_VALUES",
    "MAX_PAGE",
    "PUT_POD_NAMES_MAX_BYTES",
    "BadHistoryRequestError",
    "after_token",
    "filter_values",
    "history_page_from_proto",
    "history_page_to_proto",
    "history_query_from_proto",
    "history_request_to_proto",
    "page_position",
    "page_token",
    "pod_names_from_proto",
    "pod_names_requests",
    "pod_names_to_proto",
    "record_from_proto",
    "record_to_proto",
    "usage_from_proto",
    "usage_query_from_proto",
    "usage_query_to_proto",
    "usage_reply_to_proto",
    "usage_row_from_proto",
    "usage_row_to_proto",
]

# One PutPodNames message carries at most this many bytes of pods (a node's 110 pods
# usually fit in one); the agent's receive limit can stay small.
PUT_POD_NAMES_MAX_BYTES = 16 * 1024
DEFAULT_PAGE = 500
MAX_PAGE = 1000

_GROUP_TO_PROTO = {
    UsageGroup.NAMESPACE: agent_pb2.USAGE_GROUP_NAMESPACE,
    UsageGroup.POD: agent_pb2.USAGE_GROUP_POD,
    UsageGroup.NODE: agent_pb2.USAGE_GROUP_NODE,
    UsageGroup.GPU: agent_pb2.USAGE_GROUP_GPU,
}
_GROUP_FROM_PROTO = {value: group for group, value in _GROUP_TO_PROTO.items()}


class BadHistoryRequestError(ValueError):
    """A history or usage request the agent cannot answer as asked."""


def page_token(record: OccupancyRecord) -> str:
    """The token of the page that starts after ``record``."""
    return after_token((record.first_seen, record.id))


def after_token(after: tuple[float, int]) -> str:
    """The token of the page that starts after the position (first seen, row id)."""
    first_seen, row_id = after
    return base64.urlsafe_b64encode(f"{first_seen!r}:{row_id}".encode()).decode()


# SQLite's INTEGER: a row or sequence number past it names no row, and cannot be bound.
INT64 = range(-(2**63), 2**63)


def page_position(token: str) -> tuple[float, int] | None:
    """The (time, row) a page token resumes after; None for no token; BadHistoryRequestError
    for one this agent did not give out (of either log: records and GPU events alike)."""
    if not token:
        return None
    try:
        first_seen, _, row_id = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        position = (float(first_seen), int(row_id))
    except ValueError:
        raise BadHistoryRequestError("page_token is not one this agent gave out") from None
    if not math.isfinite(position[0]) or position[1] not in INT64:
        raise BadHistoryRequestError("page_token is not one this agent gave out")
    return position


def _range(since: float, until: float | None) -> None:
    if not math.isfinite(since) or (until is not None and not math.isfinite(until)):
        raise BadHistoryRequestError("since and until must be finite Unix times")
    if until is not None and until <= since:
        raise BadHistoryRequestError("until must be after since")


def filter_values(name: str, values: list[str]) -> tuple[str, ...]:
    """A request's filter ``name``; BadHistoryRequestError past MAX_FILTER_VALUES values, or
    for an empty one (it would match every row that lacks the field: host processes for a
    pod's UID, every full GPU's records for a MIG device's)."""
    if len(values) > MAX_FILTER_VALUES:
        raise BadHistoryRequestError(f"at most {MAX_FILTER_VALUES} {name} per request")
    if not all(values):
        raise BadHistoryRequestError(f"{name} holds an empty value")
    return tuple(values)


def history_query_from_proto(request: agent_pb2.GetHistoryRequest) -> HistoryQuery:
    """The query a GetHistory request asks; BadHistoryRequestError when it makes no sense."""
    until = request.until if request.HasField("until") else None
    _range(request.since, until)
    return HistoryQuery(
        since=request.since,
        until=until,
        gpu_uuids=filter_values("gpu_uuids", list(request.gpu_uuids)),
        pod_uids=filter_values("pod_uids", list(request.pod_uids)),
        namespaces=filter_values("namespaces", list(request.namespaces)),
        pod_names=filter_values("pod_names", list(request.pod_names)),
        limit=min(request.limit, MAX_PAGE) if request.limit else DEFAULT_PAGE,
        after=page_position(request.page_token),
    )


def usage_query_from_proto(request: agent_pb2.GetUsageRequest, *, now: float) -> UsageQuery:
    """The query a GetUsage request asks; ``now`` stands in for a missing until."""
    # Filled before the range is checked: a since past now is no range either.
    until = request.until if request.HasField("until") else now
    _range(request.since, until)
    groups = set()
    for value in request.group_by:
        group = _GROUP_FROM_PROTO.get(value)
        if group is None:
            raise BadHistoryRequestError(f"unknown usage group {value}")
        groups.add(group)
    return UsageQuery(
        since=request.since,
        until=until,
        group_by=frozenset(groups),
        namespaces=filter_values("namespaces", list(request.namespaces)),
    )


def history_request_to_proto(
    query: HistoryQuery, page_token: str = ""
) -> agent_pb2.GetHistoryRequest:
    """A GetHistory request for ``query``; without a token, the query's own position (the
    server's cross-node cursor) says where the page starts."""
    return agent_pb2.GetHistoryRequest(
        since=query.since,
        until=query.until,
        gpu_uuids=list(query.gpu_uuids),
        pod_uids=list(query.pod_uids),
        namespaces=list(query.namespaces),
        pod_names=list(query.pod_names),
        limit=query.limit,
        page_token=page_token or ("" if query.after is None else after_token(query.after)),
    )


def history_page_to_proto(
    node_name: str, status: str, records: Sequence[OccupancyRecord] = (), *, limit: int = 0
) -> agent_pb2.HistoryPage:
    """A GetHistory reply: ``records``, and where the next page starts when they fill
    ``limit`` (a short page is the last)."""
    page = agent_pb2.HistoryPage(node_name=node_name, status=status)
    page.records.extend(record_to_proto(record) for record in records)
    if records and len(records) == limit:
        page.next_page_token = page_token(records[-1])
    return page


def history_page_from_proto(reply: agent_pb2.HistoryPage) -> HistoryPage:
    """A GetHistory reply as the server reads it."""
    return HistoryPage(
        node_name=reply.node_name,
        records=[record_from_proto(record) for record in reply.records],
        cursors=[record.cursor for record in reply.records],
        next_page_token=reply.next_page_token,
        status=reply.status,
    )


def usage_query_to_proto(query: UsageQuery) -> agent_pb2.GetUsageRequest:
    """A GetUsage request for ``query``."""
    return agent_pb2.GetUsageRequest(
        since=query.since,
        until=query.until,
        group_by=[_GROUP_TO_PROTO[g] for g in sorted(query.group_by, key=lambda g: g.value)],
        namespaces=list(query.namespaces),
    )


def usage_reply_to_proto(
    node_name: str, status: str, rows: Sequence[UsageRow] = ()
) -> agent_pb2.UsageReply:
    """A GetUsage reply."""
    reply = agent_pb2.UsageReply(node_name=node_name, status=status)
    reply.rows.extend(usage_row_to_proto(row) for row in rows)
    return reply


def usage_from_proto(
    reply: agent_pb2.UsageReply, group_by: frozenset[UsageGroup]
) -> tuple[list[UsageRow], str]:
    """A GetUsage reply as the server reads it: its rows, keyed as ``group_by`` asked, and
    the log's status."""
    node = reply.node_name
    return [usage_row_from_proto(row, group_by, node) for row in reply.rows], reply.status


def record_to_proto(record: OccupancyRecord) -> agent_pb2.HistoryRecord:
    """One record on the wire."""
    return agent_pb2.HistoryRecord(
        gpu_uuid=record.gpu_uuid,
        mig_device_uuid=record.mig_device_uuid,
        pid=record.pid,
        process_name=record.process_name,
        container_id=record.container_id,
        pod_uid=record.pod_uid,
        pod_namespace=record.pod_namespace,
        pod_name=record.pod_name,
        container_name=record.container_name,
        first_seen=record.first_seen,
        last_seen=record.last_seen,
        ended=record.ended,
        peak_memory_bytes=record.peak_memory_bytes,
        mean_memory_bytes=record.mean_memory_bytes,
        mean_sm_utilization=record.mean_sm_utilization,
        allocation_verdict=record.allocation_verdict,
        cursor=page_token(record),
    )


def record_from_proto(message: agent_pb2.HistoryRecord) -> OccupancyRecord:
    """One record as the server reads it (the accumulators collapsed into the means)."""
    mean_memory = message.mean_memory_bytes if message.HasField("mean_memory_bytes") else None
    mean_sm = message.mean_sm_utilization if message.HasField("mean_sm_utilization") else None
    record = OccupancyRecord(
        gpu_uuid=message.gpu_uuid,
        mig_device_uuid=message.mig_device_uuid,
        pid=message.pid,
        start_ticks=-1,
        boot_id="",
        first_seen=message.first_seen,
        last_seen=message.last_seen,
        process_name=message.process_name,
        container_id=message.container_id,
        pod_uid=message.pod_uid,
        pod_namespace=message.pod_namespace,
        pod_name=message.pod_name,
        container_name=message.container_name,
        ended=message.ended,
        peak_memory_bytes=message.peak_memory_bytes,
        allocation_verdict=message.allocation_verdict,
        id=_row_id(message.cursor),
    )
    # Held as a zero-length reading, so the record's mean properties give them back.
    if mean_memory is not None:
        record.memory_byte_seconds, record.memory_seconds = mean_memory, 1.0
    if mean_sm is not None:
        record.sm_percent_seconds, record.sm_seconds = mean_sm, 1.0
    return record


def _row_id(cursor: str) -> int:
    # The record's row in its agent's log, from the token after it: the server pages
    # across nodes by (first seen, node, row). 0 (unknown) from an agent that sent none.
    try:
        position = page_position(cursor)
    except BadHistoryRequestError:
        return 0
    return 0 if position is None else position[1]


def usage_row_to_proto(row: UsageRow) -> agent_pb2.UsageRow:
    """One usage row on the wire."""
    return agent_pb2.UsageRow(
        namespace=row.namespace or "",
        pod_name=row.pod_name or "",
        gpu_uuid=row.gpu_uuid or "",
        gpu_seconds=row.gpu_seconds,
        memory_gib_seconds=row.memory_gib_seconds,
        allocated_gpu_seconds=row.allocated_gpu_seconds,
        idle_allocated_gpu_seconds=row.idle_allocated_gpu_seconds,
    )


def usage_row_from_proto(
    message: agent_pb2.UsageRow, group_by: frozenset[UsageGroup], node_name: str
) -> UsageRow:
    """One usage row, its keys None where ``group_by`` leaves them out."""
    by_pod = UsageGroup.POD in group_by
    return UsageRow(
        namespace=message.namespace if by_pod or UsageGroup.NAMESPACE in group_by else None,
        pod_name=message.pod_name if by_pod else None,
        gpu_uuid=message.gpu_uuid if UsageGroup.GPU in group_by else None,
        gpu_seconds=message.gpu_seconds,
        memory_gib_seconds=message.memory_gib_seconds,
        node_name=node_name if UsageGroup.NODE in group_by else None,
        allocated_gpu_seconds=message.allocated_gpu_seconds,
        idle_allocated_gpu_seconds=message.idle_allocated_gpu_seconds,
    )


def pod_names_to_proto(pods: list[PodName]) -> list[agent_pb2.PodName]:
    """Pod names on the wire."""
    return [
        agent_pb2.PodName(
            uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            containers=[
                agent_pb2.ContainerName(id=cid, name=name) for cid, name in pod.containers.items()
            ],
            device_shares=[
                agent_pb2.DeviceShare(
                    claim=claim, driver=driver, pool=pool, device=device, share=share
                )
                for (claim, driver, pool, device), share in pod.device_shares.items()
            ],
            device_migs=[
                agent_pb2.DeviceMig(
                    claim=claim, driver=driver, pool=pool, device=device, mig_device_uuid=mig
                )
                for (claim, driver, pool, device), mig in pod.device_migs.items()
            ],
        )
        for pod in pods
    ]


def pod_names_requests(
    node_name: str, pods: list[PodName], *, max_bytes: int = PUT_POD_NAMES_MAX_BYTES
) -> list[agent_pb2.PutPodNamesRequest]:
    """``pods`` as PutPodNames requests of at most ``max_bytes`` each (one pod may exceed it)."""
    requests: list[agent_pb2.PutPodNamesRequest] = []
    batch: list[agent_pb2.PodName] = []
    size = 0
    for message in pod_names_to_proto(pods):
        # The repeated field's tag and length prefix: a few bytes per pod.
        cost = message.ByteSize() + 4
        if batch and size + cost > max_bytes:
            requests.append(agent_pb2.PutPodNamesRequest(node_name=node_name, pods=batch))
            batch, size = [], 0
        batch.append(message)
        size += cost
    if batch:
        requests.append(agent_pb2.PutPodNamesRequest(node_name=node_name, pods=batch))
    return requests


def pod_names_from_proto(messages: list[agent_pb2.PodName]) -> list[PodName]:
    """Pod names from the wire; BadHistoryRequestError for a pod without UID or name, a
    device share that names no device or is not in (0, 1], or a MIG device without its UUID."""
    pods = []
    for message in messages:
        if not message.uid or not message.namespace or not message.name:
            raise BadHistoryRequestError("every pod needs a uid, a namespace and a name")
        pods.append(
            PodName(
                uid=message.uid,
                namespace=message.namespace,
                name=message.name,
                containers={c.id: c.name for c in message.containers if c.id},
                device_shares=_device_shares(message.device_shares),
                device_migs=_device_migs(message.device_migs),
            )
        )
    return pods


def _device_shares(
    messages: Iterable[agent_pb2.DeviceShare],
) -> dict[DeviceShareKey, float]:
    shares = {}
    for m in messages:
        if not (m.claim and m.driver and m.pool and m.device):
            raise BadHistoryRequestError("a device share needs a claim, driver, pool and device")
        # NaN fails both comparisons: a weight the accounting would carry forever.
        if not 0.0 < m.share <= 1.0:
            raise BadHistoryRequestError(f"a device share must be in (0, 1], not {m.share}")
        shares[(m.claim, m.driver, m.pool, m.device)] = m.share
    return shares


def _device_migs(messages: Iterable[agent_pb2.DeviceMig]) -> dict[DeviceShareKey, str]:
    migs = {}
    for m in messages:
        if not (m.claim and m.driver and m.pool and m.device and m.mig_device_uuid):
            raise BadHistoryRequestError(
                "a device's MIG device needs a claim, driver, pool, device and MIG UUID"
            )
        migs[(m.claim, m.driver, m.pool, m.device)] = m.mig_device_uuid
    return migs
