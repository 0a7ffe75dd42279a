"""Telling each agent the names of the pods on its node, from the watch cache's events.

Agents see pod UIDs only; their occupancy logs keep pod names so a record
still names its pod after the pod is gone. The server holds no state of its
own for this: a pod added or changed in the cache is pushed to its node's
agent within about a second (batched per node), and every node's full set is
pushed again after a relist and every ``resync_seconds``, which also covers an
agent that restarted or was down. The periodic resync goes out a slice of the
nodes at a time across the period: at thousands of nodes one burst of every
node's names would hold the event loop from the queries for many seconds.
Several replicas pushing the same names is harmless: PutPodNames is an
idempotent upsert.

A pod's name carries the share of each DRA device its claims consume (consumable
capacity), and which MIG device each of them is, which only the server can tell
(the claim and the device's slice): the agents weigh those allocations by them.
A claim or slice that arrives or changes pushes its pods' names again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from graph_schema.interfaces import AgentUnavailableError
from graph_schema.records import (
    ClaimDeviceRecord,
    NodeRecord,
    PodRecord,
    ResourceClaimRecord,
    ResourceSliceRecord,
)
from node_resolver.pod_names import DeviceShareKey, PodName

from .pool import AgentClientLike, AgentPool

__all__ = ["PodNamePusher", "PodNameWriter", "pod_name_of", "resync_slices"]

log = logging.getLogger(__name__)

# How long changes gather before a push: pods start in bursts.
BATCH_SECONDS = 0.5
RESYNC_SECONDS = 300.0
# A resync marks a slice of the nodes about this often.
RESYNC_STEP_SECONDS = 1.0
# A node whose push failed is tried again (its full set) after this long.
RETRY_SECONDS = 3.0
# Nodes pushed to at once.
CONCURRENCY = 32


class PodSource(Protocol):
    """What the pusher reads from the cache."""

    def pods(
        self, namespace: str | None = None, node_name: str | None = None
    ) -> Iterable[PodRecord]:
        """Cached pods, optionally on one node."""
        ...

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        """One cached pod."""
        ...

    def nodes(self) -> Iterable[NodeRecord]:
        """Every cached node."""
        ...


class ClaimShares(Protocol):
    """What the pusher reads of the DRA cache (api.kube.dra_cache.DraCache)."""

    def claim(self, namespace: str, name: str) -> ResourceClaimRecord | None:
        """One cached claim."""
        ...

    def share(self, device: ClaimDeviceRecord) -> float | None:
        """The share of its device a claim's allocated device holds, if known."""
        ...

    def mig_device(self, device: ClaimDeviceRecord) -> str | None:
        """The MIG device UUID a claim's allocated device is, where its slice says it is one."""
        ...


@runtime_checkable
class PodNameWriter(Protocol):
    """An agent client's PutPodNames (node_resolver.client.AgentClient's)."""

    async def put_pod_names(self, node_name: str, pods: list[PodName], *, timeout: float) -> int:
        """Send names; how many the agent did not know."""
        ...


def pod_name_of(pod: PodRecord, claims: ClaimShares | None = None) -> PodName:
    """The name record of ``pod``: namespace, name, its containers' names by runtime ID, and
    the shares of the DRA devices its claims consume and which of them are MIG devices, where
    ``claims`` knows them."""
    shares, migs = _claim_devices(pod, claims) if claims is not None else ({}, {})
    return PodName(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        containers={c.container_id: c.name for c in pod.containers if c.container_id},
        device_shares=shares,
        device_migs=migs,
    )


def _claim_devices(
    pod: PodRecord, claims: ClaimShares
) -> tuple[dict[DeviceShareKey, float], dict[DeviceShareKey, str]]:
    """Of each device allocated to one of ``pod``'s cached claims: its share, and its MIG
    device, where known; keyed as the agent knows it (claim name, driver, pool, device)."""
    shares: dict[DeviceShareKey, float] = {}
    migs: dict[DeviceShareKey, str] = {}
    for name in dict.fromkeys(name for _, name in pod.resource_claims):
        claim = claims.claim(pod.namespace, name) if name else None
        if claim is None or not name:
            continue
        for device in claim.devices:
            key = (name, device.driver, device.pool, device.device)
            share = claims.share(device)
            if share is not None:
                # One claim given the same device twice holds both parts (up to all of it).
                shares[key] = min(1.0, shares.get(key, 0.0) + share)
            mig = claims.mig_device(device)
            if mig:
                migs[key] = mig
    return shares, migs


def resync_slices(nodes: list[str], period: float, step: float) -> list[list[str]]:
    """``nodes`` in slices to push one per ``period / len(slices)`` seconds: one slice per
    ``step`` (fewer when there are fewer nodes), every node in exactly one."""
    count = max(1, min(len(nodes), math.ceil(period / step)))
    return [nodes[i::count] for i in range(count)]


