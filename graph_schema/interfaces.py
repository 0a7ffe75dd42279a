"""What the resolvers need from the outside world, as interfaces.

The server wires in the real Kubernetes cache and agent pool; tests and
benchmarks can plug in anything with the same shape.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from node_resolver.gpu_events.records import EventPage, EventQuery
from node_resolver.history.records import HistoryPage, HistoryQuery, UsageQuery, UsageRow
from node_resolver.models import NodeSnapshot

from .records import NodeRecord, PodRecord, PodSizes


class Cluster(Protocol):
    """Read-only view of the Kubernetes cache."""

    @property
    def ready(self) -> bool:
        """True once the first full list of pods and nodes has landed."""
        ...

    @property
    def pod_count(self) -> int:
        """How many pods are cached."""
        ...

    @property
    def node_count(self) -> int:
        """How many nodes are cached."""
        ...

    def node(self, name: str) -> NodeRecord | None:
        """The node called ``name``, if cached."""
        ...

    def nodes(self) -> Sequence[NodeRecord]:
        """Every cached node, sorted by name."""
        ...

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        """The pod ``namespace/name``, if cached."""
        ...

    def pod_by_uid(self, uid: str) -> PodRecord | None:
        """The pod with this UID, if cached."""
        ...

    def pod_by_container_id(self, container_id: str) -> PodRecord | None:
        """The pod owning this (prefix-stripped) container ID, if cached."""
        ...

    def pods(
        self, namespace: str | None = None, node_name: str | None = None
    ) -> Sequence[PodRecord]:
        """Cached pods, optionally filtered by namespace and node, sorted by namespace/name."""
        ...

    def pods_named(self, name: str) -> Sequence[PodRecord]:
        """Every cached pod called ``name``, across namespaces."""
        ...

    def pod_sizes(self) -> PodSizes:
        """How many pods are cached, the most on one node, the most containers in one."""
        ...


T = TypeVar("T")


class ClusterView(Cluster, Protocol):
    """The cache as one caller may see it (``visibility.VisibleCluster``): filtered already.

    Its ``Cluster`` methods hand out only what the caller may see; the rest
    answers the same rules for records the cache does not hold.
    """

    def node_names_now(self) -> list[str]:
        """The nodes the caller sees in the cache as it is now, by name (a view's ``nodes``
        stay as first worked out, for the length of one answer)."""
        ...

    def sees_namespace(self, namespace: str) -> bool:
        """Whether the caller may see pods (and their records) of ``namespace``."""
        ...

    def sees_owner(self, namespace: str | None) -> bool:
        """Whether the caller may see something owned by a pod of ``namespace`` (None: no pod)."""
        ...

    def split_owned(
        self, items: Iterable[T], namespace_of: Callable[[T], str | None]
    ) -> tuple[list[T], list[T]]:
        """``items`` split into those the caller may see and those withheld, by owning namespace."""
        ...

    def sees_shared(self, namespaces: Iterable[str]) -> bool:
        """Whether the caller may see what pods of ``namespaces`` shared (a GPU event)."""
        ...

    def owner_namespaces(self, namespace: str | None = None) -> frozenset[str] | None:
        """The namespaces whose records the caller may see (within ``namespace``); None: all."""
        ...

    def sees_node(self, name: str) -> bool:
        """Whether the caller may see the node called ``name``."""
        ...

    def history_nodes(self) -> list[str]:
        """Every node whose log may hold the caller's records, those it does not see too."""
        ...


@runtime_checkable
class StalenessSource(Protocol):
    """A cache that knows how long ago the API server last confirmed it."""

    def staleness_seconds(self, now: float | None = None) -> float | None:
        """Seconds since the API server last confirmed the cache; None before it has."""
        ...


class AgentUnavailableError(Exception):
    """A node's agent could not answer; the message names the node, where it was asked, and why.

    A person reads the sentence first ("agent on node 'n' unreachable at ADDR"); the
    transport's own text (gRPC's status and details), for whoever digs, comes after
    it. Without an address (the agent answered, but with an error) it reads "agent on
    node 'n' unavailable: REASON". Clients (``gpugraph top``, the map) strip "agent on
    node 'n' " (and "unavailable: ") and show the rest.
    """

    def __init__(self, node_name: str, reason: str, *, address: str | None = None) -> None:
        detail = (
            f"unavailable: {reason}" if address is None else f"unreachable at {address}: {reason}"
        )
        super().__init__(f"agent on node {node_name!r} {detail}")
        self.node_name = node_name
        self.reason = reason
        self.address = address


@dataclass(frozen=True, slots=True)
class Received:
    """A node's snapshot as a SnapshotSource hands it back: with how long the server has held it.

    A source may answer many readers with one snapshot for a while; its age
    then counts the time since the server received it, not only the agent's.
    """

    snapshot: NodeSnapshot
    held_seconds: float = 0.0

    @property
    def age_seconds(self) -> float:
        """How old the data is: its age when the server received it plus the time held since."""
        return self.snapshot.age_seconds + self.held_seconds


class SnapshotSource(Protocol):
    """Fetches a node's latest agent snapshot."""

    async def fetch(self, node_name: str) -> Received:
        """The node's snapshot and how long the server has held it, or AgentUnavailableError."""
        ...

    def agent_address(self, node_name: str) -> str | None:
        """Where the node's agent is expected (host:port), if discoverable."""
        ...


@runtime_checkable
class HistorySource(Protocol):
    """Reads the agents' occupancy logs (the server's agent pool implements it)."""

    async def history_page(
        self, node_name: str, query: HistoryQuery, page_token: str = ""
    ) -> HistoryPage:
        """One page of the node's log; AgentUnavailableError when its agent cannot answer."""
        ...

    async def usage(self, node_name: str, query: UsageQuery) -> tuple[list[UsageRow], str]:
        """The node's usage sums and its log's status; AgentUnavailableError on failure."""
        ...


@runtime_checkable
class EventSource(HistorySource, Protocol):
    """Reads the agents' GPU health events too (they live in the occupancy log)."""

    async def gpu_events(
        self, node_name: str, query: EventQuery, page_token: str = ""
    ) -> EventPage:
        """One page of the node's events; AgentUnavailableError when its agent cannot answer."""
        ...

    async def follow_gpu_events(
        self, node_name: str, query: EventQuery, *, wait_seconds: float
    ) -> EventPage:
        """The node's events after ``query.after_sequence``, waiting up to ``wait_seconds``."""
        ...


@runtime_checkable
class CallerBudgets(Protocol):
    """A history source that counts each caller's reads against a budget of its own."""

    def for_caller(self, caller: Hashable) -> HistorySource:
        """The logs as ``caller`` reads them: its reads wait their turn past its budget."""
        ...
