"""Framing: a process that borrows another pod's container ID, or names a pod on another
node, is never reported as that pod (the GraphQL graph, /gpu-pods and /metrics alike)."""

from __future__ import annotations

from pathlib import Path

from api.demo.cluster.fake_proc import write_process
from graph_schema.joins import join_pod, join_process
from node_resolver.pids import CgroupResolver
from tests.support.graph import MemoryCluster, pod_record

NOTEBOOK_UID = "6a1f4b1e-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
VICTIM_UID = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
NOTEBOOK_CID = "0123456789abcdef" * 4
VICTIM_CID = "a" * 63 + "b"


def cluster(*, notebook_cached: bool = True) -> MemoryCluster:
    c = MemoryCluster()
    if notebook_cached:
        c.add_pod(
            pod_record("lab", "notebook", "n1", container_ids=[NOTEBOOK_CID], uid=NOTEBOOK_UID)
        )
    c.add_pod(
        pod_record("inference", "chat-api-0", "n1", container_ids=[VICTIM_CID], uid=VICTIM_UID)
    )
    return c


def resolve(tmp_path: Path, cgroup_path: str) -> tuple[str | None, str | None]:
    """(pod UID, container ID) the agent's cgroup resolver reads for a process at that path."""
    write_process(tmp_path, 4242, comm="python", start_time=1, cgroup=f"0::{cgroup_path}\n")
    resolved = CgroupResolver(proc_root=str(tmp_path)).resolve([4242])[4242]
    assert resolved.container is not None
    return resolved.container.pod_uid, resolved.container.container_id


def test_another_pods_container_id_nested_in_a_pod_is_reported_as_the_outer_pod(
    tmp_path: Path,
) -> None:
    # The case: pod<notebook>/<notebook-cid>/<chat-api-0-cid>, systemd driver.
    spoofed = (
        "/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{NOTEBOOK_UID.replace('-', '_')}.slice/"
        f"cri-containerd-{NOTEBOOK_CID}.scope/{VICTIM_CID}"
    )
    pod_uid, container_id = resolve(tmp_path, spoofed)
    assert (pod_uid, container_id) == (NOTEBOOK_UID, VICTIM_CID)
    pod = join_pod(cluster(), "n1", pod_uid, container_id)
    assert pod is not None and (pod.namespace, pod.name) == ("lab", "notebook")


def test_with_the_outer_pod_gone_the_process_is_no_pod_rather_than_the_victim() -> None:
    assert join_pod(cluster(notebook_cached=False), "n1", NOTEBOOK_UID, VICTIM_CID) is None


def test_agreeing_uid_and_container_and_a_bare_container_id_still_join() -> None:
    c = cluster()
    victim = join_pod(c, "n1", VICTIM_UID, VICTIM_CID)
    assert victim is not None and victim.name == "chat-api-0"
    # A path naming no pod (some runtimes) is placed by its container ID alone.
    bare = join_pod(c, "n1", None, VICTIM_CID)
    assert bare is not None and bare.name == "chat-api-0"


def test_a_pod_bound_to_another_node_is_never_a_processs_pod() -> None:
    c = cluster()
    # On n2, a process whose cgroup names chat-api-0 (bound to n1), by UID or container ID.
    for uid, cid in ((VICTIM_UID, VICTIM_CID), (VICTIM_UID, None), (None, VICTIM_CID)):
        joined = join_process(c, "n2", uid, cid)
        assert joined.pod is None
        assert joined.elsewhere is not None and joined.elsewhere.name == "chat-api-0"
    assert join_pod(c, "n1", VICTIM_UID, None) is not None


async def test_a_process_on_one_node_cannot_frame_a_pod_on_another(tmp_path: Path) -> None:
    """The issue's case: on gpu-node-2, a process whose cgroup names notebook-alice (on
    gpu-node-1). The graph, /gpu-pods and /metrics attribute it to no pod."""
    from api.demo.cluster.manifests import pod_uid_for
    from tests.support.server import GIB, Gpu, GraphTestCluster, Proc, serving

    alice = pod_uid_for("research", "notebook-alice")
    cluster = GraphTestCluster(tmp_path)
    cluster.add_node(
        "gpu-node-1",
        gpus=[Gpu(0, "GPU-1-0", processes=[(11, 2 * GIB), (12, 1 * GIB)])],
        # PID 12 on alice's own node names a pod bound to gpu-node-2.
        procs=[Proc(11, "jupyter", alice), Proc(12, "framer", pod_uid_for("ml", "trainer"))],
    )
    cluster.add_node(
        "gpu-node-2",
        gpus=[Gpu(0, "GPU-2-0", processes=[(21, 3 * GIB)])],
        procs=[Proc(21, "framer", alice)],
    )
    cluster.add_pod("notebook-alice", "research", "gpu-node-1", gpu_limit=0)
    cluster.add_pod("trainer", "ml", "gpu-node-2", gpu_limit=1)
    await cluster.start()
    try:
        async with serving(cluster.settings()) as server:
            answer = await server.query(
                "{ nodes { name gpus { processes { pid pod { name } } } } }"
            )
            pods = await server.client.get("/gpu-pods", params={"worker_id": "notebook-alice"})
            metrics = (await server.client.get("/metrics")).text
    finally:
        await cluster.stop()
    joined = {
        process["pid"]: (process["pod"] or {}).get("name")
        for node in answer["data"]["nodes"]
        for gpu in node["gpus"]
        for process in gpu["processes"]
    }
    assert joined == {11: "notebook-alice", 12: None, 21: None}
    listed = [p["pod"] for g in pods.json()["GpuPods"].values() for p in g["pidPods"]]
    assert listed == ["notebook-alice"]
    # No series puts alice's pod on gpu-node-2 (gpugraph_pod_gpus_unrequested included).
    assert 'pod="notebook-alice"' not in "".join(
        line for line in metrics.splitlines() if 'node="gpu-node-2"' in line
    )
    framed = (
        'gpugraph_gpu_unattributed_memory_bytes{gpu="0",gpu_uuid="GPU-2-0",'
        'node="gpu-node-2",reason="pod_on_other_node"} '
    )
    (line,) = [line for line in metrics.splitlines() if line.startswith(framed)]
    assert float(line.removeprefix(framed)) == 3 * GIB
