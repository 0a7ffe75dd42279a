"""Pods with the longest names Kubernetes allows, as a holder of the agent's token may push them."""

from __future__ import annotations

from collections.abc import Iterator

from node_resolver.pod_names import PodName

__all__ = ["PER_MESSAGE", "long_named_pods", "pod_uid"]

# Pods per PutPodNames: 35 of these make a message of 59 KB, under the agent's 64 KiB limit.
PER_MESSAGE = 35


def pod_uid(i: int) -> str:
    """The UID of the ``i``-th pod."""
    return f"{i:08x}-0000-4000-8000-000000000000"


def long_named_pods(count: int, *, start: int = 0) -> Iterator[list[PodName]]:
    """``count`` pods of about 1.6 KB of text each (a 63-character namespace, a 253-character
    name, ten containers with 63-character names), in batches of ``PER_MESSAGE``."""
    batch: list[PodName] = []
    for i in range(start, start + count):
        containers = {f"{i:08x}{c:056x}": f"{c:02d}" + "c" * 61 for c in range(10)}
        batch.append(PodName(pod_uid(i), "n" * 63, "p" * 253, containers))
        if len(batch) == PER_MESSAGE:
            yield batch
            batch = []
    if batch:
        yield batch
