"""Slim records from pod and node JSON."""

from __future__ import annotations

import copy

import orjson
import pytest

from api.demo.cluster.manifests import container_id_for, make_node, make_pod
from api.kube.parse import ParseError, node_record, pod_record, strip_runtime_prefix

HEX = "a" * 64


@pytest.mark.parametrize("runtime", ["containerd", "cri-o", "docker"])
def test_container_id_prefix_is_stripped_for_each_runtime(runtime: str) -> None:
    pod = make_pod("w-0", "ml", "node-1", container_ids=[f"{runtime}://{HEX}"])
    record = pod_record(pod)
    assert record.containers[0].container_id == HEX


def test_bare_ids_are_kept_and_any_runtime_scheme_is_stripped() -> None:
    # The agent reports bare IDs whatever the runtime, so any scheme must go.
    assert strip_runtime_prefix(HEX) == HEX
    assert strip_runtime_prefix(f"podman://{HEX}") == HEX


def test_pod_fields() -> None:
    pod = make_pod(
        "trainer-7",
        "ml",
        "node-3",
        containers=["main", "sidecar"],
        images=["pytorch:1", "envoy:2"],
        labels={"app": "trainer"},
        pod_ip="10.1.2.3",
    )
    record = pod_record(orjson.loads(orjson.dumps(pod)))
    assert record.uid == pod["metadata"]["uid"]
    assert (record.namespace, record.name, record.node_name) == ("ml", "trainer-7", "node-3")
    assert record.phase == "Running"
    assert record.pod_ip == "10.1.2.3"
    assert record.labels == {"app": "trainer"}
    assert [(c.name, c.image, c.init) for c in record.containers] == [
        ("main", "pytorch:1", False),
        ("sidecar", "envoy:2", False),
    ]
    uid = pod["metadata"]["uid"]
    assert record.containers[1].container_id == container_id_for(uid, "sidecar").split("//")[1]


def test_container_ids_match_statuses_by_name_not_position() -> None:
    pod = make_pod(
        "w",
        containers=["a", "b"],
        container_ids=["containerd://" + "1" * 64, "containerd://" + "2" * 64],
    )
    pod["status"]["containerStatuses"].reverse()
    record = pod_record(pod)
    assert [(c.name, c.container_id) for c in record.containers] == [
        ("a", "1" * 64),
        ("b", "2" * 64),
    ]


def test_init_containers_are_marked() -> None:
    record = pod_record(make_pod("w", init_containers=["setup"]))
    assert [(c.name, c.init) for c in record.containers] == [("setup", True), ("main", False)]
    assert all(c.container_id for c in record.containers)


def test_pending_pod_has_no_node_ip_or_container_ids() -> None:
    record = pod_record(make_pod("w", node=None, phase="Pending"))
    assert record.node_name is None
    assert record.pod_ip is None
    assert record.phase == "Pending"
    assert record.containers[0].container_id is None


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ([None], None),
        ([2], 2),
        ([2, None, 3], 5),
        ([0], 0),
        ([None, 1], 1),
    ],
)
def test_gpu_request_sums_container_limits(limits: list[int | None], expected: int | None) -> None:
    names = [f"c{i}" for i in range(len(limits))]
    assert pod_record(make_pod("w", containers=names, gpu_limit=limits)).gpu_request == expected


def test_gpu_request_counts_an_init_container_as_the_scheduler_does() -> None:
    pod = make_pod("w", gpu_limit=1, init_containers=["warmup"])
    pod["spec"]["initContainers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "4"}
    assert pod_record(pod).gpu_request == 4


def test_gpu_request_falls_back_to_requests_and_ignores_garbage() -> None:
    pod = make_pod("w", containers=["a", "b"])
    pod["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": 3}}
    pod["spec"]["containers"][1]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    assert pod_record(pod).gpu_request == 3


def test_node_fields() -> None:
    node = make_node("gpu-1", "10.0.0.7", gpus=8, allocatable=7, labels={"pool": "a"})
    record = node_record(node)
    assert record.name == "gpu-1"
    assert record.uid == node["metadata"]["uid"]
    assert record.internal_ip == "10.0.0.7"
    assert (record.gpu_capacity, record.gpu_allocatable) == (8, 7)
    assert record.labels["pool"] == "a"
    assert record.resource_version == "1"


def test_node_without_gpus_or_internal_ip() -> None:
    record = node_record(make_node("cpu-1", None, gpus=None))
    assert record.internal_ip is None
    assert record.gpu_capacity is None and record.gpu_allocatable is None


def test_internal_ip_is_picked_among_addresses() -> None:
    node = make_node("n", "10.0.0.9")
    node["status"]["addresses"] = [
        {"type": "ExternalIP", "address": "1.2.3.4"},
        {"type": "Hostname", "address": "n"},
        {"type": "InternalIP", "address": "10.0.0.9"},
    ]
    assert node_record(node).internal_ip == "10.0.0.9"


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"metadata": None},
        {"metadata": {"namespace": "x"}},
        {"metadata": {"name": "no-uid", "namespace": "x"}},
    ],
)
def test_unreadable_pods_raise_parse_error(broken: dict[str, object]) -> None:
    with pytest.raises(ParseError):
        pod_record(broken)


def test_strings_are_copied_out_of_the_parsed_document() -> None:
    doc = orjson.loads(
        orjson.dumps(make_pod("a-rather-long-pod-name-0123456789", "team-x", "node-12"))
    )
    record = pod_record(doc)
    meta = doc["metadata"]
    assert record.name == meta["name"] and record.name is not meta["name"]
    assert record.uid is not meta["uid"]
    assert record.namespace is not meta["namespace"]
    assert record.phase is not doc["status"]["phase"]


def test_repeated_strings_and_identical_labels_are_shared() -> None:
    labels = {"app": "job-1", "pod-template-hash": "abc"}
    first = pod_record(orjson.loads(orjson.dumps(make_pod("w-1", "team", "node-1", labels=labels))))
    second = pod_record(
        orjson.loads(orjson.dumps(make_pod("w-2", "team", "node-1", labels=labels)))
    )
    assert first.namespace is second.namespace
    assert first.node_name is second.node_name
    assert first.containers[0].image is second.containers[0].image
    assert first.labels is second.labels
    assert first.name is not second.name


def test_records_do_not_alias_the_input() -> None:
    pod = make_pod("w", labels={"app": "x"})
    before = copy.deepcopy(pod)
    record = pod_record(pod)
    pod["metadata"]["labels"]["app"] = "changed"
    assert record.labels == {"app": "x"}
    assert before["metadata"]["name"] == record.name
