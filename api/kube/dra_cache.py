"""ResourceClaims and ResourceSlices as last seen by their list/watch loops.

The allocation join reads it: a pod's claims by namespace and name, and a
claim's devices by (driver, pool, device) to the GPU UUIDs the slices give.
``api_version`` says which ``resource.k8s.io`` version is watched; None with
``served`` False means the API server serves none (no DRA), and None with
``served`` None that discovery has not answered yet.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from graph_schema.records import ResourceClaimRecord, ResourceSliceRecord, SliceDeviceRecord

from .watch_stats import WatchStats

__all__ = ["DraCache"]

DeviceKey = tuple[str, str, str]  # driver, pool, device


class DraCache:
    """Claims by namespace/name and slice devices by driver/pool/device; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], ResourceClaimRecord] = {}
        self._slices: dict[str, ResourceSliceRecord] = {}
        self._devices: dict[DeviceKey, tuple[SliceDeviceRecord, str | None]] = {}
        self._slice_nodes: set[str] = set()
        self.api_version: str | None = None
        self.served: bool | None = None
        self.claims_listed = False
        self.slices_listed = False
        self.claim_stats = WatchStats()
        self.slice_stats = WatchStats()

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

    def replace_claims(self, claims: Iterable[ResourceClaimRecord]) -> None:
        """Swap in a full list of claims."""
        by_key = {(c.namespace, c.name): c for c in claims}
        with self._lock:
            self._claims = by_key
            self.claims_listed = True

    def upsert_claim(self, claim: ResourceClaimRecord) -> None:
        """Add or replace one claim."""
        with self._lock:
            # A single dict store: readers' lookups stay atomic without the lock.
            self._claims[(claim.namespace, claim.name)] = claim

    def delete_claim(self, namespace: str, name: str) -> None:
        """Remove one claim."""
        with self._lock:
            self._claims.pop((namespace, name), None)

    def replace_slices(self, slices: Iterable[ResourceSliceRecord]) -> None:
        """Swap in a full list of slices."""
        with self._lock:
            self._slices = {s.name: s for s in slices}
            self._reindex()
            self.slices_listed = True

    def upsert_slice(self, record: ResourceSliceRecord) -> None:
        """Add or replace one slice."""
        with self._lock:
            self._slices = {**self._slices, record.name: record}
            self._reindex()

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
