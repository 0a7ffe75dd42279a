"""ResourceClaims and ResourceSlices, listed and watched like pods, at the best version served.

Discovery picks ``resource.k8s.io/v1`` (Kubernetes 1.34+), else ``v1beta2``
(1.33), else ``v1beta1`` (1.32); a server that serves none has no DRA, and
the cache says so rather than waiting for it. Discovery is retried with a
backoff while the API server cannot answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from functools import partial
from typing import Any

from kubernetes.client import ApiClient, ApisApi, CustomObjectsApi

from ..backoff import Backoff
from .dra_cache import DraCache
from .parse import ParseError, claim_record, slice_record
from .reflector import RETRY_JITTER, Reflector, ResourceKind

logger = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
# Best first; each has the claim and slice fields the cache reads.
VERSIONS = ("v1", "v1beta2", "v1beta1")


def pick_version(served: list[str]) -> str | None:
    """The best version of ``resource.k8s.io`` among ``served``, or None."""
    return next((v for v in VERSIONS if v in served), None)


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise ParseError("object without metadata.name")
    return metadata.get("namespace") or "default", metadata["name"]


def claim_kind(api: CustomObjectsApi, dra: DraCache, version: str) -> ResourceKind:
    """ResourceClaims in every namespace."""
    return ResourceKind(
        "resourceclaims",
        partial(api.list_cluster_custom_object, GROUP, version, "resourceclaims"),
        claim_record,
        dra.replace_claims,
        dra.upsert_claim,
        lambda obj: dra.delete_claim(*_name(obj)),
        dra.claim_stats,
    )


def slice_kind(api: CustomObjectsApi, dra: DraCache, version: str) -> ResourceKind:
    """ResourceSlices (cluster-scoped)."""
    return ResourceKind(
        "resourceslices",
        partial(api.list_cluster_custom_object, GROUP, version, "resourceslices"),
        slice_record,
        dra.replace_slices,
        dra.upsert_slice,
        lambda obj: dra.delete_slice(_name(obj)[1]),
        dra.slice_stats,
    )


class DraWatcher:
    """Discovers the resource API's version, then runs a claim and a slice reflector."""

    def __init__(
        self,
        dra: DraCache,
        client: ApiClient,
        *,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff_initial: float = 0.2,
        backoff_max: float = 10.0,
    ) -> None:
        self.dra = dra
        self._client = client
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff_args = (backoff_initial, backoff_max)
        self._backoff = Backoff(backoff_initial, backoff_max, jitter=RETRY_JITTER)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.reflectors: list[Reflector] = []

    def start(self) -> None:
        """Discover in a daemon thread, then start the loops."""
        self._thread = threading.Thread(target=self._run, name="kube-dra", daemon=True)
        self._thread.start()

    def _served_versions(self) -> list[str]:
        groups = ApisApi(self._client).get_api_versions(_request_timeout=(10, 30))
        for group in groups.groups or ():
            if group.name == GROUP:
                return [v.version for v in group.versions or ()]
        return []

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                served = self._served_versions()
                break
            except Exception as exc:
                delay = self._backoff.failed("discovery", f"{type(exc).__name__}: {exc}")
                logger.warning("%s discovery failed (%s); retrying in %.1fs", GROUP, exc, delay)
                self._stopping.wait(delay)
        else:
            return
        version = pick_version(served)
        self.dra.api_version = version
        self.dra.served = version is not None
        if version is None:
            logger.info(
                "the API server serves no %s version gpugraph reads (%s): no DRA claims; "
                "allocations come from the kubelets alone",
                GROUP,
                ", ".join(VERSIONS),
            )
            return
        logger.info("watching ResourceClaims and ResourceSlices at %s/%s", GROUP, version)
        api = CustomObjectsApi(self._client)
        for kind in (claim_kind(api, self.dra, version), slice_kind(api, self.dra, version)):
            reflector = Reflector(
                kind,
                page_size=self._page_size,
                watch_timeout=self._watch_timeout,
                backoff=Backoff(*self._backoff_args, jitter=RETRY_JITTER),
            )
            if self._stopping.is_set():
                return
            self.reflectors.append(reflector)
            reflector.start()

    def request_stop(self) -> None:
        """Ask discovery and the loops to end; does not wait."""
        self._stopping.set()
        for reflector in self.reflectors:
            reflector.request_stop()

    def stop(self, timeout: float = 5.0) -> bool:
        """End discovery and both loops; True if every thread ended in time."""
        self.request_stop()
        stopped = True
        if self._thread is not None:
            self._thread.join(timeout)
            stopped = not self._thread.is_alive()
        for reflector in self.reflectors:
            stopped &= reflector.stop(timeout)
        return stopped
