"""One resource's list-then-watch loop, feeding the cache from a daemon thread.

The official client's model classes are far too slow for a 100k-pod list (see
``bench/cache_bench.py``), so the loop asks for the raw response
(``_preload_content=False``), parses it with orjson and keeps only slim
records. The loop:

1. lists every object page by page (``limit``/``continue``) and swaps the
   whole result into the cache at once, so the old data keeps serving until
   the new list has fully landed;
2. watches from the list's ``resourceVersion`` with bookmarks, applying each
   event as it arrives;
3. when a watch ends or drops, resumes from the last ``resourceVersion`` seen
   (after a backoff if it failed); on ``410 Gone`` it lists again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from graph_schema.gpu_resources import GpuResources
from graph_schema.records import NodeRecord, PodRecord

from ..backoff import Backoff
from ..lifecycle.gc_tuning import gc_paused
from .cache import ClusterCache, WatchStats
from .parse import ParseError, node_record, pod_record, resource_version

logger = logging.getLogger(__name__)

HTTP_GONE = 410


class _Gone(Exception):
    """The resourceVersion being watched from is too old: list again."""


class _Stopped(Exception):
    """stop() was called while a request was in flight."""


class WatchError(Exception):
    """The API server ended a watch with an ERROR event other than 410 Gone."""


# Reflectors of many servers retrying one API server should not retry in step.
RETRY_JITTER = 0.2


@dataclass(frozen=True)
class ResourceKind:
    """How to list, parse and store one kind of object."""

    name: str  # "pods" or "nodes"
    list_call: Callable[..., Any]
    parse: Callable[[Mapping[str, Any]], Any]
    replace: Callable[[list[Any]], None]
    upsert: Callable[[Any], None]
    delete: Callable[[Mapping[str, Any]], None]
    stats: WatchStats


def _metadata_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise ParseError("object without metadata.name")
    return metadata.get("namespace") or "default", metadata["name"]


def pod_kind(
    api: CoreV1Api,
    cache: ClusterCache,
    namespace: str | None = None,
    gpus: GpuResources | None = None,
) -> ResourceKind:
    """Pods, in every namespace or only ``namespace``; ``gpus`` names what gpu_request counts."""
    list_call = (
        partial(api.list_namespaced_pod, namespace)
        if namespace
        else api.list_pod_for_all_namespaces
    )

    def upsert(record: PodRecord) -> None:
        cache.upsert_pod(record)

    def delete(obj: Mapping[str, Any]) -> None:
        cache.delete_pod(*_metadata_name(obj))

    parse = pod_record if gpus is None else partial(pod_record, gpus=gpus)
    return ResourceKind(
        "pods", list_call, parse, cache.replace_pods, upsert, delete, cache.stats.pods
    )


def node_kind(api: CoreV1Api, cache: ClusterCache) -> ResourceKind:
    """Nodes."""

    def upsert(record: NodeRecord) -> None:
        cache.upsert_node(record)

    def delete(obj: Mapping[str, Any]) -> None:
        cache.delete_node(_metadata_name(obj)[1])

    return ResourceKind(
        "nodes", api.list_node, node_record, cache.replace_nodes, upsert, delete, cache.stats.nodes
    )


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-delimited lines of a streamed (chunked) response body."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        if not chunk:
            continue
        pending += chunk
        if b"\n" not in chunk:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


class Reflector:
    """Keeps one kind of object in the cache current, from its own daemon thread."""

    def __init__(
        self,
        kind: ResourceKind,
        *,
        page_size: int = 500,
        watch_timeout: int = 300,
        connect_timeout: float = 10.0,
        list_timeout: float = 120.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.kind = kind
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.connect_timeout = connect_timeout
        self.list_timeout = list_timeout
        self.backoff = backoff or Backoff(0.2, 10.0, jitter=RETRY_JITTER)
        self.resource_version: str | None = None
        self._listed = False
        self._stopping = threading.Event()
        self._response_lock = threading.Lock()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    @property
    def stats(self) -> WatchStats:
        """This loop's counters."""
        return self.kind.stats

    def start(self) -> None:
        """Start the loop in a daemon thread."""
        if self._thread is not None:
            raise RuntimeError(f"{self.kind.name} reflector already started")
        self._thread = threading.Thread(
            target=self._run, name=f"kube-{self.kind.name}", daemon=True
        )
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the loop to end and interrupt any request in flight; does not wait."""
        self._stopping.set()
        with self._response_lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()

    def stop(self, timeout: float = 5.0) -> bool:
        """End the loop, interrupting any request in flight; True if the thread ended."""
        self.request_stop()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the loop ------------------------------------------------------------

    def _run(self) -> None:
        need_list = True
        while not self._stopping.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                    self.backoff.forget(self.kind.name)
                self._watch()
                self.stats.watch_restarts += 1
            except _Stopped:
                return
            except _Gone:
                logger.info(
                    "%s: resourceVersion %s is gone; listing again",
                    self.kind.name,
                    self.resource_version,
                )
                if need_list:
                    # The list itself was refused (an expired continue token).
                    self._stopping.wait(self.backoff.failed(self.kind.name, "410 Gone on the list"))
                need_list = True
            except Exception as exc:
                if self._stopping.is_set():
                    return
                self.stats.errors += 1
                if not need_list:
                    self.stats.watch_restarts += 1
                delay = self.backoff.failed(self.kind.name, f"{type(exc).__name__}: {exc}")
                logger.warning(
                    "%s: %s failed (%s: %s); retrying in %.1fs",
                    self.kind.name,
                    "list" if need_list else "watch",
                    type(exc).__name__,
                    exc,
                    delay,
                )
                self._stopping.wait(delay)

    def _request(self, **kwargs: Any) -> Any:
        try:
            response = self.kind.list_call(_preload_content=False, **kwargs)
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise _Gone() from exc
            raise
        with self._response_lock:
            if self._stopping.is_set():
                response.close()
                raise _Stopped()
            self._response = response
        return response

    def _forget(self, response: Any, *, reuse: bool) -> None:
        with self._response_lock:
            self._response = None
        if reuse:
            response.release_conn()
        else:
            response.close()

    def _list(self) -> None:
        records: list[Any] = []
        token: str | None = None
        list_rv: str | None = None
        while True:
            response = self._request(
                limit=self.page_size,
                _continue=token,
                _request_timeout=(self.connect_timeout, self.list_timeout),
            )
            try:
                body = response.data
            except BaseException:
                self._forget(response, reuse=False)
                if self._stopping.is_set():
                    raise _Stopped() from None
                raise
            self._forget(response, reuse=True)
            with gc_paused():
                page = orjson.loads(body)
                del body
                self._collect(page.get("items") or (), records)
                metadata = page.get("metadata") or {}
                list_rv = resource_version(page) or list_rv
                token = metadata.get("continue") or None
                # Freed before the collector comes back, or its first pass
                # would walk the whole parsed page.
                del page, metadata
            if token is None:
                break
            if self._stopping.is_set():
                raise _Stopped()
        self.kind.replace(records)
        self.resource_version = list_rv
        self.stats.heard_at = time.monotonic()
        self.stats.lists += 1
        if self._listed:
            self.stats.relists += 1
        self._listed = True

    def _collect(self, items: Any, into: list[Any]) -> None:
        parse = self.kind.parse
        for item in items:
            try:
                into.append(parse(item))
            except (ParseError, AttributeError, TypeError, ValueError) as exc:
                self.stats.bad_events += 1
                logger.warning("%s: skipping unreadable list item: %s", self.kind.name, exc)

    def _watch(self) -> None:
        response = self._request(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout,
            # The server ends the watch after timeout_seconds; the read
            # timeout only catches a connection that went silent.
            _request_timeout=(self.connect_timeout, self.watch_timeout + 30),
        )
        self.stats.watches += 1
        self.stats.heard_at = time.monotonic()
        finished = False
        try:
            for line in _lines(response):
                self._apply(line)
                self.backoff.forget(self.kind.name)
            finished = True
        except BaseException:
            if self._stopping.is_set():
                raise _Stopped() from None
            raise
        finally:
            self._forget(response, reuse=finished)
        if self._stopping.is_set():
            raise _Stopped()

    def _apply(self, line: bytes) -> None:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.stats.bad_events += 1
            logger.warning("%s: skipping malformed watch line %.200r", self.kind.name, line)
            return
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            self.stats.bad_events += 1
            logger.warning(
                "%s: skipping watch event without an object: %.200r", self.kind.name, line
            )
            return
        if kind == "ERROR":
            if obj.get("code") == HTTP_GONE:
                raise _Gone()
            raise WatchError(f"{obj.get('reason')}: {obj.get('message')}")
        rv = resource_version(obj)
        self.stats.heard_at = time.monotonic()
        try:
            if kind == "BOOKMARK":
                self.stats.bookmarks += 1
            elif kind in ("ADDED", "MODIFIED"):
                self.kind.upsert(self.kind.parse(obj))
                self.stats.events += 1
            elif kind == "DELETED":
                self.kind.delete(obj)
                self.stats.events += 1
            else:
                raise ParseError(f"unknown watch event type {kind!r}")
        except (ParseError, AttributeError, TypeError, ValueError) as exc:
            self.stats.bad_events += 1
            logger.warning("%s: skipping unreadable watch event: %s", self.kind.name, exc)
        if rv is not None:
            self.resource_version = rv
