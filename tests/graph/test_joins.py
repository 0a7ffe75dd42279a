"""``NodeJoin``, the per-node join the graph builds with, finds exactly what ``join_pod`` finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from api.kube.cache import ClusterCache
from graph_schema.interfaces import Cluster
from graph_schema.joins import NodeJoin, join_pod
from tests.support.graph import MemoryCluster, pod_record

NODES = ["n1", "n2", None]
CONTAINER_IDS = [f"{c}" * 64 for c in "abcdef"]
UIDS = [f"uid-{i}" for i in range(8)]

# A pod: its node (or none: pending) and container IDs, which pods may share: the last
# one cached owns a shared ID, as in the cache. UIDs are unique, as the API server makes them.
pods = st.lists(
    st.tuples(st.sampled_from(NODES), st.lists(st.sampled_from(CONTAINER_IDS), max_size=2)),
    max_size=len(UIDS),
)
# A process as an agent reports it: its cgroup's pod UID (known or not) and container ID.
processes = st.lists(
    st.tuples(
        st.sampled_from([*UIDS, "uid-unknown", None]),
        st.sampled_from([*CONTAINER_IDS, "f" * 64, None]),
    ),
    min_size=1,
    max_size=12,
)


def clusters(layout: list[tuple[str | None, list[str]]]) -> list[Cluster]:
    memory = MemoryCluster()
    cache = ClusterCache()
    records = [
        pod_record("ns", f"pod-{i}", node, container_ids=cids, uid=UIDS[i])
        for i, (node, cids) in enumerate(layout)
    ]
    cache.replace_pods([])
    for record in records:
        memory.add_pod(record)
        cache.upsert_pod(record)
    return [memory, cache]


@settings(max_examples=300, deadline=None)
@given(layout=pods, seen=processes, node=st.sampled_from(["n1", "n2"]))
def test_the_node_join_agrees_with_join_pod(
    layout: list[tuple[str | None, list[str]]],
    seen: list[tuple[str | None, str | None]],
    node: str,
) -> None:
    for cluster in clusters(layout):
        join = NodeJoin(cluster, node)
        for pod_uid, container_id in seen:
            assert join.pod(pod_uid, container_id) is join_pod(
                cluster, node, pod_uid, container_id
            ), (pod_uid, container_id)


def test_a_pod_on_another_node_is_never_joined_by_its_uid() -> None:
    memory, cache = clusters([("n2", [CONTAINER_IDS[0]]), ("n1", [CONTAINER_IDS[1]])])
    for cluster in (memory, cache):
        join = NodeJoin(cluster, "n1")
        assert join.pod(UIDS[0], CONTAINER_IDS[0]) is None
        assert join.pod(None, CONTAINER_IDS[0]) is None
        joined = join.pod(UIDS[1], CONTAINER_IDS[1])
        assert joined is not None and joined.name == "pod-1"
