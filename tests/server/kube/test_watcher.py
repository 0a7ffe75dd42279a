"""The list/watch loops, with the real kubernetes client talking HTTP to the stub API server."""

from __future__ import annotations

import threading
import time

import orjson

from api.demo.cluster import StubApiServer, make_node, make_pod
from api.kube.cache import ClusterCache
from api.kube.watcher import ClusterWatcher
from tests.support.kube import stub_api, watched_cache
from tests.support.polling import eventually


def seed(server: StubApiServer, pods: int = 10, nodes: int = 2) -> None:
    server.load(
        pods=[make_pod(f"w-{i}", "ml", f"node-{i % nodes}", gpu_limit=1) for i in range(pods)],
        nodes=[make_node(f"node-{n}", f"127.0.0.{n + 2}") for n in range(nodes)],
    )


def test_fills_from_several_pages() -> None:
    with stub_api() as server:
        seed(server, pods=23, nodes=3)
        with watched_cache(server, page_size=5) as (cache, watcher):
            assert cache.pod_count == 23
            assert {p.name for p in cache.pods()} == {f"w-{i}" for i in range(23)}
            assert [n.name for n in cache.nodes()] == ["node-0", "node-1", "node-2"]
            assert cache.node("node-1").internal_ip == "127.0.0.3"  # type: ignore[union-attr]
            pod_lists = [
                params
                for path, params in server.request_log
                if path == "/api/v1/pods" and "watch" not in params
            ]
            assert len(pod_lists) == 5
            assert all(params["limit"] == "5" for params in pod_lists)
            assert "continue" not in pod_lists[0]
            assert all("continue" in params for params in pod_lists[1:])
            assert watcher.pods.stats.lists == 1 and watcher.pods.stats.relists == 0
            assert watcher.pods.resource_version == str(server.resource_version)


def test_ready_waits_for_both_lists() -> None:
    with stub_api() as server:
        seed(server)
        server.pause_lists("nodes")
        with watched_cache(server, wait_ready=False) as (cache, _):
            assert eventually(lambda: cache.pod_count == 10)
            assert server.wait_for("nodes", "list", 1)
            assert not cache.ready
            server.resume_lists("nodes")
            assert cache.wait_ready(15)
            assert cache.node_count == 2


def test_added_modified_deleted_pods_show_up() -> None:
    with stub_api() as server:
        seed(server)
        with watched_cache(server) as (cache, watcher):
            server.add_pod(make_pod("fresh", "ml", "node-1", gpu_limit=2))
            assert eventually(lambda: cache.pod("ml", "fresh") is not None)
            assert cache.pod("ml", "fresh").gpu_request == 2  # type: ignore[union-attr]

            server.update_pod(make_pod("fresh", "ml", "node-1", gpu_limit=4, phase="Succeeded"))
            assert eventually(lambda: cache.pod("ml", "fresh").gpu_request == 4)  # type: ignore[union-attr]
            assert cache.pod("ml", "fresh").phase == "Succeeded"  # type: ignore[union-attr]

            server.delete_pod("ml", "fresh")
            assert eventually(lambda: cache.pod("ml", "fresh") is None)
            assert watcher.pods.stats.events == 3
            assert watcher.pods.stats.relists == 0


def test_node_changes_show_up() -> None:
    with stub_api() as server:
        seed(server)
        with watched_cache(server) as (cache, _):
            server.add_node(make_node("node-9", "127.0.0.9"))
            assert eventually(lambda: cache.node("node-9") is not None)
            server.update_node(make_node("node-9", "127.0.0.10", gpus=4))
            assert eventually(lambda: cache.node("node-9").internal_ip == "127.0.0.10")  # type: ignore[union-attr]
            assert cache.node("node-9").gpu_capacity == 4  # type: ignore[union-attr]
            server.delete_node("node-9")
            assert eventually(lambda: cache.node("node-9") is None)


def test_pod_moving_nodes_and_changing_container_ids_keeps_indexes_consistent() -> None:
    old_id, new_id = "1" * 64, "2" * 64
    with stub_api() as server:
        seed(server)
        server.add_pod(make_pod("mover", "ml", "node-0", container_ids=[f"containerd://{old_id}"]))
        with watched_cache(server) as (cache, _):
            assert cache.pod_by_container_id(old_id) is cache.pod("ml", "mover")
            server.update_pod(
                make_pod("mover", "ml", "node-1", container_ids=[f"cri-o://{new_id}"])
            )
            assert eventually(lambda: cache.pod_by_container_id(new_id) is not None)
            moved = cache.pod("ml", "mover")
            assert cache.pod_by_container_id(new_id) is moved
            assert cache.pod_by_container_id(old_id) is None
            assert moved not in cache.pods(node_name="node-0")
            assert moved in cache.pods(node_name="node-1")
            assert cache.pod_by_uid(moved.uid) is moved  # type: ignore[union-attr]


