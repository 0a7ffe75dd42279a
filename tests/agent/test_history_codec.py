"""The history and usage messages, built by the codec alone: what the server reads back."""

from __future__ import annotations

import dataclasses

import pytest

from node_resolver.generated import agent_pb2
from node_resolver.history.records import (
    HistoryQuery,
    OccupancyRecord,
    UsageGroup,
    UsageQuery,
    UsageRow,
)
from node_resolver.history_codec import (
    BadHistoryRequestError,
    history_page_from_proto,
    history_page_to_proto,
    history_query_from_proto,
    history_request_to_proto,
    page_token,
    usage_from_proto,
    usage_query_from_proto,
    usage_query_to_proto,
    usage_reply_to_proto,
)
from tests.support.history_agents import occupancy


def written(record: OccupancyRecord, row: int) -> OccupancyRecord:
    """``record`` as its store gives it back: with its row."""
    return dataclasses.replace(record, id=row)


def test_a_full_page_says_where_the_next_starts_and_a_short_one_is_the_last() -> None:
    records = [
        written(occupancy("GPU-a", 7, 1, 2, pod=("ml", "train", "uid-1")), 11),
        written(occupancy("GPU-a", 8, 1.5, 3, ended=False), 12),
    ]
    full = history_page_from_proto(history_page_to_proto("node-a", "ok", records, limit=2))
    assert (full.node_name, full.status) == ("node-a", "ok")
    assert full.next_page_token == page_token(records[-1])
    assert full.cursors == [page_token(r) for r in records]
    # What the server reads of each record, its row (the cross-node order) included.
    assert [(r.pid, r.id, r.pod_name, r.first_seen, r.end) for r in full.records] == [
        (r.pid, r.id, r.pod_name, r.first_seen, r.end) for r in records
    ]
    assert [r.mean_memory_bytes for r in full.records] == [r.mean_memory_bytes for r in records]
    short = history_page_from_proto(history_page_to_proto("node-a", "ok", records, limit=3))
    assert short.next_page_token == ""
    off = history_page_from_proto(history_page_to_proto("node-a", "off"))
    assert (off.records, off.status, off.next_page_token) == ([], "off", "")


def test_a_request_carries_its_query_and_starts_after_a_token_or_its_own_position() -> None:
    query = HistoryQuery(
        since=10.0, until=20.0, gpu_uuids=("GPU-a",), pod_uids=("uid-1",),
        namespaces=("ml",), pod_names=("train",), limit=50, after=(12.5, 3),
    )  # fmt: skip
    # No token: the query's own position, as the server's cross-node cursor sets it.
    assert history_query_from_proto(history_request_to_proto(query)) == query
    # A token (the agent's next page) wins over it.
    token = page_token(written(occupancy("GPU-a", 1, 0, 1), 9))
    resumed = history_query_from_proto(history_request_to_proto(query, token))
    assert resumed.after is not None and resumed.after[1] == 9


def test_usage_since_a_future_time_without_until_is_refused() -> None:
    # An empty answer would read as no use at all.
    with pytest.raises(BadHistoryRequestError, match="until must be after since"):
        usage_query_from_proto(agent_pb2.GetUsageRequest(since=200.0), now=100.0)
    query = usage_query_from_proto(agent_pb2.GetUsageRequest(since=50.0), now=100.0)
    assert (query.since, query.until) == (50.0, 100.0)


@pytest.mark.parametrize(
    "groups",
    [frozenset(), frozenset({UsageGroup.POD}), frozenset({UsageGroup.NODE, UsageGroup.GPU})],
)
def test_usage_comes_back_keyed_as_the_query_grouped_it(groups: frozenset[UsageGroup]) -> None:
    query = UsageQuery(since=10.0, until=20.0, group_by=groups, namespaces=("ml",))
    assert usage_query_from_proto(usage_query_to_proto(query), now=99.0) == query
    row = UsageRow("ml", "train", "GPU-a", 30.0, 4.5)
    rows, status = usage_from_proto(usage_reply_to_proto("node-a", "ok", [row]), groups)
    by_pod = UsageGroup.POD in groups
    assert status == "ok"
    assert rows == [
        UsageRow(
            namespace="ml" if by_pod else None,
            pod_name="train" if by_pod else None,
            gpu_uuid="GPU-a" if UsageGroup.GPU in groups else None,
            gpu_seconds=30.0,
            memory_gib_seconds=4.5,
            node_name="node-a" if UsageGroup.NODE in groups else None,
        )
    ]
    assert usage_from_proto(usage_reply_to_proto("node-a", "off"), groups) == ([], "off")
