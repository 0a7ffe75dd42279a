"""What a resolver may ask of its operation's context, as an interface.

``context.GraphContext`` implements it. The object types are typed against
this Protocol rather than the class, so that the layers run one way: the
types do not import the context that builds their objects. It is generic in
the GPU type for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from graphql import GraphQLError

from node_resolver.models import NodeSnapshot

from .interfaces import Cluster, HistorySource, Received, SnapshotSource
from .records import NodeRecord, PodRecord
from .scope import Scope

__all__ = ["Operation"]

GpuT = TypeVar("GpuT")


class Operation(Protocol[GpuT]):
    """One operation's view of the cluster, the agents and its own result budget."""

    @property
    def cluster(self) -> Cluster:
        """The Kubernetes cache."""
        ...

    @property
    def snapshots(self) -> SnapshotSource:
        """The agents' snapshots."""
        ...

    @property
    def history(self) -> HistorySource | None:
        """The agents' occupancy logs; None where the server cannot read them."""
        ...

    @property
    def partial_errors(self) -> list[GraphQLError]:
        """Errors for the parts of an aggregate list that could not be fetched."""
        ...

    @property
    def scope(self) -> Scope:
        """What the caller may see."""
        ...

    def sees_node(self, name: str) -> bool:
        """Whether the caller may see the node called ``name``."""
        ...

    def visible_nodes(self) -> list[NodeRecord]:
        """Every cached node the caller may see, sorted by name."""
        ...

    def visible_pods(self, records: Iterable[PodRecord]) -> Sequence[PodRecord]:
        """The pod records among ``records`` the caller may see."""
        ...

    def charge(self, items: int) -> None:
        """Count ``items`` more result objects; ResultBudgetError past the server's limit."""
        ...

    async def pace(self) -> None:
        """Let other requests run when this operation has held the loop long enough."""
        ...

    async def received(self, node_name: str) -> Received:
        """The node's snapshot as received, fetched at most once per operation per node."""
        ...

    async def snapshot(self, node_name: str) -> NodeSnapshot:
        """The node's snapshot, fetched at most once per operation per node."""
        ...

    async def gpus(self, node_name: str) -> list[GpuT]:
        """The node's GPUs as graph objects."""
        ...

    async def gpu(self, uuid: str) -> GpuT | None:
        """The GPU with this UUID on any node, or None."""
        ...
