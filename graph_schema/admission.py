"""The admission step, before validation: variables' size, the cost estimate, the width limit.

Every operation passes it, over HTTP and over a WebSocket, whichever
executor answers it (``pipeline.py``). The cluster's sizes are measured at
most once a second (the cache keeps its pod counts), not once per query.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from graphql import DocumentNode, GraphQLError, GraphQLSchema, OperationDefinitionNode
from strawberry.types import ExecutionContext

from .context import GraphContext
from .cost import ClusterSizes, CostError, SelectionTooWideError, estimate
from .errors import BadUserInputError, GraphUserError
from .input_size import check_variable_items
from .interfaces import Cluster
from .internals import graphql_schema, provided_operation_name
from .limits import SchemaLimits
from .views import ViewCache
from .visibility import VisibleCluster

__all__ = ["SizeGauge", "admit", "admit_operation"]

logger = logging.getLogger(__name__)

# Processes per GPU assumed until an agent reports more (MPS and multi-process
# jobs share a GPU; one training process per GPU is the common case).
MIN_PROCESSES_PER_GPU = 4
# How long measured sizes are reused.
SIZES_TTL_SECONDS = 1.0


class SizeGauge:
    """The list sizes a caller's view holds, measured from it and the agents' current snapshots.

    A restricted caller's estimate is over what it may see (the GPUs of its
    nodes, its processes counted by namespace), so the refusal reveals nothing of the rest of the
    cluster's size or of other tenants' processes; each view is measured at
    most once per ``ttl`` seconds per scope.
    """

    def __init__(
        self,
        views: ViewCache,
        *,
        ttl: float = SIZES_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_scopes: int = 1024,
    ) -> None:
        self.views = views
        self.ttl = ttl
        self._clock = clock
        self._max_scopes = max_scopes
        # scope (or the whole cache's id) -> (when measured, sizes)
        self._measured: dict[Hashable, tuple[float, ClusterSizes]] = {}

    def sizes(self, cluster: Cluster) -> ClusterSizes:
        """The sizes of ``cluster`` (a caller's view, or the whole cache) now, at most
        ``ttl`` seconds old."""
        now = self._clock()
        # A view is keyed by its scope (a view lives for one operation, and its id()
        # could be another caller's view's within the TTL); the whole cache by itself.
        key: Hashable = cluster.scope if isinstance(cluster, VisibleCluster) else id(cluster)
        cached = self._measured.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        sizes = self._measure(cluster)
        if len(self._measured) >= self._max_scopes:
            self._measured.clear()
        self._measured[key] = (now, sizes)
        return sizes

    def _measure(self, cluster: Cluster) -> ClusterSizes:
        nodes = cluster.nodes()
        pods = cluster.pod_sizes()
        capacity = max((n.gpu_capacity or 0 for n in nodes), default=0)
        # What the agents' current snapshots report, not the most ever seen: a
        # node's spike leaves once its snapshot is replaced or goes unread.
        peaks = self.views.peaks()
        processes, gpus = peaks.processes_per_gpu, peaks.gpus_per_node
        if isinstance(cluster, VisibleCluster):
            processes = cluster.processes_per_gpu(processes, peaks.processes_per_gpu_of)
            if not cluster.sees_cluster_sizes():
                gpus = self.views.most_gpus(n.name for n in nodes)
        return ClusterSizes(
            nodes=max(1, len(nodes)),
            pods=max(1, pods.pods),
            pods_per_node=max(1, pods.pods_per_node),
            gpus_per_node=max(1, capacity, gpus),
            processes_per_gpu=max(MIN_PROCESSES_PER_GPU, processes),
            containers_per_pod=max(1, pods.containers_per_pod),
        )


def admit_operation(ec: ExecutionContext, gauge: SizeGauge, limits: SchemaLimits) -> None:
    """Refuse, before validation, an operation too large to coerce, run or validate: its
    refusal becomes the operation's errors, and strawberry then skips validation."""
    if ec.graphql_document is None or ec.pre_execution_errors is not None:
        return
    if provided_operation_name(ec) is None and _operations(ec.graphql_document) > 1:
        # strawberry would run the first: the spec's refusal, before anything runs.
        refusal = BadUserInputError(
            "Must provide operation name if query contains multiple operations."
        )
        ec.pre_execution_errors = [GraphQLError(str(refusal), original_error=refusal)]
        return
    ctx = ec.context
    try:
        admit(
            gauge,
            limits,
            graphql_schema(ec.schema),
            ec.graphql_document,
            ctx.cluster if isinstance(ctx, GraphContext) else None,
            operation_name=ec.operation_name,
            variables=ec.variables,
        )
    except GraphUserError as exc:
        # graphql-core copies the error's extensions (code, estimate, limit) into the response.
        ec.pre_execution_errors = [GraphQLError(str(exc), original_error=exc)]


def _operations(document: DocumentNode) -> int:
    return sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)


def admit(
    gauge: SizeGauge,
    limits: SchemaLimits,
    schema: GraphQLSchema,
    document: DocumentNode,
    cluster: VisibleCluster | None,
    *,
    operation_name: str | None,
    variables: dict[str, Any] | None,
) -> None:
    """Refuse an operation too large to coerce, run or validate (GraphUserError).

    ``cluster`` is None where the operation has no GraphContext; the width
    and depth are then bounded alone.
    """
    # First: graphql-core would coerce the variables before anything below matters.
    check_variable_items(variables, limits.max_variable_items)
    ready = cluster is not None and cluster.ready
    # Before the cache fills every field fails NOT_READY anyway; the width and
    # depth are still bounded.
    sizes = None
    named = False
    if cluster is not None and ready:
        try:
            sizes = gauge.sizes(cluster)
            named = cluster.sees_cluster_sizes()
        except Exception:
            # A broken cache is a server fault that execution reports (masked) at
            # the field that reads it; execution's own budget still holds.
            logger.debug("cannot measure the cluster for admission", exc_info=True)
    cost = estimate(
        schema,
        document,
        sizes or ClusterSizes(1, 1, 1, 1, 1, 1),
        operation_name=operation_name,
        variables=variables,
    )
    if cost.widest_selection > limits.max_fields_per_selection:
        raise SelectionTooWideError(cost.widest_selection, limits.max_fields_per_selection)
    # Too deep: validation's depth limit refuses it with its own message.
    too_costly = cost.objects > limits.max_result_items
    if sizes is not None and cost.depth <= limits.max_depth and too_costly:
        # Sizes are named only to a caller who sees the whole cluster.
        raise CostError(cost.objects, limits.max_result_items, sizes if named else None)
