"""Pod names held by the agent: bounded in bytes whatever a holder of the token pushes."""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import replace

from node_resolver.pod_names import MAX_BYTES, PodName, PodNames, pod_bytes
from tests.support.pod_names import long_named_pods, pod_uid


def test_pods_pushed_past_the_byte_bound_hold_at_most_the_bound_in_memory() -> None:
    # 14,000 pods: over three times the bound, and under the count bound (20,000), which
    # alone let 70,000 such pods take the agent from 48 to 338 MB.
    names = PodNames()
    gc.collect()
    tracemalloc.start()
    try:
        for batch in long_named_pods(14_000):
            names.put(batch)
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert names.held_bytes <= MAX_BYTES
    # What Python really holds for them stays within the count.
    assert held <= MAX_BYTES
    # The newest stay, the oldest went.
    assert names.get(pod_uid(13_999)) is not None
    assert names.get(pod_uid(0)) is None


def test_names_never_drained_stay_within_the_bound() -> None:
    # The log off, or its directory unusable: nothing takes the changed names away.
    names = PodNames(max_bytes=256 * 1024)
    for batch in long_named_pods(2_000):
        names.put(batch)
    assert 0 < names.held_bytes <= 256 * 1024
    assert names.changed_count == len(names)
    drained = names.drain_changed()
    assert {pod.uid for pod in drained} == {pod.uid for pod in names.all()}


def test_changes_drain_oldest_first_a_write_at_a_time_and_a_failed_write_goes_back_first() -> None:
    names = PodNames()
    pods = [pod for batch in long_named_pods(10) for pod in batch]
    names.put(pods)
    first = names.drain_changed(max_bytes=3 * pod_bytes(pods[0]))
    assert first == pods[:3]
    # At least one, however small the budget.
    assert names.drain_changed(max_bytes=1) == pods[3:4]
    # The first write failed: its names are written before the later ones.
    names.restore_changed(first)
    assert names.drain_changed() == pods[:3] + pods[4:]


def test_a_failed_write_does_not_bring_back_names_that_changed_or_went_since() -> None:
    names = PodNames(max_bytes=3 * pod_bytes(next(long_named_pods(1))[0]))
    pods = [pod for batch in long_named_pods(4) for pod in batch]
    names.put(pods[:2])
    written = names.drain_changed()
    renamed = PodName(pods[1].uid, "other", "renamed", {})
    names.put([renamed, *pods[2:]])
    names.restore_changed(written)
    # pods[0] was pushed out by the bound; pods[1] has a newer name.
    assert names.get(pods[0].uid) is None
    assert names.drain_changed() == [renamed, *pods[2:]]


def test_names_loaded_from_the_log_count_as_older_than_those_pushed_since() -> None:
    one = pod_bytes(next(long_named_pods(1))[0])
    names = PodNames(max_bytes=3 * one)
    pods = [pod for batch in long_named_pods(4) for pod in batch]
    names.put(pods[3:])
    names.load(pods[:3])
    # Loaded oldest first: the oldest loaded one went, the pushed one stayed.
    assert [pod.uid for pod in names.all()] == [p.uid for p in (pods[1], pods[2], pods[3])]
    assert names.changed_count == 1


def test_device_shares_and_migs_count_in_what_names_hold_and_a_new_one_is_a_change() -> None:
    plain = PodName("u", "ml", "p", {"c" * 64: "main"})
    shared = PodName(
        "u", "ml", "p", {"c" * 64: "main"}, {("p-gpu", "gpu.nvidia.com", "node-a", "gpu-0"): 0.25}
    )
    assert pod_bytes(shared) > pod_bytes(plain) + len("p-gpugpu.nvidia.comnode-agpu-0")
    names = PodNames()
    assert names.put([plain]) == 1
    # The share arrives after the name: a change, so the agent's judge looks again.
    version = names.version
    assert names.put([shared]) == 1 and names.version > version
    assert names.held_bytes == pod_bytes(shared)
    # So does a MIG device the server names for one of the pod's DRA devices.
    key = ("p-gpu", "gpu.nvidia.com", "node-a", "gpu-1-mig-19-0-1")
    on_mig = replace(shared, device_migs={key: "MIG-1"})
    assert pod_bytes(on_mig) > pod_bytes(shared) + len("".join(key)) + len("MIG-1")
    version = names.version
    assert names.put([on_mig]) == 1 and names.version > version


def test_a_pod_named_twice_in_one_put_counts_once_and_keeps_the_last_name() -> None:
    names = PodNames()
    first = PodName(uid="uid-1", namespace="ml", name="train", containers={})
    renamed = replace(first, name="train-2")
    assert names.put([first, renamed]) == 1
    assert names.get("uid-1") == renamed
    assert names.put([renamed, renamed]) == 0
