"""View models: GraphQL answers turned into GPU, pod and node rows, filtered and sorted."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import TopError
from .flags import DEFAULT_SORT
from .marks import (
    ALLOCATION_UNKNOWN,
    EVENTS,
    IDLE,
    MIG,
    NOT_ALLOCATED,
    UNREQUESTED,
    Mark,
    ordered,
)

# How the server names a node whose agent did not answer, in a subscription tick's errors
# (graph_schema's AgentUnavailableError and NodeSampleError messages), and what of the
# message the down line keeps before the reason (it names the node and says "agent down").
# An agent's message goes on after the node's name with "unavailable: REASON" or with
# where it was asked ("unreachable at ADDR: REASON"), which the line keeps.
_DOWN_MESSAGES = (
    (re.compile(r"^agent on node '(?P<node>[^']+)' (?:unavailable: )?(?P<reason>.*)$", re.S), ""),
    (
        re.compile(r"^GPU sampling failed on node '(?P<node>[^']+)': (?P<reason>.*)$", re.S),
        "GPU sampling failed: ",
    ),
)


# PodRef, ProcessRow and GpuRow are built once per process of the answer (64,000 objects
# at 1,000 nodes) and never changed: not frozen, because a frozen dataclass's __init__
# (object.__setattr__ per field) took several times as long as a plain one's.
@dataclass(slots=True)
class PodRef:
    """A pod as the GPU views need it."""

    uid: str
    namespace: str
    name: str
    node: str | None
    gpu_request: int | None

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class ProcessRow:
    """One process on one GPU."""

    pid: int
    name: str | None
    pod: PodRef | None
    container: str | None
    memory_bytes: int | None
    sm_percent: int | None
    unrequested: bool = False
    # The allocation verdict: ALLOCATED, NOT_ALLOCATED, NO_POD or UNKNOWN (None: not asked).
    allocation: str | None = None


@dataclass(slots=True)
class GpuRow:
    """One GPU and its processes."""

    node: str
    index: int
    uuid: str
    model: str | None
    utilization: int | None
    memory_used: int | None
    memory_total: int | None
    temperature: int | None
    error: str | None
    processes: tuple[ProcessRow, ...]
    # In MIG mode: its processes run on MIG devices.
    mig: bool = False
    # The pods holding it (or a MIG device, replica of it) IDLE or UNUSED.
    idle: tuple[PodRef, ...] = ()
    # It had a health event in the EVENTS flag's window.
    events: bool = False

    @property
    def pods(self) -> list[str]:
        """The distinct pods on this GPU, as ``namespace/name``: those of its processes, then
        those holding it idle."""
        running = [p.pod.key for p in self.processes if p.pod is not None]
        return list(dict.fromkeys([*running, *(h.key for h in self.idle)]))

    @property
    def marks(self) -> tuple[Mark, ...]:
        """Its flags: MIG, EVENTS, and those of its processes."""
        mig = self.mig
        found = [mark for p in self.processes for mark in process_marks(p, mig)]
        if self.idle:
            found.append(IDLE)
        if self.events:
            found.append(EVENTS)
        return ordered([*found, MIG] if mig else found)


# The allocation uses that flag IDLE: the holder leaves the device idle.
_IDLE_USES = frozenset({"IDLE", "UNUSED"})


@functools.lru_cache(maxsize=64)
def _marks(unrequested: bool, allocation: str | None, in_pod: bool, mig: bool) -> tuple[Mark, ...]:
    found = [UNREQUESTED] if unrequested else []
    if allocation == "NOT_ALLOCATED":
        found.append(NOT_ALLOCATED)
    # A process in no pod was given nothing to judge: its UNKNOWN says nothing.
    elif allocation == "UNKNOWN" and in_pod:
        found.append(ALLOCATION_UNKNOWN)
    if mig:
        found.append(MIG)
    return tuple(found)


def process_marks(process: ProcessRow, mig: bool) -> tuple[Mark, ...]:
    """A process's flags, on a GPU in MIG mode or not (in MARKS' order)."""
    # A handful of combinations, for 32,000 processes at 1,000 nodes: cached.
    return _marks(process.unrequested, process.allocation, process.pod is not None, mig)


@dataclass(frozen=True, slots=True)
class DownNode:
    """A node whose agent did not answer, and why (the reason alone, without the node's name)."""

    node: str
    reason: str


def down_node(node: str, message: str) -> DownNode:
    """The DownNode of an agent error ``message``, its "agent on node 'x' unavailable" cut off.

    The line that shows it already names the node and says the agent is down.
    """
    for pattern, kept in _DOWN_MESSAGES:
        match = pattern.match(message)
        if match and match["node"] == node:
            return DownNode(node, kept + match["reason"])
    return DownNode(node, message)


@dataclass(frozen=True, slots=True)
class PodRow:
    """One pod's GPU use; None where it is not known (its node's agent is down)."""

    namespace: str
    name: str
    node: str | None
    gpus_requested: int
    gpus_used: int | None
    memory_bytes: int | None
    sm_percent: int | None
    # Its flags; None where they are not known (its node's agent is down).
    marks: tuple[Mark, ...] | None = ()

    @property
    def unrequested(self) -> bool | None:
        """It uses more GPUs than it requested (a pod requesting none, using one, included)."""
        if self.gpus_used is None:
            return None
        return self.gpus_used > self.gpus_requested


@dataclass(frozen=True, slots=True)
class NamespaceRow:
    """One namespace's pods, summed: the pods whose use is known, and how many are not."""

    namespace: str
    pods: int
    # Pods on a node whose agent is down: counted in ``pods`` and ``gpus_requested``,
    # not in the sums of what is used, which they would make unknown for the whole
    # namespace (one dead agent must not blank a team's row).
    pods_unknown: int
    gpus_requested: int
    gpus_used: int | None
    memory_bytes: int | None
    sm_percent: int | None
    # Its pods' flags, those whose flags are known.
    marks: tuple[Mark, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node's GPUs, summed; None where it is not known (its agent is down)."""

    name: str
    down_reason: str | None
    gpus: int | None
    utilization: int | None
    memory_used: int | None
    memory_total: int | None
    max_temperature: int | None
    pods: int | None
    processes: int | None
    # Its flags: those of its GPUs; None where they are not known (its agent is down).
    marks: tuple[Mark, ...] | None = ()

    @classmethod
    def down(cls, node: DownNode) -> NodeRow:
        """The row of a node whose agent is down: nothing about its GPUs is known."""
        return cls(node.node, node.reason, None, None, None, None, None, None, None, None)


@dataclass(frozen=True, slots=True)
class Filters:
    """What the user asked to see."""

    namespace: str | None = None
    node: str | None = None
    selector: str | None = None
    sort_by: str = DEFAULT_SORT

    @property
    def by_pod(self) -> bool:
        """Whether only some pods' processes are wanted."""
        return self.namespace is not None or self.selector is not None


@dataclass(frozen=True, slots=True)
class EventHits:
    """What had GPU health events in the EVENTS flag's window, from one ``gpuEvents`` read.

    ``down`` maps the nodes whose agent could not answer it to the server's
    message; ``errors`` are the rest of what it could not read (a node whose log
    is off, the query itself failing), so that flags left out are said to be.
    """

    gpus: frozenset[str] = frozenset()
    pods: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    down: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = ()

    def beside(self, down: Iterable[DownNode]) -> EventHits:
        """These hits shown beside a view whose down nodes are ``down``: a node the view
        already says is down is not said again; another node that could not answer is an
        error (its events are not known)."""
        known = {d.node for d in down}
        missed = tuple(message for node, message in self.down if node not in known)
        return dataclasses.replace(self, down=(), errors=(*missed, *self.errors))


NO_EVENTS = EventHits()


@dataclass(slots=True)
class Snapshot:
    """Everything one answer (a query, or a subscription tick) said about the cluster."""

    gpus: list[GpuRow]
    down: list[DownNode]
    # The pods the filters select; None in a subscription tick, which carries no pod list.
    pods: list[PodRef] | None = None
    # The GPUs, pods and nodes with health events (``EventHits.beside`` this snapshot).
    events: EventHits = NO_EVENTS
    # The pods holding an allocation IDLE or UNUSED (``idle_from_query``, for the pod views):
    # a tenant does not see a GPU it runs nothing on, so ``GpuRow.idle`` misses it.
    idle: tuple[PodRef, ...] = ()


def _pod(data: Mapping[str, Any] | None, node: str | None = None) -> PodRef | None:
    """The pod of ``data``; on ``node`` where it does not say (a process's pod runs on its GPU's
    node, which the query does not ask again for each process)."""
    if data is None:
        return None
    return PodRef(
        uid=str(data["uid"]),
        namespace=data["namespace"],
        name=data["name"],
        node=data.get("nodeName", node),
        gpu_request=data.get("gpuRequest"),
    )


def gpu_rows(gpus: Iterable[Mapping[str, Any]]) -> list[GpuRow]:
    """GpuRows from ``TopGpu`` fragments."""
    # A loop with positional arguments: 32,000 processes at 1,000 nodes.
    rows = []
    for gpu in gpus:
        node = gpu["node"]["name"]
        processes = []
        for p in gpu.get("processes") or ():
            get = p.get
            container = get("container")
            processes.append(
                ProcessRow(
                    p["pid"],
                    get("name"),
                    _pod(get("pod"), node),
                    container.get("name") if container else None,
                    get("usedMemoryBytes"),
                    get("smUtilization"),
                    False,
                    get("allocation"),
                )
            )
        get = gpu.get
        idle = tuple(
            pod
            for a in get("allocations") or ()
            if a.get("use") in _IDLE_USES and (pod := _pod(a.get("pod"), node)) is not None
        )
        rows.append(
            GpuRow(
                node,
                gpu["index"],
                gpu["uuid"],
                get("name"),
                get("utilizationGpu"),
                get("memoryUsedBytes"),
                get("memoryTotalBytes"),
                get("temperatureC"),
                get("error"),
                tuple(processes),
                bool(get("migEnabled")),
                idle,
            )
        )
    return rows


def down_from_errors(errors: Sequence[Mapping[str, Any]]) -> tuple[list[DownNode], list[str]]:
    """Down nodes named in GraphQL errors, and the messages of any other errors."""
    down, other = [], []
    for error in errors:
        message = str(error.get("message", ""))
        for pattern, _ in _DOWN_MESSAGES:
            match = pattern.match(message)
            if match:
                down.append(down_node(match["node"], message))
                break
        else:
            other.append(message)
    return down, other


class NotFoundError(TopError):
    """The server knows no node by the name asked for (or none the caller may see)."""


def _raise_errors(messages: Sequence[str], errors: Sequence[Mapping[str, Any]]) -> None:
    for error in errors:
        code = (error.get("extensions") or {}).get("code")
        if code == "NOT_READY":
            raise TopError(f"server not ready: {error.get('message')}")
        if code == "NOT_FOUND":
            raise NotFoundError(str(error.get("message")))
    if messages:
        raise TopError(f"server error: {messages[0]}")


@contextlib.contextmanager
def _expected_shape() -> Iterator[None]:
    """An answer of another shape (not gpugraph, another version) as one TopError."""
    try:
        yield
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise TopError(
            f"the server's answer is not the shape gpugraph top expects "
            f"({type(exc).__name__}: {exc}): is it a gpugraph server of this version?"
        ) from None


def snapshot_from_query(body: Mapping[str, Any]) -> Snapshot:
    """A Snapshot from the ``Top`` query's response body; TopError for errors it cannot show."""
    with _expected_shape():
        return _from_query(body)


def snapshot_from_tick(body: Mapping[str, Any]) -> Snapshot:
    """A Snapshot from one ``gpuUpdates`` tick."""
    with _expected_shape():
        return _from_tick(body)


def _from_query(body: Mapping[str, Any]) -> Snapshot:
    errors = body.get("errors") or []
    data = body.get("data")
    down_named, other = down_from_errors(errors)
    if not data or other:
        _raise_errors(other or [str(e.get("message")) for e in errors] or ["no data"], errors)
    assert data is not None
    down = [
        down_node(n["name"], n["agent"]["error"] or "not reachable")
        for n in data.get("nodes") or ()
        if not n["agent"]["reachable"]
    ]
    known = {d.node for d in down}
    down.extend(d for d in down_named if d.node not in known)
    # Not asked for (the view does not need it): None, not "no pods".
    pods = None
    if "pods" in data:
        pods = [p for p in (_pod(p) for p in data["pods"] or ()) if p is not None]
    return Snapshot(gpus=gpu_rows(data.get("gpus") or ()), down=down, pods=pods)


def idle_from_query(body: Mapping[str, Any]) -> tuple[PodRef, ...]:
    """The pods of a ``TopIdle`` answer; none where it has none to give (the server
    refused it as too costly, or is older than the field): the GPUs' own allocations
    still flag what the caller sees. Its nodes that did not answer are Top's to say."""
    with _expected_shape():
        data = body.get("data") or {}
        return tuple(
            pod
            for a in data.get("idleGpuAllocations") or ()
            if (pod := _pod(a.get("pod"), a.get("nodeName"))) is not None
        )


def _from_tick(body: Mapping[str, Any]) -> Snapshot:
    errors = body.get("errors") or []
    down, other = down_from_errors(errors)
    data = body.get("data")
    if not data or other:
        _raise_errors(other or ["no data"], errors)
    assert data is not None
    return Snapshot(gpus=gpu_rows(data.get("gpuUpdates") or ()), down=down)


def _gpus_per_pod(gpus: Iterable[GpuRow]) -> dict[str, int]:
    """How many GPUs each pod (by uid) has processes on."""
    used: dict[str, set[str]] = {}
    for gpu in gpus:
        for process in gpu.processes:
            if process.pod is not None:
                used.setdefault(process.pod.uid, set()).add(gpu.uuid)
    return {uid: len(uuids) for uid, uuids in used.items()}


def _flagged(processes: tuple[ProcessRow, ...], used: Mapping[str, int]) -> tuple[ProcessRow, ...]:
    """``processes`` each flagged unrequested or not; the same objects where nothing changes.

    Most processes are as the answer built them: rebuilding all 32,000 of a
    1,000-node cluster only to copy them cost a fifth of the rows' time.
    """
    flags = [
        p.pod is not None and used.get(p.pod.uid, 0) > (p.pod.gpu_request or 0) for p in processes
    ]
    if all(flag == p.unrequested for flag, p in zip(flags, processes, strict=True)):
        return processes
    return tuple(
        p if flag == p.unrequested else dataclasses.replace(p, unrequested=flag)
        for flag, p in zip(flags, processes, strict=True)
    )


def apply(snapshot: Snapshot, filters: Filters) -> Snapshot:
    """The snapshot with processes flagged as unrequested and cut down to the filters."""
    used = _gpus_per_pod(snapshot.gpus)
    selected = None if snapshot.pods is None else {p.uid for p in snapshot.pods}

    def wanted(pod: PodRef | None) -> bool:
        if pod is None:
            return False
        if filters.namespace is not None and pod.namespace != filters.namespace:
            return False
        return selected is None or pod.uid in selected

    gpus = []
    for gpu in snapshot.gpus:
        if filters.node is not None and gpu.node != filters.node:
            continue
        kept, idle, hit = gpu.processes, gpu.idle, gpu.uuid in snapshot.events.gpus
        if filters.by_pod:
            kept = tuple(p for p in kept if wanted(p.pod))
            # A pod that holds the GPU idle is on it too, with no process to show it by.
            idle = tuple(h for h in idle if wanted(h))
            if not kept and not idle:
                continue
        processes = _flagged(kept, used)
        if processes is not gpu.processes or idle is not gpu.idle or hit != gpu.events:
            gpu = dataclasses.replace(gpu, processes=processes, idle=idle, events=hit)
        gpus.append(gpu)
    down = [d for d in snapshot.down if filters.node is None or d.node == filters.node]
    if filters.by_pod and snapshot.pods is not None:
        # Only the nodes of the pods asked for: another tenant's down node says nothing here.
        hosts = {
            p.node
            for p in snapshot.pods
            if filters.namespace is None or p.namespace == filters.namespace
        }
        down = [d for d in down if d.node in hosts]
    idle = tuple(
        h for h in snapshot.idle if wanted(h) and (filters.node is None or h.node == filters.node)
    )
    return Snapshot(
        gpus=sort_gpus(gpus, filters.sort_by),
        down=down,
        pods=snapshot.pods,
        events=snapshot.events,
        idle=idle,
    )


def sort_gpus(gpus: list[GpuRow], sort_by: str) -> list[GpuRow]:
    """GPUs by node and index, or busiest first by memory or utilization."""
    gpus = sorted(gpus, key=lambda g: (g.node, g.index))
    if sort_by == "memory":
        gpus.sort(key=lambda g: busiest(g.memory_used))
    elif sort_by == "sm":
        gpus.sort(key=lambda g: busiest(g.utilization))
    return gpus


def busiest(value: int | None) -> tuple[bool, int]:
    """A sort key: the largest value first, the unknown ones last."""
    return (value is None, -(value or 0))


def _total(values: Iterable[int | None]) -> int | None:
    """The sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def pod_rows(snapshot: Snapshot, sort_by: str) -> list[PodRow]:
    """A row per pod that requests or uses GPUs, from an ``apply``-ed snapshot.

    A pod on a node whose agent is down has its use unknown (None), not zero.
    """
    pods: dict[str, PodRef] = {}
    for pod in snapshot.pods or ():
        if pod.gpu_request:
            pods[pod.uid] = pod
    processes: dict[str, list[ProcessRow]] = {}
    gpus: dict[str, set[str]] = {}
    # Each pod's flags, from its processes' on their GPUs: UNREQUESTED is the pod's own.
    flagged: dict[str, set[Mark]] = {}
    for gpu in snapshot.gpus:
        for process in gpu.processes:
            owner = process.pod
            if owner is None:
                continue
            pods.setdefault(owner.uid, owner)
            gpus.setdefault(owner.uid, set()).add(gpu.uuid)
            processes.setdefault(owner.uid, []).append(process)
            flagged.setdefault(owner.uid, set()).update(process_marks(process, gpu.mig))
        for holder in gpu.idle:
            # A pod holding a GPU it never runs on has no process to list it by.
            pods.setdefault(holder.uid, holder)
            flagged.setdefault(holder.uid, set()).add(IDLE)
    for holder in snapshot.idle:
        pods.setdefault(holder.uid, holder)
        flagged.setdefault(holder.uid, set()).add(IDLE)
    down = {d.node for d in snapshot.down}
    # The pods with a process on a GPU when it had an event.
    hit = snapshot.events.pods
    rows = []
    for uid, pod in pods.items():
        own = processes.get(uid, [])
        marks: tuple[Mark, ...] | None
        if pod.node in down:
            used, memory, sm, marks = None, None, None, None
        else:
            used = len(gpus.get(uid, ()))
            memory = _total(p.memory_bytes for p in own) if own else 0
            sm = _total(p.sm_percent for p in own) if own else 0
            found = flagged.get(uid, set()) - {UNREQUESTED}
            if used > (pod.gpu_request or 0):
                found.add(UNREQUESTED)
            if uid in hit:
                found.add(EVENTS)
            marks = ordered(found)
        rows.append(
            PodRow(
                namespace=pod.namespace,
                name=pod.name,
                node=pod.node,
                gpus_requested=pod.gpu_request or 0,
                gpus_used=used,
                memory_bytes=memory,
                sm_percent=sm,
                marks=marks,
            )
        )
    rows.sort(key=lambda r: (r.namespace, r.name))
    if sort_by == "memory":
        rows.sort(key=lambda r: busiest(r.memory_bytes))
    elif sort_by == "sm":
        rows.sort(key=lambda r: busiest(r.sm_percent))
    return rows


def node_rows(snapshot: Snapshot, sort_by: str) -> list[NodeRow]:
    """A row per node: its GPUs summed, or unknowns and why its agent is down."""
    by_node: dict[str, list[GpuRow]] = {}
    for gpu in snapshot.gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    rows = []
    events = snapshot.events.nodes
    for name, gpus in by_node.items():
        utils = [g.utilization for g in gpus if g.utilization is not None]
        temps = [g.temperature for g in gpus if g.temperature is not None]
        processes = [p for g in gpus for p in g.processes]
        rows.append(
            NodeRow(
                name=name,
                down_reason=None,
                gpus=len(gpus),
                utilization=round(sum(utils) / len(utils)) if utils else None,
                memory_used=_total(g.memory_used for g in gpus),
                memory_total=_total(g.memory_total for g in gpus),
                max_temperature=max(temps) if temps else None,
                pods=len({p.pod.uid for p in processes if p.pod is not None}),
                processes=len(processes),
                marks=ordered(
                    [
                        *(mark for g in gpus for mark in g.marks),
                        *([EVENTS] if name in events else ()),
                    ]
                ),
            )
        )
    rows.extend(NodeRow.down(d) for d in snapshot.down if d.node not in by_node)
    rows.sort(key=lambda r: r.name)
    if sort_by == "memory":
        rows.sort(key=lambda r: busiest(r.memory_used))
    elif sort_by == "sm":
        rows.sort(key=lambda r: busiest(r.utilization))
    return rows


def namespace_rows(snapshot: Snapshot, sort_by: str) -> list[NamespaceRow]:
    """A row per namespace with pods requesting or using GPUs: ``pod_rows`` summed.

    What the pods on a down node use is not known: the sums are of the other
    pods (None where no pod's use is known), and the row counts the ones left out.
    """
    by_namespace: dict[str, list[PodRow]] = {}
    for pod in pod_rows(snapshot, DEFAULT_SORT):
        by_namespace.setdefault(pod.namespace, []).append(pod)
    rows = []
    for namespace, pods in by_namespace.items():
        known = [p for p in pods if p.gpus_used is not None]
        rows.append(
            NamespaceRow(
                namespace=namespace,
                pods=len(pods),
                pods_unknown=len(pods) - len(known),
                gpus_requested=sum(p.gpus_requested for p in pods),
                gpus_used=_total(p.gpus_used for p in known),
                memory_bytes=_total(p.memory_bytes for p in known),
                sm_percent=_total(p.sm_percent for p in known),
                marks=ordered(mark for p in known for mark in p.marks or ()),
            )
        )
    rows.sort(key=lambda r: r.namespace)
    if sort_by == "memory":
        rows.sort(key=lambda r: busiest(r.memory_bytes))
    elif sort_by == "sm":
        rows.sort(key=lambda r: busiest(r.sm_percent))
    return rows
