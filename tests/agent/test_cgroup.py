"""The cgroup parser on every path layout kubelet and the runtimes produce, and on garbage."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node_resolver.cgroup import parse_cgroup, parse_cgroup_path
from node_resolver.models import ContainerRef

CID = "3f1c2a9b8e7d6c5b4a3928170f6e5d4c3b2a19087f6e5d4c3b2a190817263544"
INNER = "a" * 63 + "b"
OUTER = "0123456789abcdef" * 4
POD = "6a1f4b1e-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
POD_SYSTEMD = POD.replace("-", "_")
OTHER_POD = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
STATIC_POD = "d1f4a2b3c4d5e6f708192a3b4c5d6e7f"

V1_CONTROLLERS = [
    "12:hugetlb",
    "11:cpuset",
    "10:net_cls,net_prio",
    "9:perf_event",
    "8:memory",
    "7:pids",
    "6:blkio",
    "5:cpu,cpuacct",
    "4:devices",
    "3:freezer",
    "2:rdma",
    "1:name=systemd",
]


def v1(path: str, *, unified: str = "/") -> str:
    """A cgroup v1 file (every controller at ``path``) as on a hybrid host."""
    lines = [f"{controllers}:{path}" for controllers in V1_CONTROLLERS]
    return "\n".join([*lines, f"0::{unified}"]) + "\n"


def v2(path: str) -> str:
    """A cgroup v2 file."""
    return f"0::{path}\n"


CASES: list[tuple[str, str, ContainerRef | None]] = [
    (
        "cgroupfs burstable",
        f"/kubepods/burstable/pod{POD}/{CID}",
        ContainerRef(CID, "", POD),
    ),
    (
        "cgroupfs besteffort",
        f"/kubepods/besteffort/pod{POD}/{CID}",
        ContainerRef(CID, "", POD),
    ),
    (
        "cgroupfs guaranteed (no QoS segment)",
        f"/kubepods/pod{POD}/{CID}",
        ContainerRef(CID, "", POD),
    ),
    (
        "cgroupfs static pod (hash UID)",
        f"/kubepods/burstable/pod{STATIC_POD}/{CID}",
        ContainerRef(CID, "", STATIC_POD),
    ),
    (
        "systemd containerd burstable",
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_SYSTEMD}.slice/cri-containerd-{CID}.scope",
        ContainerRef(CID, "containerd", POD),
    ),
    (
        "systemd containerd guaranteed",
        f"/kubepods.slice/kubepods-pod{POD_SYSTEMD}.slice/cri-containerd-{CID}.scope",
        ContainerRef(CID, "containerd", POD),
    ),
    (
        "systemd besteffort",
        "/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{POD_SYSTEMD}.slice/cri-containerd-{CID}.scope",
        ContainerRef(CID, "containerd", POD),
    ),
    (
        "CRI-O systemd",
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_SYSTEMD}.slice/crio-{CID}.scope",
        ContainerRef(CID, "cri-o", POD),
    ),
    (
        "CRI-O systemd v2 with a nested 'container' cgroup",
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_SYSTEMD}.slice/crio-{CID}.scope/container",
        ContainerRef(CID, "cri-o", POD),
    ),
    (
        "CRI-O cgroupfs",
        f"/kubepods/burstable/pod{POD}/crio-{CID}",
        ContainerRef(CID, "cri-o", POD),
    ),
    (
        "Docker systemd (kubelet + cri-dockerd)",
        "/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{POD_SYSTEMD}.slice/docker-{CID}.scope",
        ContainerRef(CID, "docker", POD),
    ),
    ("plain Docker systemd", f"/system.slice/docker-{CID}.scope", ContainerRef(CID, "docker")),
    ("plain Docker cgroupfs", f"/docker/{CID}", ContainerRef(CID, "docker")),
    (
        "Podman",
        f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope",
        ContainerRef(CID, "podman"),
    ),
    (
        "Podman under a pod slice",
        f"/machine.slice/machine-libpod_pod_{OUTER}.slice/libpod-{CID}.scope/container",
        ContainerRef(CID, "podman"),
    ),
    (
        "old containerd systemd-style path taken literally",
        f"/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_SYSTEMD}.slice:cri-containerd:{CID}",
        ContainerRef(CID, "containerd", POD),
    ),
    (
        "old containerd form, guaranteed",
        f"/kubepods-pod{POD_SYSTEMD}.slice:cri-containerd:{CID}",
        ContainerRef(CID, "containerd", POD),
    ),
    (
        "kind nesting (systemd inside a node container)",
        "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{POD_SYSTEMD}.slice/cri-containerd-{CID}.scope",
        ContainerRef(CID, "containerd", POD),
    ),
    (
        "private cgroup namespace, relative path",
        f"/../../kubepods-besteffort-pod{POD_SYSTEMD}.slice/cri-containerd-{CID}.scope",
        ContainerRef(CID, "containerd", POD),
    ),
    (
        "private cgroup namespace, cgroupfs",
        f"/../../../burstable/pod{POD}/{CID}",
        ContainerRef(CID, "", POD),
    ),
    (
        "kind on cgroupfs: node container wraps the pod's container, innermost wins",
        f"/docker/{OUTER}/kubepods/burstable/pod{POD}/{INNER}",
        ContainerRef(INNER, "", POD),
    ),
    (
        "container nested in a container: the enclosing pod owns it",
        f"/kubepods/pod{POD}/{OUTER}/docker/{INNER}",
        ContainerRef(INNER, "docker", POD),
    ),
    (
        "another pod's container ID nested in a pod's container: still that pod's process",
        f"/kubepods/burstable/pod{POD}/{OUTER}/{INNER}",
        ContainerRef(INNER, "", POD),
    ),
    (
        "a pod cgroup nested inside another pod: the outermost pod, kubelet's, owns it",
        f"/kubepods/pod{POD}/{OUTER}/kubepods/pod{OTHER_POD}/{INNER}",
        ContainerRef(INNER, "", POD),
    ),
    ("host process at the root", "/", None),
    ("host systemd service", "/system.slice/containerd.service", None),
    ("user session", "/user.slice/user-1000.slice/session-3.scope", None),
    ("pod cgroup without a container", f"/kubepods/burstable/pod{POD}", None),
    ("CRI-O conmon is not the container", f"/machine.slice/crio-conmon-{CID}.scope", None),
    ("ID too short", f"/kubepods/burstable/pod{POD}/{CID[:-1]}", None),
    ("ID in upper case is not kubelet's", f"/kubepods/burstable/pod{POD}/{CID.upper()}", None),
]


@pytest.mark.parametrize(("path", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_path_forms_v2(path: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup(v2(path)) == expected


@pytest.mark.parametrize(("path", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_path_forms_v1_every_controller(path: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup(v1(path)) == expected


def test_v1_hybrid_uses_controller_lines_when_unified_is_root() -> None:
    text = v1(f"/kubepods/burstable/pod{POD}/{CID}", unified="/")
    assert parse_cgroup(text) == ContainerRef(CID, "", POD)


def test_v1_prefers_a_line_that_names_the_pod() -> None:
    # Some hosts leave the name=systemd hierarchy at a path without the pod.
    text = f"1:name=systemd:/system.slice/docker-{CID}.scope\n" + v1(
        f"/kubepods/pod{POD}/{CID}"
    ).replace(f"1:name=systemd:/kubepods/pod{POD}/{CID}\n", "")
    assert parse_cgroup(text) == ContainerRef(CID, "", POD)


def test_v1_the_most_deeply_nested_container_wins_across_lines() -> None:
    # One hierarchy names the pod and the outer container, another a container nested inside.
    text = "\n".join(
        [
            f"5:cpu,cpuacct:/kubepods/burstable/pod{POD}/{OUTER}",
            f"4:memory:/docker/{OUTER}/system.slice/docker-{INNER}.scope",
            "0::/",
        ]
    )
    # The pod named on the other line encloses the outer container, and so this one.
    assert parse_cgroup(text) == ContainerRef(INNER, "docker", POD)


def test_v1_lines_naming_different_pods_leave_the_process_unplaced() -> None:
    text = "\n".join(
        [
            f"5:cpu:/kubepods/pod{POD}/{OUTER}",
            f"4:memory:/kubepods/pod{OTHER_POD}/{INNER}",
        ]
    )
    assert parse_cgroup(text) is None


def test_v1_a_nested_container_keeps_the_pod_named_on_its_own_line() -> None:
    text = "\n".join(
        [
            f"5:cpu:/kubepods/pod{POD}/{OUTER}",
            f"4:memory:/docker/{OUTER}",
            f"3:pids:/docker/{OUTER}/kubepods/pod{POD}/{INNER}",
        ]
    )
    assert parse_cgroup(text) == ContainerRef(INNER, "", POD)


def test_v1_only_one_controller_places_the_process() -> None:
    text = "\n".join(
        [
            "4:memory:/",
            f"3:pids:/kubepods/besteffort/pod{POD}/{CID}",
            "2:cpu,cpuacct:/",
        ]
    )
    assert parse_cgroup(text) == ContainerRef(CID, "", POD)


def test_empty_and_missing_trailing_newline() -> None:
    assert parse_cgroup("") is None
    assert parse_cgroup("\n\n") is None
    assert parse_cgroup(f"0::/kubepods/pod{POD}/{CID}") == ContainerRef(CID, "", POD)


def test_malformed_lines_are_skipped_not_fatal() -> None:
    text = "\n".join(
        [
            "garbage",
            "::",
            "7:pids",
            f"x:y:/kubepods/pod{POD}/{CID}",
        ]
    )
    assert parse_cgroup(text) == ContainerRef(CID, "", POD)


def test_systemd_pod_uid_underscores_become_dashes() -> None:
    ref = parse_cgroup_path(
        f"/kubepods.slice/kubepods-pod{POD_SYSTEMD}.slice/cri-containerd-{CID}.scope"
    )
    assert ref is not None
    assert ref.pod_uid == POD
    assert "_" not in ref.pod_uid


_HEX64 = re.compile(r"[0-9a-f]{64}")

_segment = st.one_of(
    st.sampled_from(
        [
            "kubepods",
            "kubepods.slice",
            "burstable",
            f"pod{POD}",
            f"kubepods-pod{POD_SYSTEMD}.slice",
            f"cri-containerd-{CID}.scope",
            f"crio-{CID}",
            f"slice:cri-containerd:{CID}",
            CID,
            "..",
            "",
            ":",
            "docker",
        ]
    ),
    st.text(max_size=80),
)


@given(st.text(max_size=2000))
def test_random_text_never_raises(text: str) -> None:
    ref = parse_cgroup(text)
    assert ref is None or _HEX64.fullmatch(ref.container_id)


@given(st.lists(_segment, max_size=12), st.sampled_from(["0::", "3:pids:", "1:name=systemd:", ""]))
@settings(max_examples=300)
def test_near_miss_paths_never_raise_and_ids_are_hex64(segments: list[str], prefix: str) -> None:
    ref = parse_cgroup(prefix + "/".join(segments) + "\n")
    if ref is not None:
        assert _HEX64.fullmatch(ref.container_id)
        assert ref.runtime in ("", "containerd", "cri-o", "docker", "podman")
        assert ref.pod_uid is None or "_" not in ref.pod_uid


@given(st.binary(max_size=1000))
def test_arbitrary_bytes_decoded_never_raise(raw: bytes) -> None:
    ref = parse_cgroup(raw.decode("utf-8", errors="replace"))
    assert ref is None or _HEX64.fullmatch(ref.container_id)


def test_hostile_long_lines_are_handled() -> None:
    long_dashes = "0::/" + "-" * 20000 + "pod" + "/" + CID
    assert parse_cgroup(long_dashes) == ContainerRef(CID, "")
    deep = "0::" + "/.." * 10000 + f"/kubepods/pod{POD}/{CID}"
    assert parse_cgroup(deep) == ContainerRef(CID, "", POD)
