"""Spoofed nesting: a process that borrows another pod's container ID is never reported as it."""

from __future__ import annotations

from pathlib import Path

from api.demo.cluster.fake_proc import write_process
from graph_schema.joins import join_pod
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
    pod = join_pod(cluster(), pod_uid, container_id)
    assert pod is not None and (pod.namespace, pod.name) == ("lab", "notebook")


def test_with_the_outer_pod_gone_the_process_is_no_pod_rather_than_the_victim() -> None:
    assert join_pod(cluster(notebook_cached=False), NOTEBOOK_UID, VICTIM_CID) is None


def test_agreeing_uid_and_container_and_a_bare_container_id_still_join() -> None:
    c = cluster()
    victim = join_pod(c, VICTIM_UID, VICTIM_CID)
    assert victim is not None and victim.name == "chat-api-0"
    # A path naming no pod (some runtimes) is placed by its container ID alone.
    bare = join_pod(c, None, VICTIM_CID)
    assert bare is not None and bare.name == "chat-api-0"
