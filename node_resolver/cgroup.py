"""Where a process runs, read from the text of its ``/proc/<pid>/cgroup`` file.

Container runtimes put each container in a cgroup whose path names the
container's 64-hex ID, and kubelet nests those under a per-pod cgroup that
names the pod UID. The layout differs by cgroup driver and runtime::

    cgroupfs   /kubepods/burstable/pod<uid>/<id>         (Guaranteed: /kubepods/pod<uid>/<id>)
    systemd    /kubepods.slice/kubepods-burstable.slice/
                 kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
    CRI-O      .../crio-<id>.scope        Docker  .../docker-<id>.scope or /docker/<id>
    Podman     .../libpod-<id>.scope      old containerd  ...pod<uid>.slice:cri-containerd:<id>

Paths may be nested (kind runs kubelet inside a container: ``kubelet.slice/
kubelet-kubepods.slice/...``) and relative to a private cgroup namespace
(``0::/../../kubepods-...``). When several containers nest, the innermost wins.

A bare ``<id>`` segment (the cgroupfs driver under kubelet) does not say which
runtime made it, so its runtime is ``""``; only ``/docker/<id>`` implies Docker.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .models import ContainerRef

__all__ = ["parse_cgroup", "parse_cgroup_path"]

_HEX64 = r"[0-9a-f]{64}"

# "<prefix>-<id>.scope" (systemd driver) or "<prefix>-<id>" (cgroupfs driver).
_SCOPED = re.compile(rf"(cri-containerd|crio|docker|libpod)-({_HEX64})(?:\.scope)?")
# "<slice>:<prefix>:<id>": containerd's systemd-style cgroupsPath taken literally.
_COLON = re.compile(rf"(cri-containerd|crio|docker|libpod):({_HEX64})")
_BARE = re.compile(_HEX64)
# "pod<uid>" (cgroupfs) or "...-pod<uid_with_underscores>.slice" (systemd). Pod UIDs are
# UUIDs, except static pods, whose UID is a 32-hex config hash.
_POD = re.compile(
    r"(?:[A-Za-z0-9_.-]*-)?pod"
    r"([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
    r"(?:\.slice)?"
)

_RUNTIMES = {
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "docker": "docker",
    "libpod": "podman",
}


def parse_cgroup(text: str) -> ContainerRef | None:
    """Return the container (and pod) named by a ``/proc/<pid>/cgroup`` file, or None."""
    best: ContainerRef | None = None
    # Lines look like "<hierarchy>:<controllers>:<path>"; the path itself may hold colons.
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ref = parse_cgroup_path(parts[2])
        if ref is None:
            continue
        if ref.pod_uid is not None:
            return ref
        if best is None:
            best = ref
    return best


@lru_cache(maxsize=4096)
def parse_cgroup_path(path: str) -> ContainerRef | None:
    """Return the innermost container (and its pod) named by one cgroup path, or None."""
    found: ContainerRef | None = None
    pod: str | None = None
    parent = ""
    for segment in path.split("/"):
        if not segment or segment in (".", ".."):
            continue
        head, sep, tail = segment.partition(":")
        pod_match = _POD.fullmatch(head)
        if pod_match is not None:
            pod = pod_match.group(1).replace("_", "-")
        ref: ContainerRef | None = None
        if sep:
            colon = _COLON.fullmatch(tail)
            if colon is not None:
                ref = ContainerRef(colon.group(2), _RUNTIMES[colon.group(1)], pod)
        elif (scoped := _SCOPED.fullmatch(segment)) is not None:
            ref = ContainerRef(scoped.group(2), _RUNTIMES[scoped.group(1)], pod)
        elif _BARE.fullmatch(segment) is not None:
            ref = ContainerRef(segment, "docker" if parent == "docker" else "", pod)
        if ref is not None:
            found = ref
            # A pod seen outside this container does not own containers nested inside it.
            pod = None
        parent = segment
    return found
