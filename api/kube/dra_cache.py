"""ResourceClaims and ResourceSlices as last seen by their list/watch loops.

The allocation join reads it: a pod's claims by namespace and name, and a
claim's devices by (driver, pool, device) to the GPU UUIDs the slices give.
``api_version`` says which ``resource.k8s.io`` version is watched; None with
``served`` False means the API server serves none (no DRA), and None with
``served`` None that discovery has not answered yet.

A device shared by capacity (DRA consumable capacity) is held by each claim in
part: ``consumed_share`` is the rule for how much, which the agents' accounting
weighs the claim's allocation by (the pod names' push carries it there).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from graph_schema.records import (
    ClaimDeviceRecord,
    ResourceClaimRecord,
    ResourceSliceRecord,
    SliceDeviceRecord,
)

from .listeners import Listeners
from .watch_stats import WatchStats

__all__ = ["DraCache", "DraListener", "consumed_share"]

DeviceKey = tuple[str, str, str]  # driver, pool, device
# (kind, record): kind is "resourceclaim" or "resourceslice"; record None when the whole
# kind was listed again.
DraListener = Callable[[str, ResourceClaimRecord | ResourceSliceRecord | None], None]

logger = logging.getLogger(__name__)


def consumed_share(
    consumed: Iterable[tuple[str, float]], capacity: Iterable[tuple[str, float]]
) -> float | None:
    """The share of a device one allocation holds: the largest consumed / capacity among the
    capacities the device publishes, at most 1; None where no such pair is known.

    The largest, because what a claim takes of any one capacity is kept from the device's
    other claims: a claim with half the memory leaves at most half the GPU to the rest,
    however few of its multiprocessors it takes (docs/allocation.md).
    """
    published = dict(capacity)
    shares = [
        amount / published[name]
        for name, amount in consumed
        if amount > 0 and published.get(name, 0.0) > 0
    ]
    return min(1.0, max(shares)) if shares else None


class DraCache:
    """Claims by namespace/name and slice devices by driver/pool/device; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], ResourceClaimRecord] = {}
        # Moves with every change of the claims: answers remembered from them stand while
        # it stands (Pod.gpuRequest in the compiled plan's remembered selections).
        self.claims_version = 0
        self._slices: dict[str, ResourceSliceRecord] = {}
        self._devices: dict[DeviceKey, tuple[SliceDeviceRecord, str | None]] = {}
        self._slice_nodes: set[str] = set()
        self.api_version: str | None = None
        self.served: bool | None = None
        self.claims_listed = False
        self.slices_listed = False
        self.claim_stats = WatchStats()
        self.slice_stats = WatchStats()
        self._listeners: Listeners[DraListener] = Listeners()

    # -- reads ----------------------------------------------------------------

    def claim(self, namespace: str, name: str) -> ResourceClaimRecord | None:
        """The claim ``namespace/name``, if cached."""
        return self._claims.get((namespace, name))

    def device(self, driver: str, pool: str, device: str) -> SliceDeviceRecord | None:
        """The published device, if a cached slice has it."""
        found = self._devices.get((driver, pool, device))
        return found[0] if found is not None else None

    def device_node(self, driver: str, pool: str, device: str) -> str | None:
        """The node whose slice publishes the device, if known."""
        found = self._devices.get((driver, pool, device))
        return found[1] if found is not None else None

    def share(self, device: ClaimDeviceRecord) -> float | None:
        """The share of its device a claim's allocated ``device`` holds, where the claim names
        consumed capacity and a cached slice the device's capacity (``consumed_share``)."""
        if not device.consumed:
            return None
        found = self._devices.get((device.driver, device.pool, device.device))
        return consumed_share(device.consumed, found[0].capacity) if found is not None else None

    def mig_device(self, device: ClaimDeviceRecord) -> str | None:
        """The MIG device UUID a claim's allocated ``device`` is, where a cached slice
        publishes it as one (with its parent GPU's UUID)."""
        found = self._devices.get((device.driver, device.pool, device.device))
        return None if found is None else found[0].gpu_and_mig()[1]

    def has_slices_on(self, node_name: str) -> bool:
        """Whether some cached slice publishes devices of ``node_name``."""
        return node_name in self._slice_nodes

    @property
    def ready(self) -> bool:
        """True once both kinds are listed, or once the API server is known to serve neither."""
        return self.served is False or (self.claims_listed and self.slices_listed)

    @property
    def claim_count(self) -> int:
        """How many claims are cached."""
        return len(self._claims)

    # -- writes (watch threads) -------------------------------------------------

    def subscribe(self, listener: DraListener) -> Callable[[], None]:
        """Call ``listener`` after a claim or slice arrives or changes, and after a list (on the
        writing thread); returns an unsubscribe. Deletions are not told: nothing is pushed
        for them."""
        return self._listeners.add(listener)

    def _notify(self, kind: str, record: ResourceClaimRecord | ResourceSliceRecord | None) -> None:
        for listener in self._listeners:
            try:
                listener(kind, record)
            except Exception:
                # A broken listener must not stop the watch that feeds the cache.
                logger.exception("DRA cache listener %r failed", listener)

    def replace_claims(self, claims: Iterable[ResourceClaimRecord]) -> None:
        """Swap in a full list of claims."""
        by_key = {(c.namespace, c.name): c for c in claims}
        with self._lock:
            self._claims = by_key
            self.claims_listed = True
            self.claims_version += 1
        self._notify("resourceclaim", None)

    def upsert_claim(self, claim: ResourceClaimRecord) -> None:
        """Add or replace one claim."""
        with self._lock:
            # A single dict store: readers' lookups stay atomic without the lock.
            self._claims[(claim.namespace, claim.name)] = claim
            self.claims_version += 1
        self._notify("resourceclaim", claim)

    def delete_claim(self, namespace: str, name: str) -> None:
        """Remove one claim."""
        with self._lock:
            self._claims.pop((namespace, name), None)
            self.claims_version += 1

    def replace_slices(self, slices: Iterable[ResourceSliceRecord]) -> None:
        """Swap in a full list of slices."""
        with self._lock:
            self._slices = {s.name: s for s in slices}
            self._reindex()
            self.slices_listed = True
        self._notify("resourceslice", None)

    def upsert_slice(self, record: ResourceSliceRecord) -> None:
        """Add or replace one slice."""
        with self._lock:
            self._slices = {**self._slices, record.name: record}
            self._reindex()
        self._notify("resourceslice", record)

    def delete_slice(self, name: str) -> None:
        """Remove one slice."""
        with self._lock:
            if name in self._slices:
                self._slices = {k: v for k, v in self._slices.items() if k != name}
                self._reindex()

    def _reindex(self) -> None:
        # Slices are few (about one per node and driver) and change rarely: rebuilding
        # the device index keeps the readers lock-free.
        devices: dict[DeviceKey, tuple[SliceDeviceRecord, str | None]] = {}
        nodes: set[str] = set()
        for s in self._slices.values():
            if s.node_name:
                nodes.add(s.node_name)
            for device in s.devices:
                devices[(s.driver, s.pool, device.name)] = (device, s.node_name)
        self._devices = devices
        self._slice_nodes = nodes
