"""Server-wide state shared by every request: GPU location hints, built views, limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from .limits import SubscriptionLimiter
from .views import ViewCache


@dataclass
class SharedState:
    """What outlives a request; one per schema (and so per server)."""

    subscriptions: SubscriptionLimiter = field(default_factory=SubscriptionLimiter)
    # GPU UUID -> the node it was last seen on. Only a hint: a lookup that
    # misses falls back to asking every node.
    gpu_nodes: dict[str, str] = field(default_factory=dict)
    views: ViewCache = field(default_factory=ViewCache)
