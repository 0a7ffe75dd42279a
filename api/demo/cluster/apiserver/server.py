"""A small fake Kubernetes API server for tests, the demo and the benchmarks.

It is a real HTTP server on a loopback port that speaks the API server's wire
format for pods and nodes, so the official client talks to it unchanged:

- ``GET /api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``, ``/api/v1/nodes``:
  ``PodList``/``NodeList`` carrying ``metadata.resourceVersion``, paginated by
  ``limit`` with ``continue`` tokens over a consistent snapshot (``lists``);
- ``?watch=true``: a chunked stream of ``{"type": ..., "object": ...}`` lines
  after ``resourceVersion``, with ``BOOKMARK`` events when
  ``allowWatchBookmarks=true``, ended after ``timeoutSeconds``; a watch from
  a resourceVersion older than the bounded event history gets the
  ``ERROR`` event with a ``410 Gone`` Status, as the real server sends it
  (``watch``);
- ``labelSelector`` (``k=v``, ``k!=v``, ``k``, ``!k``) and the
  ``fieldSelector``s ``spec.nodeName``, ``metadata.name`` and
  ``metadata.namespace`` (``selectors``);
- ``GET`` of one pod or node, with the ``NotFound`` Status when it is missing;
  namespaces, derived from the pods (``namespaces``);
- discovery (``/api``, ``/api/v1``, ``/apis``, ``/version``) and, when the
  Accept header asks for them, ``meta.k8s.io/v1`` Tables in place of objects,
  lists and watch events, so the real kubectl works against it (``discovery``,
  ``tables``);
- ``POST`` TokenReview and SubjectAccessReview over a static table of
  users with random tokens (``reviews``);
- Services and the service proxy, HTTP and WebSocket (``services``).

Test controls change objects (each change is a watch event), expire or drop
the open watches, hold list requests, and count requests.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import orjson
from kubernetes.client import Configuration

from . import tables
from .discovery import discovery_document, version_document
from .kubeconfig import kubeconfig_for
from .lists import Lister
from .namespaces import NAMESPACES, namespace_body, namespace_list_body
from .reviews import TokenReviews
from .routes import route
from .services import ServiceTable
from .status import not_found, read_only, status
from .store import NODES, OBJECT_KIND, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, ObjectStore
from .transport import Exchange, HttpServer
from .watch import stream_watch

__all__ = ["StubApiServer"]

_KIND = {**OBJECT_KIND, NAMESPACES: "Namespace"}


class StubApiServer:
    """A fake Kubernetes API server on ``127.0.0.1``; use as a context manager or start()/stop()."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        history_limit: int = 10_000,
        bookmark_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        dra_version: str | None = "v1",
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.clock = clock  # wall-clock seconds, for the AGE column of Tables
        # The one resource.k8s.io version served (None: a cluster without DRA).
        self.dra_version = dra_version
        self._store = ObjectStore(history_limit, dra_version=dra_version)
        self._cond = self._store.cond
        self._lister = Lister(self._store)
        # Cleared to hold new watch requests (pause_watches), as the lister's gates hold lists.
        self._watches_open = {
            r: threading.Event() for r in (PODS, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES)
        }
        for gate in self._watches_open.values():
            gate.set()
        self.reviews = TokenReviews()
        self.services = ServiceTable(self.reviews)
        self.requests: Counter[tuple[str, str]] = Counter()
        self.request_log: deque[tuple[str, dict[str, str]]] = deque(maxlen=1000)
        self._httpd = HttpServer((host, port), self)
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> StubApiServer:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and end every open watch (and stalled review)."""
        self.reviews.resume()
        self._store.stop()
        self._lister.release()
        for gate in self._watches_open.values():
            gate.set()
        self.services.close()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()

    def __enter__(self) -> StubApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def configuration(self) -> Configuration:
        """A client Configuration pointing at this server."""
        return kubeconfig_for(self.url)

    # -- objects ---------------------------------------------------------------

    @property
    def history_limit(self) -> int:
        """How many events watches can resume from; older resourceVersions get 410 Gone."""
        return self._store.history_limit

    @property
    def list_delay(self) -> float:
        """Seconds each list response waits before it is sent (a slow API server)."""
        return self._lister.delay

    @list_delay.setter
    def list_delay(self, seconds: float) -> None:
        self._lister.delay = seconds

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out."""
        return self._store.rv

    def add_pod(self, pod: Mapping[str, Any]) -> int:
        """Create a pod (ADDED); returns its resourceVersion."""
        return self._store.write(PODS, pod, create=True)

    def update_pod(self, pod: Mapping[str, Any]) -> int:
        """Replace an existing pod (MODIFIED); returns its resourceVersion."""
        return self._store.write(PODS, pod, create=False)

    def delete_pod(self, namespace: str, name: str) -> int:
        """Delete a pod (DELETED); returns the deletion's resourceVersion."""
        return self._store.delete(PODS, (namespace, name))

    def add_node(self, node: Mapping[str, Any]) -> int:
        """Create a node (ADDED); returns its resourceVersion."""
        return self._store.write(NODES, node, create=True)

    def update_node(self, node: Mapping[str, Any]) -> int:
        """Replace an existing node (MODIFIED); returns its resourceVersion."""
        return self._store.write(NODES, node, create=False)

    def delete_node(self, name: str) -> int:
        """Delete a node (DELETED); returns the deletion's resourceVersion."""
        return self._store.delete(NODES, ("", name))

    def load(
        self,
        pods: Iterable[Mapping[str, Any]] = (),
        nodes: Iterable[Mapping[str, Any]] = (),
        *,
        assign_uids: bool = True,
        claims: Iterable[Mapping[str, Any]] = (),
        slices: Iterable[Mapping[str, Any]] = (),
    ) -> int:
        """Add objects in bulk without watch events (as if they predate every watch).

        With ``assign_uids=False`` objects are served exactly as given, even
        without a UID, to feed clients malformed objects. ResourceClaims and
        ResourceSlices are dropped when no resource.k8s.io version is served.
        """
        return self._store.load(pods, nodes, assign_uids=assign_uids, claims=claims, slices=slices)

    def add_claim(self, claim: Mapping[str, Any]) -> int:
        """Create a ResourceClaim (ADDED); returns its resourceVersion."""
        return self._store.write(RESOURCE_CLAIMS, claim, create=True)

    def update_claim(self, claim: Mapping[str, Any]) -> int:
        """Replace a ResourceClaim (MODIFIED); returns its resourceVersion."""
        return self._store.write(RESOURCE_CLAIMS, claim, create=False)

    def delete_claim(self, namespace: str, name: str) -> int:
        """Delete a ResourceClaim (DELETED); returns the deletion's resourceVersion."""
        return self._store.delete(RESOURCE_CLAIMS, (namespace, name))

    def add_slice(self, item: Mapping[str, Any]) -> int:
        """Create a ResourceSlice (ADDED); returns its resourceVersion."""
        return self._store.write(RESOURCE_SLICES, item, create=True)

    def delete_slice(self, name: str) -> int:
        """Delete a ResourceSlice (DELETED); returns the deletion's resourceVersion."""
        return self._store.delete(RESOURCE_SLICES, ("", name))

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as served now, if any."""
        return self._store.get(PODS, (namespace, name))

    def node(self, name: str) -> dict[str, Any] | None:
        """The node as served now, if any."""
        return self._store.get(NODES, ("", name))

    def inject_watch_line(self, resource: str, line: bytes) -> int:
        """Send ``line`` verbatim (plus a newline) to the open watches of ``resource``, in order.

        Like an ERROR event on the real server, the line is not replayed to
        watches opened later.
        """
        return self._store.inject(resource, line)

    # -- test controls ---------------------------------------------------------

    def expire_watches(self) -> None:
        """Every resourceVersion handed out so far becomes too old.

        Open watches get the 410 Gone ERROR event and end; new watches from an
        old resourceVersion get it too, so the client has to list again.
        """
        self._store.expire()

    force_gone = expire_watches

    def drop_watches(self) -> None:
        """Close every open watch connection abruptly, mid-stream."""
        self._store.drop()

    def pause_lists(self, resource: str | None = None) -> None:
        """Hold list requests (of one resource, or all) until resume_lists()."""
        for name, gate in self._lister.open.items():
            if resource in (None, name):
                gate.clear()

    def resume_lists(self, resource: str | None = None) -> None:
        """Answer the held list requests (of one resource, or all)."""
        for name, gate in self._lister.open.items():
            if resource in (None, name):
                gate.set()

    @contextlib.contextmanager
    def lists_paused(self, resource: str | None = None) -> Iterator[None]:
        """Hold list requests for the duration of the block."""
        self.pause_lists(resource)
        try:
            yield
        finally:
            self.resume_lists(resource)

    def pause_watches(self, resource: str | None = None) -> None:
        """Hold new watch requests (of one resource, or all) until resume_watches().

        Held requests are counted (``count``, ``wait_for``) but get no answer
        yet, so a client that lost its watch stays disconnected meanwhile.
        """
        for name, gate in self._watches_open.items():
            if resource in (None, name):
                gate.clear()

    def resume_watches(self, resource: str | None = None) -> None:
        """Let the held watch requests (of one resource, or all) start streaming."""
        for name, gate in self._watches_open.items():
            if resource in (None, name):
                gate.set()

    @contextlib.contextmanager
    def watches_paused(self, resource: str | None = None) -> Iterator[None]:
        """Hold new watch requests for the duration of the block."""
        self.pause_watches(resource)
        try:
            yield
        finally:
            self.resume_watches(resource)

    def watching(self, resource: str | None = None) -> int:
        """How many watch streams (of ``resource``, or all) are open now."""
        if resource is None:
            return sum(self._store.active_watches.values())
        return self._store.active_watches[resource]

    def count(self, resource: str, verb: str) -> int:
        """Requests received for ``resource`` ("pods"/"nodes") and ``verb`` ("list"/"watch")."""
        return self.requests[(resource, verb)]

    def wait_for(self, resource: str, verb: str, count: int, timeout: float = 15.0) -> bool:
        """Wait until ``count(resource, verb) >= count``; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.requests[(resource, verb)] < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    # -- request handling ------------------------------------------------------

    def get(self, exchange: Exchange, path: str, params: dict[str, str]) -> None:
        """Answer one GET: discovery, a list, a watch or one object, else a 404 Status."""
        document = (
            version_document() if path == "/version" else discovery_document(path, self.dra_version)
        )
        if document is not None:
            return exchange.send_json(200, document)
        if self.services.handles(path):
            return self.services.get(exchange, path, params)
        target = route(path, self.dra_version)
        if target is None:
            message = "the server could not find the requested resource"
            return exchange.send_json(404, status(404, "NotFound", message))
        resource, namespace, name = target
        watch = params.get("watch") in ("1", "true", "True")
        self._note_request(resource, "watch" if watch else "get" if name else "list", path, params)
        render = self._renderer(resource, exchange.headers.get("Accept"), params)
        if resource == NAMESPACES:
            return self._namespaces(exchange, name, watch, params, render)
        if watch:
            if params.get("resourceVersion", "0") not in ("", "0"):
                int(params["resourceVersion"])
            if name:  # the deprecated watch of one object's path: a watch by name
                fields = (params.get("fieldSelector"), f"metadata.name={name}")
                params = {**params, "fieldSelector": ",".join(f for f in fields if f)}
            while not self._watches_open[resource].wait(0.1):
                if self._store.stopping:
                    return exchange.send_json(
                        503, status(503, "ServiceUnavailable", "shutting down")
                    )
            stream_watch(
                self._store,
                exchange,
                resource,
                namespace,
                params,
                bookmark_interval=self.bookmark_interval,
                render=render,
            )
        elif name:
            found = self._store.objects[resource].get((namespace or "", name))
            if found is None:
                return exchange.send_json(404, not_found(resource, name))
            exchange.send(200, found.raw if render is None else render(found.raw))
        else:
            code, body = self._lister.body(resource, namespace, params)
            if render is not None and code == 200:
                include = tables.include_object(params)
                body = tables.list_table(OBJECT_KIND[resource], body, include, self.clock())
            exchange.send(code, body)

    def _namespaces(
        self,
        exchange: Exchange,
        name: str | None,
        watch: bool,
        params: dict[str, str],
        render: Callable[[bytes], bytes] | None,
    ) -> None:
        if watch:
            message = "the stub API server does not watch namespaces"
            return exchange.send_json(405, status(405, "MethodNotAllowed", message))
        if name:
            body = namespace_body(self._store, name)
            if body is None:
                return exchange.send_json(404, not_found(NAMESPACES, name))
            return exchange.send(200, body if render is None else render(body))
        body = namespace_list_body(self._store, params)
        if render is not None:
            body = tables.list_table("Namespace", body, tables.include_object(params), self.clock())
        exchange.send(200, body)

    def _renderer(
        self, resource: str, accept: str | None, params: dict[str, str]
    ) -> Callable[[bytes], bytes] | None:
        """None to serve objects as stored; else how to serve each one as a one-row Table."""
        if not tables.wants_table(accept):
            return None
        kind, include = _KIND[resource], tables.include_object(params)
        return lambda raw: tables.object_table(kind, raw, include, self.clock())

    def post(self, exchange: Exchange, path: str, body: bytes) -> None:
        """Answer one POST: a review or a service-proxied request, else 405 (read-only)."""
        if self.services.handles(path):
            return self.services.post(exchange, path, body)
        try:
            request = orjson.loads(body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"the request body is not JSON: {exc}") from None
        answer = self.reviews.answer(path, request if isinstance(request, dict) else {})
        if answer is None:
            return exchange.send_json(405, read_only())
        exchange.send_json(*answer)

    def _note_request(self, resource: str, verb: str, path: str, params: dict[str, str]) -> None:
        with self._cond:
            self.requests[(resource, verb)] += 1
            self.request_log.append((path, params))
            self._cond.notify_all()