class PodNamePusher:
    """Pushes pod names to agents; ``on_change`` is a ClusterCache listener (any thread)."""

    def __init__(
        self,
        cluster: PodSource,
        pool: AgentPool,
        loop: asyncio.AbstractEventLoop,
        *,
        claims: ClaimShares | None = None,
        batch_seconds: float = BATCH_SECONDS,
        resync_seconds: float = RESYNC_SECONDS,
    ) -> None:
        self._cluster = cluster
        self._claims = claims
        self._pool = pool
        self._loop = loop
        self._batch_seconds = batch_seconds
        self._resync_seconds = resync_seconds
        # node -> (namespace, name) of pods to push; None: the node's full set.
        self._dirty: dict[str, set[tuple[str, str]] | None] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Names the agents acknowledged so far; tests and the demo wait on it.
        self.pushed = 0
        # Nodes taken from ``_dirty`` whose push has not ended, and nodes whose push
        # failed, waiting to be tried again.
        self._pushing = 0
        self._retrying: set[str] = set()

    def pending_nodes(self) -> int:
        """Nodes whose names are waiting to be pushed, being pushed, or tried again later."""
        return len(self._dirty.keys() | self._retrying) + self._pushing

    def on_change(self, kind: str, change: str, record: PodRecord | NodeRecord | None) -> None:
        """Note which nodes need names pushed, on the watch thread; the loop pushes."""
        if kind == "pod" and change in ("ADDED", "MODIFIED") and isinstance(record, PodRecord):
            if record.node_name:
                node, key = record.node_name, (record.namespace, record.name)
                self._loop.call_soon_threadsafe(self._mark, node, key)
        elif change == "RELISTED":
            # Pods or nodes relisted (the first list too): every node with pods, in full.
            self._loop.call_soon_threadsafe(self._mark_all)
        elif kind == "node" and change == "ADDED" and isinstance(record, NodeRecord):
            # A new node (or one back): its agent may know nothing yet.
            self._loop.call_soon_threadsafe(self._mark, record.name, None)

    def on_claims_change(
        self, kind: str, record: ResourceClaimRecord | ResourceSliceRecord | None
    ) -> None:
        """Note the pods whose device shares or MIG devices a claim or slice may change, on
        the watch thread (a DraCache listener)."""
        if record is None:
            self._loop.call_soon_threadsafe(self._mark_all)
        elif isinstance(record, ResourceClaimRecord):
            for name, _ in record.reserved_for:
                self._loop.call_soon_threadsafe(self._mark_pod, record.namespace, name)
        elif record.node_name and any(d.capacity or d.parent_uuid for d in record.devices):
            # Its devices' capacities and MIG devices: any pod's on the node may change.
            self._loop.call_soon_threadsafe(self._mark, record.node_name, None)

    def _mark_pod(self, namespace: str, name: str) -> None:
        pod = self._cluster.pod(namespace, name)
        if pod is not None and pod.node_name:
            self._mark(pod.node_name, (namespace, name))

    def _mark(self, node: str, key: tuple[str, str] | None) -> None:
        if node in self._dirty and self._dirty[node] is None:
            return
        if key is None:
            self._dirty[node] = None
        else:
            self._dirty.setdefault(node, set()).add(key)  # type: ignore[union-attr]
        self._wake.set()

    def _retry(self, node: str) -> None:
        self._retrying.discard(node)
        self._mark(node, None)

    def _mark_all(self) -> None:
        for node in self._nodes_with_pods():
            self._mark(node, None)

    def _nodes_with_pods(self) -> list[str]:
        # From the pods, not the nodes: after the first pod list the nodes may not be listed yet.
        return sorted({p.node_name for p in self._cluster.pods() if p.node_name})

    def start(self) -> None:
        """Start pushing (on the running loop)."""
        self._tasks = [
            asyncio.create_task(self._push_loop(), name="pod-names-push"),
            asyncio.create_task(self._resync_loop(), name="pod-names-resync"),
        ]

    async def stop(self) -> None:
        """Stop pushing."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _resync_loop(self) -> None:
        period = self._resync_seconds
        while True:
            slices = resync_slices(self._nodes_with_pods(), period, RESYNC_STEP_SECONDS)
            for nodes in slices:
                await asyncio.sleep(period / len(slices))
                for node in nodes:
                    self._mark(node, None)

    async def _push_loop(self) -> None:
        while True:
            await self._wake.wait()
            # Let a burst of pod starts gather into one push per node.
            await asyncio.sleep(self._batch_seconds)
            self._wake.clear()
            await self.push_pending()

    async def push_pending(self) -> None:
        """Push every node's pending names now, a bounded number of nodes at a time."""
        dirty, self._dirty = self._dirty, {}
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(node: str, keys: set[tuple[str, str]] | None) -> None:
            try:
                async with limit:
                    await self._push(node, keys)
            finally:
                self._pushing -= 1

        self._pushing += len(dirty)
        await asyncio.gather(*(one(node, keys) for node, keys in dirty.items()))

    async def _push(self, node: str, keys: set[tuple[str, str]] | None) -> None:
        if keys is None:
            pods = [p for p in self._cluster.pods(node_name=node) if p.node_name == node]
        else:
            found = (self._cluster.pod(ns, name) for ns, name in keys)
            pods = [p for p in found if p is not None and p.node_name == node]
        if not pods:
            return
        names = [pod_name_of(pod, self._claims) for pod in pods]
        timeout = self._pool.timeout

        async def put(client: AgentClientLike) -> int:
            if not isinstance(client, PodNameWriter):
                raise TypeError(f"{type(client).__name__} sends no pod names")
            return await client.put_pod_names(node, names, timeout=timeout)

        try:
            await self._pool.call(node, put, what="PutPodNames")
        except AgentUnavailableError as exc:
            log.debug("pod names not pushed, retrying in %gs: %s", RETRY_SECONDS, exc)
            self._retrying.add(node)
            self._loop.call_later(RETRY_SECONDS, self._retry, node)
            return
        self.pushed += len(names)
