"""ClusterCache: indexes, readiness, atomic relists, thread safety."""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.demo.cluster.manifests import make_pod
from api.kube import cache as cache_module
from api.kube.cache import ClusterCache
from api.kube.parse import pod_record
from graph_schema.interfaces import Cluster
from graph_schema.records import NodeRecord, PodRecord, PodSizes
from tests.support import graph
from tests.support.graph import node_record


def pod(
    name: str,
    namespace: str = "ns",
    node: str | None = "n1",
    *,
    uid: str | None = None,
    cids: tuple[str, ...] = (),
) -> PodRecord:
    return graph.pod_record(namespace, name, node, container_ids=cids, uid=uid, gpu_request=None)


def ready_cache(pods: list[PodRecord], nodes: list[NodeRecord] | None = None) -> ClusterCache:
    cache = ClusterCache()
    cache.replace_pods(pods)
    cache.replace_nodes(nodes or [])
    return cache


def test_it_is_a_cluster() -> None:
    cluster: Cluster = ClusterCache()
    assert cluster.ready is False


def test_ready_only_after_both_lists() -> None:
    cache = ClusterCache()
    cache.replace_pods([pod("a")])
    assert not cache.ready
    assert not cache.wait_ready(0.01)
    cache.replace_nodes([node_record("n1")])
    assert cache.ready
    assert cache.wait_ready(0)


def test_lookups() -> None:
    a = pod("a", cids=("c" * 64,))
    b = pod("b", "other", "n2")
    cache = ready_cache([a, b], [node_record("n2"), node_record("n1")])
    assert cache.pod("ns", "a") is a
    assert cache.pod("ns", "b") is None
    assert cache.pod_by_uid(b.uid) is b
    assert cache.pod_by_container_id("c" * 64) is a
    assert cache.pod_by_container_id("containerd://" + "c" * 64) is a
    assert cache.pod_by_container_id("d" * 64) is None
    assert [n.name for n in cache.nodes()] == ["n1", "n2"]
    assert cache.node("n2") is not None and cache.node("zz") is None
    assert (cache.pod_count, cache.node_count) == (2, 2)


def test_pods_filters_are_sorted_by_namespace_and_name() -> None:
    pods = [pod("z", "b"), pod("a", "b", "n2"), pod("m", "a"), pod("q", "a", None)]
    cache = ready_cache(pods)
    names = lambda seq: [(p.namespace, p.name) for p in seq]  # noqa: E731
    assert names(cache.pods()) == [("a", "m"), ("a", "q"), ("b", "a"), ("b", "z")]
    assert names(cache.pods(namespace="a")) == [("a", "m"), ("a", "q")]
    assert names(cache.pods(node_name="n1")) == [("a", "m"), ("b", "z")]
    assert names(cache.pods(namespace="b", node_name="n1")) == [("b", "z")]
    assert names(cache.pods(namespace="nope")) == []
    assert names(cache.pods(node_name="nope")) == []


def test_pods_named_spans_namespaces() -> None:
    cache = ready_cache([pod("w", "b"), pod("w", "a"), pod("x", "a")])
    assert [(p.namespace, p.name) for p in cache.pods_named("w")] == [("a", "w"), ("b", "w")]
    assert cache.pods_named("none") == ()


def test_moving_a_pod_between_nodes_updates_every_index() -> None:
    cache = ready_cache([pod("a", node="n1", cids=("1" * 64,))])
    assert [p.name for p in cache.pods(node_name="n1")] == ["a"]
    moved = pod("a", node="n2", cids=("2" * 64,))
    cache.upsert_pod(moved)
    assert cache.pods(node_name="n1") == ()
    assert cache.pods(node_name="n2") == (moved,)
    assert cache.pod_by_container_id("1" * 64) is None
    assert cache.pod_by_container_id("2" * 64) is moved
    assert cache.pod_count == 1


def test_recreated_pod_with_new_uid_replaces_the_old_one() -> None:
    cache = ready_cache([pod("a", uid="old")])
    cache.upsert_pod(pod("a", uid="new"))
    assert cache.pod_by_uid("old") is None
    assert cache.pod_by_uid("new") is cache.pod("ns", "a")


