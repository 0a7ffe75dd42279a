"""Server-wide state shared by every request: GPU location hints, built views, limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from .allocation_join import AllocationRules
from .limits import SchemaLimits, SubscriptionLimiter
from .pacing import Pacer
from .views import ViewCache


@dataclass
class SharedState:
    """What outlives a request; one per server, built by its composition root."""

    subscriptions: SubscriptionLimiter = field(default_factory=SubscriptionLimiter)
    # GPU UUID -> the node it was last seen on. Only a hint: a lookup that
    # misses falls back to asking every node. Pruned by ``forget_node``.
    gpu_nodes: dict[str, str] = field(default_factory=dict)
    views: ViewCache = field(default_factory=ViewCache)
    max_result_items: int = SchemaLimits().max_result_items
    # Shares the event loop between long executions and everything else.
    pacer: Pacer = field(default_factory=Pacer)

    @classmethod
    def for_limits(
        cls, limits: SchemaLimits, allocation_rules: AllocationRules | None = None
    ) -> SharedState:
        """The state a server with these limits starts with; ``allocation_rules`` give
        its graph objects the cached claims and the GPU resource names."""
        return cls(
            subscriptions=SubscriptionLimiter(
                limits.max_subscriptions, limits.max_subscriptions_per_caller
            ),
            views=ViewCache(allocation_rules),
            max_result_items=limits.max_result_items,
        )

    def node_names(self) -> set[str]:
        """Every node something is held for."""
        return set(self.gpu_nodes.values()) | self.views.node_names()

    def forget_node(self, node_name: str) -> None:
        """Drop everything held for a node that left the cluster."""
        self.views.forget(node_name)
        stale = [uuid for uuid, node in self.gpu_nodes.items() if node == node_name]
        for uuid in stale:
            del self.gpu_nodes[uuid]
