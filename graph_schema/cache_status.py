"""How current the Kubernetes cache is: for the ``cacheStatus`` field and ``/readyz``.

A cache that stops hearing from the API server (the API server is down, or
a relist is held up) keeps answering from what it has. Its age is the one
signal of that: seconds since the API server last confirmed both pods and
nodes, by a list, a watch event or a bookmark.
"""

from __future__ import annotations

from dataclasses import dataclass

import strawberry

from .interfaces import Cluster, StalenessSource

__all__ = ["STALE_AFTER_SECONDS", "CacheAge", "CacheStatus", "cache_age"]

# Past this the cache counts as stale. The API server sends a bookmark about
# once a minute on a quiet watch, so a healthy cache is rarely a minute old.
STALE_AFTER_SECONDS = 180.0


@dataclass(frozen=True, slots=True)
class CacheAge:
    """Seconds since the API server last confirmed the cache (None: not yet, or unknown)."""

    seconds: float | None

    @property
    def stale(self) -> bool:
        """True once the cache is older than ``STALE_AFTER_SECONDS``."""
        return self.seconds is not None and self.seconds > STALE_AFTER_SECONDS


def cache_age(cluster: Cluster) -> CacheAge:
    """The cache's age now; unknown for caches that do not track it."""
    if isinstance(cluster, StalenessSource):
        return CacheAge(cluster.staleness_seconds())
    return CacheAge(None)


@strawberry.type(
    description="How current the server's cache of the cluster's pods and nodes is. "
    "Answers go on being served from the cache while the Kubernetes API server is "
    "unreachable; this says how old they may be."
)
class CacheStatus:
    ready: bool = strawberry.field(
        description="True once the first full list of pods and nodes has loaded; until "
        "then every other field fails with NOT_READY."
    )
    staleness_seconds: float | None = strawberry.field(
        description="Seconds since the API server last confirmed the cache (a list, a "
        "watch event or a bookmark, for pods and nodes alike); null before it has."
    )
    stale: bool = strawberry.field(
        description="True when stalenessSeconds is over staleAfterSeconds: answers may be "
        "out of date."
    )
    stale_after_seconds: float = strawberry.field(
        description="The age past which the cache counts as stale (also /readyz's rule)."
    )

    @classmethod
    def of(cls, cluster: Cluster) -> CacheStatus:
        """The status of ``cluster``'s cache now."""
        age = cache_age(cluster)
        return cls(
            ready=cluster.ready,
            staleness_seconds=age.seconds,
            stale=age.stale,
            stale_after_seconds=STALE_AFTER_SECONDS,
        )