def test_bookmarks_advance_the_resource_version() -> None:
    with stub_api(bookmark_interval=0.1) as server:
        seed(server)
        with watched_cache(server) as (_, watcher):
            listed_rv = watcher.pods.resource_version
            # A node change moves the server's resourceVersion; the pod watch
            # sees no event, only bookmarks carrying the new version.
            rv = server.add_node(make_node("node-7", "127.0.0.7"))
            assert eventually(lambda: watcher.pods.resource_version == str(rv))
            assert listed_rv != str(rv)
            assert watcher.pods.stats.bookmarks >= 1
            assert watcher.pods.stats.events == 0
            pod_watches = [
                p for path, p in server.request_log if path == "/api/v1/pods" and p.get("watch")
            ]
            assert pod_watches[0]["allowWatchBookmarks"] == "true"
            assert pod_watches[0]["resourceVersion"] == listed_rv


def test_dropped_stream_resumes_from_last_version_without_relisting() -> None:
    with stub_api() as server:
        seed(server)
        with watched_cache(server) as (cache, watcher):
            server.add_pod(make_pod("before", "ml", "node-0"))
            assert eventually(lambda: cache.pod("ml", "before") is not None)
            seen_rv = watcher.pods.resource_version
            lists_before = server.count("pods", "list")

            server.drop_watches()
            assert server.wait_for("pods", "watch", 2)
            server.add_pod(make_pod("after", "ml", "node-0"))
            assert eventually(lambda: cache.pod("ml", "after") is not None)

            assert server.count("pods", "list") == lists_before
            assert watcher.pods.stats.relists == 0
            assert watcher.pods.stats.watch_restarts >= 1
            assert cache.pod("ml", "before") is not None
            resumed = [
                p for path, p in server.request_log if path == "/api/v1/pods" and p.get("watch")
            ]
            assert resumed[1]["resourceVersion"] == seen_rv


def test_gone_relists_and_keeps_serving_old_data_meanwhile() -> None:
    with stub_api() as server:
        seed(server, pods=30)
        with watched_cache(server, page_size=10) as (cache, watcher):
            stop = threading.Event()
            observed: list[int] = []
            # A failed assert in the thread would go unseen; the test checks this list.
            not_ready: list[int] = []

            def reader() -> None:
                while not stop.is_set():
                    observed.append(len(cache.pods()))
                    if not cache.ready:
                        not_ready.append(len(observed))
                    time.sleep(0.001)

            thread = threading.Thread(target=reader)
            thread.start()
            try:
                with server.lists_paused("pods"):
                    lists_before = server.count("pods", "list")
                    server.expire_watches()
                    # The relist has started and is held by the server.
                    assert server.wait_for("pods", "list", lists_before + 1)
                    server.delete_pod("ml", "w-0")
                    server.add_pod(make_pod("w-new", "ml", "node-0"))
                    time.sleep(0.3)
                    # Still serving the old list, whole.
                    assert cache.pod_count == 30
                    assert cache.pod("ml", "w-0") is not None
                    assert cache.pod("ml", "w-new") is None
                assert eventually(lambda: cache.pod("ml", "w-new") is not None)
                assert cache.pod("ml", "w-0") is None
                assert cache.pod_count == 30
            finally:
                stop.set()
                thread.join()
            assert watcher.pods.stats.relists == 1
            assert min(observed) == 30
            assert not_ready == []
            # The resumed watch starts from the new list's version.
            assert eventually(lambda: watcher.pods.resource_version == str(server.resource_version))


def test_resume_that_is_gone_relists() -> None:
    with stub_api() as server:
        seed(server)
        with watched_cache(server, backoff_initial=0.3) as (cache, watcher):
            assert eventually(lambda: server.watching("pods") == 1)
            # Compacted before the client comes back (held until then): its resume gets 410.
            with server.watches_paused("pods"):
                server.drop_watches()
                server.expire_watches()
                server.delete_pod("ml", "w-1")
            assert eventually(lambda: cache.pod("ml", "w-1") is None)
            assert watcher.pods.stats.relists == 1
            assert cache.pod_count == 9


def test_history_overflow_while_disconnected_relists() -> None:
    with stub_api(history_limit=3) as server:
        seed(server)
        server.pause_lists()
        with watched_cache(server, wait_ready=False, backoff_initial=0.3) as (cache, watcher):
            assert server.wait_for("pods", "list", 1)
            server.resume_lists()
            assert cache.wait_ready(15)
            assert eventually(lambda: server.watching("pods") == 1)
            watches = server.count("pods", "watch")
            # Hold the watch closed until the whole burst is in, or it could
            # reconnect mid-burst and catch up without a relist.
            with server.watches_paused("pods"):
                server.drop_watches()
                assert server.wait_for("pods", "watch", watches + 1)
                for i in range(5):
                    server.add_pod(make_pod(f"burst-{i}", "ml", "node-0"))
            assert eventually(lambda: cache.pod_count == 15)
            assert watcher.pods.stats.relists == 1