def test_container_id_reused_by_another_pod_survives_the_first_pods_deletion() -> None:
    cid = "e" * 64
    cache = ready_cache([pod("a", cids=(cid,))])
    b = pod("b", cids=(cid,))
    cache.upsert_pod(b)
    cache.delete_pod("ns", "a")
    assert cache.pod_by_container_id(cid) is b


def test_delete() -> None:
    a = pod("a", cids=("1" * 64,))
    cache = ready_cache([a], [node_record("n1")])
    assert cache.delete_pod("ns", "a") is a
    assert cache.delete_pod("ns", "a") is None
    assert cache.pods() == () and cache.pods(namespace="ns") == () and cache.pods_named("a") == ()
    assert cache.pod_by_uid(a.uid) is None and cache.pod_by_container_id("1" * 64) is None
    assert cache.delete_node("n1") is not None
    assert cache.nodes() == ()


def test_replace_drops_what_is_not_in_the_new_list() -> None:
    cache = ready_cache([pod("a"), pod("b")], [node_record("n1"), node_record("n2")])
    cache.pods()
    cache.replace_pods([pod("b"), pod("c")])
    cache.replace_nodes([node_record("n2")])
    assert [p.name for p in cache.pods()] == ["b", "c"]
    assert cache.pod("ns", "a") is None
    assert [n.name for n in cache.nodes()] == ["n2"]


def test_cached_sorted_results_follow_changes() -> None:
    cache = ready_cache([pod("a")], [node_record("n1")])
    assert len(cache.pods()) == 1 and len(cache.pods(node_name="n1")) == 1
    assert len(cache.nodes()) == 1
    cache.upsert_pod(pod("b"))
    cache.upsert_node(node_record("n0"))
    assert [p.name for p in cache.pods()] == ["a", "b"]
    assert [p.name for p in cache.pods(node_name="n1")] == ["a", "b"]
    assert [p.name for p in cache.pods(namespace="ns")] == ["a", "b"]
    assert [n.name for n in cache.nodes()] == ["n0", "n1"]


def test_listings_of_every_node_leave_the_whole_clusters_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cache_module, "_SORTED_CACHE_LIMIT", 8)
    cache = ready_cache([pod(f"p{i}", node=f"n{i}") for i in range(20)])
    whole = cache.pods()
    for i in range(20):
        # As joining each node's snapshot asks for its pods, more nodes than the limit.
        assert [p.name for p in cache.pods(node_name=f"n{i}")] == [f"p{i}"]
        # The whole cluster's listing, asked for again in between, is the one sorted first.
        assert cache.pods() is whole


def test_pods_are_sorted_outside_the_lock_and_a_change_meanwhile_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = ClusterCache()
    cache.replace_pods([pod("b"), pod("a")])
    real_key = cache_module._pod_sort_key
    held: list[bool] = []

    def key(record: PodRecord) -> tuple[str, str]:
        held.append(cache._lock.locked())
        if len(held) == 1:
            # A watch thread writes while the listing is being sorted.
            cache.upsert_pod(pod("c"))
        return real_key(record)

    monkeypatch.setattr(cache_module, "_pod_sort_key", key)
    assert [p.name for p in cache.pods()] == ["a", "b"]
    assert held == [False, False]
    monkeypatch.setattr(cache_module, "_pod_sort_key", real_key)
    # The listing raced with a write, so it was not kept: the next one has "c".
    assert [p.name for p in cache.pods()] == ["a", "b", "c"]


def test_listeners_hear_changes_and_a_broken_one_does_not_stop_writes() -> None:
    cache = ClusterCache()
    heard: list[tuple[str, str, str | None]] = []

    def broken(kind: str, change: str, record: object) -> None:
        raise RuntimeError("boom")

    cache.subscribe(broken)
    unsubscribe = cache.subscribe(
        lambda kind, change, record: heard.append((kind, change, getattr(record, "name", None)))
    )
    cache.replace_pods([])
    cache.upsert_pod(pod("a"))
    cache.upsert_pod(pod("a"))
    cache.delete_pod("ns", "a")
    cache.upsert_node(node_record("n1"))
    unsubscribe()
    cache.delete_node("n1")
    assert heard == [
        ("pod", "RELISTED", None),
        ("pod", "ADDED", "a"),
        ("pod", "MODIFIED", "a"),
        ("pod", "DELETED", "a"),
        ("node", "ADDED", "n1"),
    ]
    assert cache.node("n1") is None


