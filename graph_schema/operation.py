"""What a resolver may ask of its operation's context, as an interface.

``context.GraphContext`` implements it. The object types are typed against
this Protocol rather than the class, so that the layers run one way: the
types do not import the context that builds their objects. It is generic in
the GPU type for the same reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

from graphql import GraphQLError

from node_resolver.models import NodeSnapshot

from .allocation_join import AllocationRules, AllocationTable
from .interfaces import ClusterView, HistorySource, Received, SnapshotSource
from .scope import Viewer

__all__ = ["REMEMBER_WHILE", "Operation", "remember_while"]

GpuT = TypeVar("GpuT")

# The key of ``remember_while``'s metadata, which the compiled plan reads.
REMEMBER_WHILE = "gpugraph.remember_while"


def remember_while(version: Callable[[Any], Hashable]) -> dict[str, object]:
    """A strawberry field's metadata: its resolver reads its operation (``info``) only for
    what is the same for every caller, and its answer stands while ``version(info)`` does.

    The compiled plan remembers a selection per object only when nothing in it reads the
    operation (the caller's view, the result budget); one whose resolvers read it only so
    is remembered too, and rendered again once ``version`` moves.
    """
    return {REMEMBER_WHILE: version}


class Operation(Protocol[GpuT]):
    """One operation's view of the cluster, the agents and its own result budget."""

    @property
    def cluster(self) -> ClusterView:
        """The Kubernetes cache as the caller may see it: filtered already."""
        ...

    @property
    def viewer(self) -> Viewer | None:
        """The caller as the server authenticated it; None when it checks no tokens."""
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
    def history_reads(self) -> dict[Hashable, asyncio.Future[Any]]:
        """This operation's reads of history records in flight or done, by what they read,
        for fields that read the same records to share one read."""
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
        """The node's GPUs as the caller sees them (other tenants' processes withheld)."""
        ...

    async def pod_gpus(self, node_name: str, pod_uid: str) -> list[GpuT]:
        """The node's GPUs running a process of this pod, as the caller sees them."""
        ...

    async def gpu(self, uuid: str) -> GpuT | None:
        """The GPU with this UUID on any node the caller may see, or None."""
        ...

    @property
    def allocation_rules(self) -> AllocationRules:
        """The claims and GPU resource names the allocation join reads."""
        ...

    async def allocations(self, node_name: str) -> AllocationTable:
        """The node's allocation table (unfiltered: filter its records through ``cluster``)."""
        ...
