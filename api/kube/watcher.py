"""The pod and node loops together, feeding one ClusterCache."""

from __future__ import annotations

import contextlib
import socket
import threading
import weakref
from types import TracebackType
from typing import Any

from kubernetes.client import ApiClient, Configuration, CoreV1Api
from urllib3.util.retry import Retry

from graph_schema.gpu_resources import GpuResources

from ..backoff import Backoff
from .cache import ClusterCache
from .dra_watcher import DraWatcher
from .reflector import RETRY_JITTER, Reflector, node_kind, pod_kind


class _ConnectionCutter:
    """Remembers every connection a client opens, so stop() can cut requests still in flight.

    A list request waiting for its first byte has no response object to close
    yet; shutting its socket down is the only way to end it at once.
    """

    def __init__(self, pool_manager: Any) -> None:
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._cut = False
        tracked = {
            scheme: self._tracking(pool_cls)
            for scheme, pool_cls in pool_manager.pool_classes_by_scheme.items()
        }
        pool_manager.pool_classes_by_scheme = tracked

    def _tracking(self, pool_cls: type[Any]) -> type[Any]:
        cutter = self
        connection_cls: type[Any] = pool_cls.ConnectionCls

        class TrackedConnection(connection_cls):
            def connect(self) -> None:
                super().connect()
                # Registering after the socket exists closes the race with cut().
                with cutter._lock:
                    if cutter._cut:
                        self.close()
                        raise ConnectionAbortedError("the watcher is stopping")
                    cutter._connections.add(self)

        class TrackedPool(pool_cls):
            ConnectionCls = TrackedConnection

        return TrackedPool

    def cut(self) -> None:
        """Shut down every open connection's socket, and refuse new ones."""
        with self._lock:
            self._cut = True
            connections = list(self._connections)
        for connection in connections:
            sock = getattr(connection, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class ClusterWatcher:
    """Lists and watches pods and nodes, each in its own daemon thread, into ``cache``."""

    def __init__(
        self,
        cache: ClusterCache,
        configuration: Configuration,
        *,
        namespace: str | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff_initial: float = 0.2,
        backoff_max: float = 10.0,
        gpu_resources: GpuResources | None = None,
    ) -> None:
        self.cache = cache
        self._client = ApiClient(configuration)
        pool_manager = self._client.rest_client.pool_manager
        # The loops retry with their own backoff; urllib3 retrying underneath
        # would also reopen connections that stop() just cut.
        pool_manager.connection_pool_kw["retries"] = Retry(total=False)
        self._cutter = _ConnectionCutter(pool_manager)
        api = CoreV1Api(self._client)
        self.pods = Reflector(
            pod_kind(api, cache, namespace, gpu_resources),
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff=Backoff(backoff_initial, backoff_max, jitter=RETRY_JITTER),
        )
        self.nodes = Reflector(
            node_kind(api, cache),
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff=Backoff(backoff_initial, backoff_max, jitter=RETRY_JITTER),
        )
        self.dra = DraWatcher(
            cache.dra,
            self._client,
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )

    @property
    def api_server(self) -> str:
        """The API server's URL, as the configuration names it."""
        return str(self._client.configuration.host)

    def start(self) -> None:
        """Start both loops; the cache turns ready once both first lists land."""
        self.pods.start()
        self.nodes.start()
        self.dra.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop both loops and close the client; True if both threads ended in time."""
        self.pods.request_stop()
        self.nodes.request_stop()
        self.dra.request_stop()
        self._cutter.cut()
        stopped = self.pods.stop(timeout) & self.nodes.stop(timeout) & self.dra.stop(timeout)
        self._client.close()
        return stopped

    def __enter__(self) -> ClusterWatcher:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