def test_malformed_watch_lines_do_not_kill_the_watch() -> None:
    with stub_api() as server:
        seed(server)
        with watched_cache(server) as (cache, watcher):
            assert eventually(lambda: server.watching("pods") == 1)
            server.inject_watch_line("pods", b"{not json")
            server.inject_watch_line("pods", b'{"type":"ADDED"}')
            server.inject_watch_line(
                "pods", b'{"type":"ADDED","object":{"metadata":{"name":"no-uid"}}}'
            )
            server.inject_watch_line("pods", b'{"type":"WHATEVER","object":{"metadata":{}}}')
            server.inject_watch_line("pods", b"[1, 2, 3]")
            server.add_pod(make_pod("good", "ml", "node-0"))
            assert eventually(lambda: cache.pod("ml", "good") is not None)
            assert watcher.pods.stats.bad_events == 5
            assert watcher.pods.stats.watches == 1
            assert watcher.pods.stats.relists == 0


def test_unreadable_list_items_are_skipped() -> None:
    with stub_api() as server:
        seed(server)
        broken = make_pod("broken", "ml", "node-0")
        del broken["metadata"]["uid"]
        server.load(pods=[broken], assign_uids=False)
        with watched_cache(server) as (cache, watcher):
            assert cache.pod_count == 10
            assert watcher.pods.stats.bad_events == 1


def test_watch_error_other_than_gone_resumes_after_backoff() -> None:
    with stub_api() as server:
        seed(server)
        with watched_cache(server) as (cache, watcher):
            error = {
                "type": "ERROR",
                "object": {"kind": "Status", "code": 500, "reason": "InternalError"},
            }
            assert eventually(lambda: server.watching("pods") == 1)
            server.inject_watch_line("pods", orjson.dumps(error))
            assert server.wait_for("pods", "watch", 2)
            server.add_pod(make_pod("later", "ml", "node-0"))
            assert eventually(lambda: cache.pod("ml", "later") is not None)
            assert watcher.pods.stats.errors == 1
            assert watcher.pods.stats.relists == 0


def test_watch_timeout_ends_the_stream_and_it_resumes() -> None:
    with stub_api() as server:
        seed(server)
        with watched_cache(server, watch_timeout=1) as (cache, watcher):
            assert server.wait_for("pods", "watch", 2)
            server.add_pod(make_pod("late", "ml", "node-0"))
            assert eventually(lambda: cache.pod("ml", "late") is not None)
            assert watcher.pods.stats.relists == 0
            assert watcher.pods.stats.errors == 0
            timeouts = {p["timeoutSeconds"] for path, p in server.request_log if p.get("watch")}
            assert timeouts == {"1"}


def test_api_server_down_keeps_the_loops_retrying() -> None:
    with stub_api() as server:
        seed(server)
        url = server.url
    # Same port, now closed: the loops keep retrying without dying.
    cache = ClusterCache()
    watcher = ClusterWatcher(cache, server.configuration(), backoff_initial=0.05, backoff_max=0.2)
    watcher.start()
    try:
        assert eventually(lambda: watcher.pods.stats.errors >= 2)
        assert not cache.ready
    finally:
        assert watcher.stop(5)
    assert url == server.url


def test_namespaced_watch_sees_only_its_namespace() -> None:
    with stub_api() as server:
        seed(server)
        server.add_pod(make_pod("other", "elsewhere", "node-0"))
        with watched_cache(server, namespace="ml") as (cache, _):
            assert cache.pod_count == 10
            server.add_pod(make_pod("other-2", "elsewhere", "node-0"))
            server.add_pod(make_pod("mine", "ml", "node-0"))
            assert eventually(lambda: cache.pod("ml", "mine") is not None)
            assert cache.pods(namespace="elsewhere") == ()
            assert any(path == "/api/v1/namespaces/ml/pods" for path, _ in server.request_log)


def test_stop_is_prompt_mid_watch_and_mid_list() -> None:
    with stub_api() as server:
        seed(server)
        # The watch would last 600 s, the held list forever: stopping ends both.
        with watched_cache(server, watch_timeout=600) as (_, watcher):
            assert server.wait_for("pods", "watch", 1)
            assert watcher.stop(30)
        server.pause_lists()
        cache = ClusterCache()
        watcher = ClusterWatcher(cache, server.configuration())
        watcher.start()
        assert server.wait_for("pods", "list", 2)
        assert watcher.stop(30)