def test_readers_never_see_a_half_applied_relist() -> None:
    generation_a = [pod(f"a{i}", node=f"n{i % 5}") for i in range(2000)]
    generation_b = [pod(f"b{i}", node=f"n{i % 5}") for i in range(2000)]
    cache = ready_cache(generation_a)
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            cache.replace_pods(generation_b)
            cache.replace_pods(generation_a)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(300):
            names = {p.name[0] for p in cache.pods()}
            assert len(names) == 1 and len(cache.pods()) == 2000
            on_node = cache.pods(node_name="n3")
            assert len(on_node) == 400 and len({p.name[0] for p in on_node}) == 1
    finally:
        stop.set()
        thread.join()


NAMES = st.sampled_from(["a", "b", "c", "d"])
NAMESPACES = st.sampled_from(["x", "y"])
NODES = st.sampled_from(["n1", "n2", None])
# Container IDs are unique across pods in real clusters; each pod draws from its own.
CIDS = st.lists(st.sampled_from(["1", "2", "3"]), max_size=2, unique=True)
UIDS = st.sampled_from(["u1", "u2", "u3", None])

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), NAMES, NAMESPACES, NODES, CIDS, UIDS),
        st.tuples(st.just("delete"), NAMES, NAMESPACES),
        st.tuples(st.just("replace"), st.lists(st.tuples(NAMES, NAMESPACES, NODES), max_size=4)),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_indexes_match_a_plain_model_after_any_sequence_of_writes(
    ops: list[tuple[Any, ...]],
) -> None:
    cache = ready_cache([])
    model: dict[tuple[str, str], PodRecord] = {}
    for op in ops:
        if op[0] == "put":
            _, name, ns, node_name, cids, uid = op
            own_cids = tuple(f"{ns}{name}{k}".ljust(64, "0") for k in cids)
            record = pod(name, ns, node_name, uid=uid and f"{uid}-{ns}-{name}", cids=own_cids)
            cache.upsert_pod(record)
            model[(ns, name)] = record
        elif op[0] == "delete":
            _, name, ns = op
            cache.delete_pod(ns, name)
            model.pop((ns, name), None)
        else:
            records = {(ns, n): pod(n, ns, nd) for n, ns, nd in op[1]}
            cache.replace_pods(records.values())
            model = dict(records)
        expected = sorted(model.values(), key=lambda p: (p.namespace, p.name))
        assert list(cache.pods()) == expected
        assert cache.pod_count == len(model)
        # Kept as pods come and go, and what counting them one by one says.
        assert cache.pod_sizes() == PodSizes.of(model.values())
        for (ns, name), record in model.items():
            assert cache.pod(ns, name) is record
            assert cache.pod_by_uid(record.uid) is record
        for node_name in ("n1", "n2"):
            assert list(cache.pods(node_name=node_name)) == [
                p for p in expected if p.node_name == node_name
            ]
        for ns in ("x", "y"):
            assert list(cache.pods(namespace=ns)) == [p for p in expected if p.namespace == ns]
        for ns in ("x", "y"):
            for name in ("a", "b", "c", "d"):
                for k in ("1", "2", "3"):
                    cid = f"{ns}{name}{k}".ljust(64, "0")
                    owner = model.get((ns, name))
                    has = owner is not None and any(c.container_id == cid for c in owner.containers)
                    assert cache.pod_by_container_id(cid) is (owner if has else None)


def test_slim_records_stay_small_enough_for_100k_pods() -> None:
    """100k pods must fit well under 1 GB, so each cached pod must stay a few KB at most."""
    count = 5_000
    raw = [
        orjson.dumps(make_pod(f"w-{i}", f"ns-{i % 7}", f"node-{i % 50}", gpu_limit=1))
        for i in range(count)
    ]
    cache = ClusterCache()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache.replace_pods(pod_record(orjson.loads(body)) for body in raw)
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache.pods()) == count
    # ~650 bytes measured; 4 KB a pod would still be 400 MB at 100k pods.
    assert retained / count < 4096, f"{retained / count:.0f} bytes per pod"
