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
(``0::/../../kubepods-...``). When several containers nest, the innermost wins;
across the lines of a cgroup v1 file, the most deeply nested container wins.

The pod is the outermost one the path names, and it stays with every
container nested below it. kubelet makes the pod's cgroup, and a process
inside it (a privileged pod, or one with a writable cgroupfs) can create
cgroups only below it: a path such as ``pod<A>/<A's container>/<B's
container ID>`` is pod A's process whatever ID it borrows, and the server
never reports it as B's (see ``graph_schema.types.join_pod``). Lines of a v1
file that name different pods contradict each other: the process is left
unplaced.

A bare ``<id>`` segment (the cgroupfs driver under kubelet) does not say which
runtime made it, so its runtime is ``""``; only ``/docker/<id>`` implies Docker.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .models import ContainerRef

__all__ = ["clear_cache", "parse_cgroup", "parse_cgroup_path"]

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
    best: tuple[int, ContainerRef] | None = None
    pods: set[str] = set()
    # Lines look like "<hierarchy>:<controllers>:<path>"; the path itself may hold colons.
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = _innermost(parts[2])
        if found is None:
            continue
        if found[1].pod_uid is not None:
            pods.add(found[1].pod_uid)
        if best is None or found[0] > best[0]:
            best = found
        elif found[0] == best[0] and best[1].pod_uid is None and found[1].pod_uid is not None:
            # Equally deep: some hosts leave a v1 hierarchy at a path without the pod.
            best = found
    if best is None or len(pods) > 1:
        return None  # no container, or hierarchies naming different pods
    ref = best[1]
    if ref.pod_uid is None and pods:
        # The pod named on another line owns this process too.
        ref = ContainerRef(ref.container_id, ref.runtime, next(iter(pods)))
    return ref


def parse_cgroup_path(path: str) -> ContainerRef | None:
    """Return the innermost container (and its pod) named by one cgroup path, or None."""
    found = _innermost(path)
    return found[1] if found else None


def clear_cache() -> None:
    """Forget every parsed path; benchmarks use it to time parsing from cold."""
    _innermost.cache_clear()


@lru_cache(maxsize=4096)
def _innermost(path: str) -> tuple[int, ContainerRef] | None:
    """The innermost container on ``path`` and how many containers nest down to it."""
    found: ContainerRef | None = None
    depth = 0
    pod: str | None = None
    parent = ""
    for segment in path.split("/"):
        if not segment or segment in (".", ".."):
            continue
        head, sep, tail = segment.partition(":")
        pod_match = _POD.fullmatch(head)
        if pod_match is not None and pod is None:
            # The outermost pod: one nested below it cannot take its processes.
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
            depth += 1
        parent = segment
    return (depth, found) if found is not None else None
