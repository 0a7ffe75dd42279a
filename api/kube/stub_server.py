"""A small fake Kubernetes API server for tests, the demo and the benchmarks.

It is a real HTTP server on a loopback port that speaks the API server's wire
format for pods and nodes, so the official client talks to it unchanged:

- ``GET /api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``, ``/api/v1/nodes``:
  ``PodList``/``NodeList`` carrying ``metadata.resourceVersion``, paginated by
  ``limit`` with ``continue`` tokens over a consistent snapshot;
- ``?watch=true``: a chunked stream of ``{"type": ..., "object": ...}`` lines
  after ``resourceVersion``, with ``BOOKMARK`` events when
  ``allowWatchBookmarks=true``, ended after ``timeoutSeconds``; a watch from
  a resourceVersion older than the bounded event history gets the
  ``ERROR`` event with a ``410 Gone`` Status, as the real server sends it;
- ``labelSelector`` (``k=v``, ``k!=v``, ``k``, ``!k``) and the
  ``fieldSelector``s ``spec.nodeName``, ``metadata.name`` and
  ``metadata.namespace``.

Test controls change objects (each change is a watch event), expire or drop
the open watches, hold list requests, and count requests.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import json
import signal
import socket
import sys
import threading
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
from kubernetes.client import Configuration

from .objects import make_node, make_pod

__all__ = [
    "StubApiServer",
    "demo_cluster",
    "demo_nodes",
    "demo_pods",
    "kubeconfig_for",
    "make_node",
    "make_pod",
    "write_kubeconfig",
]

PODS = "pods"
NODES = "nodes"
_LIST_KIND = {PODS: b"PodList", NODES: b"NodeList"}
_OBJECT_KIND = {PODS: "Pod", NODES: "Node"}
_SNAPSHOTS_KEPT = 16


@dataclass(frozen=True, slots=True)
class _Stored:
    namespace: str
    name: str
    node_name: str
    labels: Mapping[str, str]
    raw: bytes  # the object as served, resourceVersion included


@dataclass(frozen=True, slots=True)
class _Event:
    rv: int
    resource: str
    type: str
    item: _Stored | None
    line: bytes = b""  # sent verbatim when item is None (injected garbage)


class _Dropped(Exception):
    """The watch connection was closed abruptly on purpose."""


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _gone_event(rv: int, compacted: int) -> bytes:
    status = _status(410, "Expired", f"too old resource version: {rv} ({compacted})")
    return orjson.dumps({"type": "ERROR", "object": status}) + b"\n"


class _Selector:
    """A parsed labelSelector plus fieldSelector."""

    def __init__(self, labels: str | None, fields: str | None) -> None:
        self.required: list[tuple[str, str, str]] = []  # (op, key, value)
        for term in _terms(labels):
            if "!=" in term:
                key, value = term.split("!=", 1)
                self.required.append(("!=", key.strip(), value.strip()))
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                self.required.append(("=", key.strip(), value.strip()))
            elif term.startswith("!"):
                self.required.append(("!", term[1:].strip(), ""))
            else:
                self.required.append(("exists", term, ""))
        self.fields: list[tuple[str, str, bool]] = []  # (field, value, equal)
        for term in _terms(fields):
            equal = "!=" not in term
            key, value = term.replace("!=", "=").replace("==", "=").split("=", 1)
            if key not in ("spec.nodeName", "metadata.name", "metadata.namespace"):
                raise ValueError(f"field selector {key!r} is not supported")
            self.fields.append((key, value, equal))

    def matches(self, item: _Stored) -> bool:
        for op, key, value in self.required:
            present = key in item.labels
            if op == "=" and item.labels.get(key) != value:
                return False
            if op == "!=" and item.labels.get(key) == value:
                return False
            if op == "exists" and not present:
                return False
            if op == "!" and present:
                return False
        for key, value, equal in self.fields:
            actual = {
                "spec.nodeName": item.node_name,
                "metadata.name": item.name,
                "metadata.namespace": item.namespace,
            }[key]
            if (actual == value) != equal:
                return False
        return True


def _terms(selector: str | None) -> list[str]:
    return [t.strip() for t in (selector or "").split(",") if t.strip()]


class StubApiServer:
    """A fake Kubernetes API server on ``127.0.0.1``; use as a context manager or start()/stop()."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        history_limit: int = 10_000,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.history_limit = history_limit
        self.bookmark_interval = bookmark_interval
        # Seconds each list response waits before it is sent (slow API server).
        self.list_delay = 0.0
        self._cond = threading.Condition()
        self._rv = 1
        self._store: dict[str, dict[tuple[str, str], _Stored]] = {PODS: {}, NODES: {}}
        self._history: deque[_Event] = deque()
        self._compacted = 0  # watches from a resourceVersion below this get 410 Gone
        self._gone_epoch = 0
        self._drop_epoch = 0
        self._stopping = False
        self._lists_open = {PODS: threading.Event(), NODES: threading.Event()}
        for gate in self._lists_open.values():
            gate.set()
        self._snapshots: OrderedDict[str, tuple[int, tuple[_Stored, ...]]] = OrderedDict()
        self._snapshot_ids = itertools.count(1)
        self._active_watches: Counter[str] = Counter()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.request_log: deque[tuple[str, dict[str, str]]] = deque(maxlen=1000)
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.api = self
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
        """Stop serving and end every open watch."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for gate in self._lists_open.values():
            gate.set()
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
    def resource_version(self) -> int:
        """The latest resourceVersion handed out."""
        return self._rv

    def add_pod(self, pod: Mapping[str, Any]) -> int:
        """Create a pod (ADDED); returns its resourceVersion."""
        return self._write(PODS, pod, create=True)

    def update_pod(self, pod: Mapping[str, Any]) -> int:
        """Replace an existing pod (MODIFIED); returns its resourceVersion."""
        return self._write(PODS, pod, create=False)

    def delete_pod(self, namespace: str, name: str) -> int:
        """Delete a pod (DELETED); returns the deletion's resourceVersion."""
        return self._delete(PODS, (namespace, name))

    def add_node(self, node: Mapping[str, Any]) -> int:
        """Create a node (ADDED); returns its resourceVersion."""
        return self._write(NODES, node, create=True)

    def update_node(self, node: Mapping[str, Any]) -> int:
        """Replace an existing node (MODIFIED); returns its resourceVersion."""
        return self._write(NODES, node, create=False)

    def delete_node(self, name: str) -> int:
        """Delete a node (DELETED); returns the deletion's resourceVersion."""
        return self._delete(NODES, ("", name))

    def load(
        self,
        pods: Iterable[Mapping[str, Any]] = (),
        nodes: Iterable[Mapping[str, Any]] = (),
        *,
        assign_uids: bool = True,
    ) -> int:
        """Add objects in bulk without watch events (as if they predate every watch).

        With ``assign_uids=False`` objects are served exactly as given, even
        without a UID, to feed clients malformed objects.
        """
        with self._cond:
            self._rv += 1
            rv = self._rv
            for resource, objs in ((PODS, pods), (NODES, nodes)):
                store = self._store[resource]
                for obj in objs:
                    item = _stored(resource, obj, rv, create=assign_uids)
                    store[(item.namespace, item.name)] = item
            self._compacted = rv
            self._history.clear()
            self._cond.notify_all()
        return rv

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as served now, if any."""
        item = self._store[PODS].get((namespace, name))
        return orjson.loads(item.raw) if item is not None else None

    def node(self, name: str) -> dict[str, Any] | None:
        """The node as served now, if any."""
        item = self._store[NODES].get(("", name))
        return orjson.loads(item.raw) if item is not None else None

    def _write(self, resource: str, obj: Mapping[str, Any], *, create: bool) -> int:
        with self._cond:
            rv = self._rv + 1
            item = _stored(resource, obj, rv, create=create)
            key = (item.namespace, item.name)
            exists = key in self._store[resource]
            if create and exists:
                raise ValueError(f"{resource} {key} already exists")
            if not create and not exists:
                raise KeyError(f"{resource} {key} not found")
            self._rv = rv
            self._store[resource][key] = item
            self._record(_Event(rv, resource, "ADDED" if create else "MODIFIED", item))
        return rv

    def _delete(self, resource: str, key: tuple[str, str]) -> int:
        with self._cond:
            old = self._store[resource].pop(key, None)
            if old is None:
                raise KeyError(f"{resource} {key} not found")
            self._rv += 1
            obj = orjson.loads(old.raw)
            item = _stored(resource, obj, self._rv, create=False)
            self._record(_Event(self._rv, resource, "DELETED", item))
            return self._rv

    def inject_watch_line(self, resource: str, line: bytes) -> int:
        """Send ``line`` verbatim (plus a newline) to the open watches of ``resource``, in order.

        Like an ERROR event on the real server, the line is not replayed to
        watches opened later.
        """
        with self._cond:
            self._rv += 1
            self._record(_Event(self._rv, resource, "RAW", None, line.rstrip(b"\n") + b"\n"))
            return self._rv

    def _record(self, event: _Event) -> None:
        self._history.append(event)
        while len(self._history) > self.history_limit:
            self._compacted = self._history.popleft().rv
        self._cond.notify_all()

    # -- test controls ---------------------------------------------------------

    def expire_watches(self) -> None:
        """Every resourceVersion handed out so far becomes too old.

        Open watches get the 410 Gone ERROR event and end; new watches from an
        old resourceVersion get it too, so the client has to list again.
        """
        with self._cond:
            self._rv += 1
            self._compacted = self._rv
            self._history.clear()
            self._gone_epoch += 1
            self._cond.notify_all()

    force_gone = expire_watches

    def drop_watches(self) -> None:
        """Close every open watch connection abruptly, mid-stream."""
        with self._cond:
            self._drop_epoch += 1
            self._cond.notify_all()

    def pause_lists(self, resource: str | None = None) -> None:
        """Hold list requests (of one resource, or all) until resume_lists()."""
        for name, gate in self._lists_open.items():
            if resource in (None, name):
                gate.clear()

    def resume_lists(self, resource: str | None = None) -> None:
        """Answer the held list requests (of one resource, or all)."""
        for name, gate in self._lists_open.items():
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

    def watching(self, resource: str | None = None) -> int:
        """How many watch streams (of ``resource``, or all) are open now."""
        if resource is None:
            return sum(self._active_watches.values())
        return self._active_watches[resource]

    def count(self, resource: str, verb: str) -> int:
        """Requests received for ``resource`` ("pods"/"nodes") and ``verb`` ("list"/"watch")."""
        return self.requests[(resource, verb)]

    def wait_for(self, resource: str, verb: str, count: int, timeout: float = 5.0) -> bool:
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

    def _note_request(self, resource: str, verb: str, path: str, params: dict[str, str]) -> None:
        with self._cond:
            self.requests[(resource, verb)] += 1
            self.request_log.append((path, params))
            self._cond.notify_all()

    def _list_body(
        self, resource: str, namespace: str | None, params: dict[str, str]
    ) -> tuple[int, bytes]:
        while not self._lists_open[resource].wait(0.1):
            if self._stopping:
                return 503, orjson.dumps(_status(503, "ServiceUnavailable", "shutting down"))
        if self.list_delay:
            time.sleep(self.list_delay)
        token = params.get("continue")
        if token:
            try:
                snapshot_id, offset_text = base64.urlsafe_b64decode(token).decode().split(":")
                offset = int(offset_text)
                rv, items = self._snapshots[snapshot_id]
            except (ValueError, KeyError, UnicodeDecodeError):
                message = "The provided continue parameter is too old or invalid."
                return 410, orjson.dumps(_status(410, "Expired", message))
        else:
            selector = _Selector(params.get("labelSelector"), params.get("fieldSelector"))
            with self._cond:
                rv = self._rv
                values: Iterable[_Stored] = self._store[resource].values()
                items = tuple(
                    i
                    for i in values
                    if (namespace is None or i.namespace == namespace) and selector.matches(i)
                )
            snapshot_id = str(next(self._snapshot_ids))
            offset = 0
        limit = int(params.get("limit") or 0)
        end = offset + limit if limit > 0 else len(items)
        page = items[offset:end]
        metadata = f'"resourceVersion":"{rv}"'
        if end < len(items):
            with self._cond:
                self._snapshots[snapshot_id] = (rv, items)
                self._snapshots.move_to_end(snapshot_id)
                while len(self._snapshots) > _SNAPSHOTS_KEPT:
                    self._snapshots.popitem(last=False)
            next_token = base64.urlsafe_b64encode(f"{snapshot_id}:{end}".encode()).decode()
            metadata += f',"continue":"{next_token}","remainingItemCount":{len(items) - end}'
        body = b"".join(
            (
                b'{"kind":"',
                _LIST_KIND[resource],
                b'","apiVersion":"v1","metadata":{',
                metadata.encode(),
                b'},"items":[',
                b",".join(item.raw for item in page),
                b"]}",
            )
        )
        return 200, body

    def _watch(
        self,
        handler: _Handler,
        resource: str,
        namespace: str | None,
        params: dict[str, str],
    ) -> None:
        selector = _Selector(params.get("labelSelector"), params.get("fieldSelector"))
        timeout = float(params.get("timeoutSeconds") or 1800)
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1", "True")
        since = params.get("resourceVersion") or "0"
        deadline = time.monotonic() + timeout
        handler.begin_chunked()

        def matching(item: _Stored) -> bool:
            return (namespace is None or item.namespace == namespace) and selector.matches(item)

        with self._cond:
            self._active_watches[resource] += 1
            opened_at = self._rv
            gone_epoch, drop_epoch = self._gone_epoch, self._drop_epoch
            if since == "0":
                # No resourceVersion: replay the current state as ADDED events.
                cursor = self._rv
                initial = [
                    _event_line("ADDED", i) for i in self._store[resource].values() if matching(i)
                ]
            else:
                cursor = int(since)
                initial = [_gone_event(cursor, self._compacted)] if cursor < self._compacted else []
        try:
            if initial:
                handler.send_chunk(b"".join(initial))
                if since != "0":
                    return handler.end_chunked()
            next_bookmark = time.monotonic() + self.bookmark_interval
            while True:
                lines: list[bytes] = []
                ending = False
                with self._cond:
                    if self._stopping or self._drop_epoch != drop_epoch:
                        raise _Dropped()
                    if self._gone_epoch != gone_epoch or cursor < self._compacted:
                        lines.append(_gone_event(cursor, self._compacted))
                        ending = True
                    else:
                        fresh: list[_Event] = []
                        for event in reversed(self._history):
                            if event.rv <= cursor:
                                break
                            fresh.append(event)
                        cursor = self._rv
                        for e in reversed(fresh):
                            if e.resource != resource:
                                continue
                            if e.item is None:
                                if e.rv > opened_at:
                                    lines.append(e.line)
                            elif matching(e.item):
                                lines.append(_event_line(e.type, e.item))
                    now = time.monotonic()
                    if not lines and now < deadline and (not bookmarks or now < next_bookmark):
                        wake = min(deadline, next_bookmark if bookmarks else deadline)
                        self._cond.wait(min(wake - now, 0.5))
                        continue
                if lines:
                    handler.send_chunk(b"".join(lines))
                if ending:
                    break
                now = time.monotonic()
                if bookmarks and now >= next_bookmark:
                    handler.send_chunk(_bookmark_line(resource, cursor))
                    next_bookmark = now + self.bookmark_interval
                if now >= deadline:
                    break
            handler.end_chunked()
        finally:
            with self._cond:
                self._active_watches[resource] -= 1
                self._cond.notify_all()


def _stored(resource: str, obj: Mapping[str, Any], rv: int, *, create: bool) -> _Stored:
    metadata = dict(obj.get("metadata") or {})
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{_OBJECT_KIND[resource]} needs metadata.name")
    if resource == PODS:
        metadata.setdefault("namespace", "default")
    if create:
        metadata.setdefault("uid", str(uuid.uuid4()))
    metadata["resourceVersion"] = str(rv)
    served = {"kind": _OBJECT_KIND[resource], "apiVersion": "v1", **obj, "metadata": metadata}
    spec = obj.get("spec") or {}
    return _Stored(
        namespace=metadata.get("namespace", "") if resource == PODS else "",
        name=name,
        node_name=(spec.get("nodeName") or "") if resource == PODS else "",
        labels=dict(metadata.get("labels") or {}),
        raw=orjson.dumps(served),
    )


def _event_line(kind: str, item: _Stored) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + item.raw + b"}\n"


def _bookmark_line(resource: str, rv: int) -> bytes:
    metadata = {"resourceVersion": str(rv)}
    obj = {"kind": _OBJECT_KIND[resource], "apiVersion": "v1", "metadata": metadata}
    return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    api: StubApiServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-response are routine here (stop(), dropped watches).
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError | _Dropped):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        api = self.server.api
        parts = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        route = _route(parts.path)
        if route is None:
            message = f"the server could not find {parts.path}"
            return self._send_json(404, _status(404, "NotFound", message))
        resource, namespace = route
        watch = params.get("watch") in ("1", "true", "True")
        api._note_request(resource, "watch" if watch else "list", parts.path, params)
        try:
            if watch:
                if params.get("resourceVersion", "0") not in ("", "0"):
                    int(params["resourceVersion"])
                api._watch(self, resource, namespace, params)
            else:
                code, body = api._list_body(resource, namespace, params)
                self._send(code, body)
        except _Dropped:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except ValueError as exc:
            self._send_json(400, _status(400, "BadRequest", str(exc)))

    def do_POST(self) -> None:
        # Consume the body so the kept-alive connection stays in sync.
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send_json(405, _status(405, "MethodNotAllowed", "the stub API server is read-only"))

    do_PUT = do_PATCH = do_DELETE = do_POST

    def _send_json(self, code: int, obj: Any) -> None:
        self._send(code, orjson.dumps(obj))

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def begin_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")


def _route(path: str) -> tuple[str, str | None] | None:
    parts = path.strip("/").split("/")
    if parts[:2] != ["api", "v1"]:
        return None
    rest = parts[2:]
    if rest == [PODS]:
        return PODS, None
    if rest == [NODES]:
        return NODES, None
    if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == PODS:
        return PODS, rest[1]
    return None


def kubeconfig_for(url: str, token: str | None = None) -> Configuration:
    """A client Configuration for the API server at ``url``."""
    configuration = Configuration()
    configuration.host = url
    if token:
        configuration.api_key = {"BearerToken": f"Bearer {token}"}
    return configuration


def write_kubeconfig(path: str, url: str, token: str | None = None) -> str:
    """Write a kubeconfig file for ``url`` (JSON, which is valid YAML); returns ``path``."""
    user: dict[str, Any] = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stub", "cluster": {"server": url}}],
        "users": [{"name": "stub", "user": user}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
        "current-context": "stub",
    }
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return path


def _loopback_ip(n: int) -> str:
    return f"127.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"


def demo_nodes(nodes: int) -> Iterator[dict[str, Any]]:
    """GPU nodes ``node-0`` ... with InternalIPs 127.0.0.2, 127.0.0.3, ... (agents on loopback)."""
    for n in range(nodes):
        yield make_node(f"node-{n}", _loopback_ip(n + 2))


def demo_pods(
    pods: int, nodes: int, *, namespaces: int = 20, managed_fields: bool = True
) -> Iterator[dict[str, Any]]:
    """``pods`` one-GPU worker pods spread round-robin over ``nodes`` nodes and ``namespaces``."""
    for i in range(pods):
        yield make_pod(
            f"worker-{i}",
            f"team-{i % namespaces}",
            f"node-{i % nodes}" if nodes else None,
            gpu_limit=1,
            labels={"app": f"job-{i // 8}", "pod-template-hash": f"{i // 8:x}"},
            managed_fields=managed_fields,
        )


def demo_cluster(
    pods: int, nodes: int, *, namespaces: int = 20, managed_fields: bool = True
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods of demo_pods() and the nodes of demo_nodes(), as lists."""
    pod_objs = list(demo_pods(pods, nodes, namespaces=namespaces, managed_fields=managed_fields))
    return pod_objs, list(demo_nodes(nodes))


def main(argv: list[str] | None = None) -> int:
    """Run a stub API server with a generated cluster until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m api.kube.stub_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--slim", action="store_true", help="leave out managedFields")
    args = parser.parse_args(argv)
    server = StubApiServer(host=args.host, port=args.port)
    server.load(
        pods=demo_pods(args.pods, args.nodes, managed_fields=not args.slim),
        nodes=demo_nodes(args.nodes),
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with server:
        print(f"listening on {server.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
