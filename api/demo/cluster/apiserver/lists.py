"""``GET`` of a collection: a consistent snapshot, paginated by ``limit`` and ``continue``."""

from __future__ import annotations

import base64
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable

import orjson

from .selectors import Selector
from .status import status
from .store import OBJECT_KIND, ObjectStore, Stored

__all__ = ["Lister"]

_LIST_KIND = {resource: f"{kind}List".encode() for resource, kind in OBJECT_KIND.items()}
_SNAPSHOTS_KEPT = 16


class Lister:
    """Answers list requests; holds them while paused, and keeps the snapshots pages come from."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        # Seconds each list response waits before it is sent (slow API server).
        self.delay = 0.0
        self.open = {resource: threading.Event() for resource in OBJECT_KIND}
        for gate in self.open.values():
            gate.set()
        self._snapshots: OrderedDict[str, tuple[int, tuple[Stored, ...]]] = OrderedDict()
        self._snapshot_ids = itertools.count(1)

    def release(self) -> None:
        """Let every held list through (the server is stopping)."""
        for gate in self.open.values():
            gate.set()

    def body(
        self, resource: str, namespace: str | None, params: dict[str, str]
    ) -> tuple[int, bytes]:
        """The status code and body answering one list request."""
        store = self._store
        while not self.open[resource].wait(0.1):
            if store.stopping:
                return 503, orjson.dumps(status(503, "ServiceUnavailable", "shutting down"))
        if self.delay:
            time.sleep(self.delay)
        token = params.get("continue")
        if token:
            try:
                snapshot_id, offset_text = base64.urlsafe_b64decode(token).decode().split(":")
                offset = int(offset_text)
                rv, items = self._snapshots[snapshot_id]
            except (ValueError, KeyError, UnicodeDecodeError):
                message = "The provided continue parameter is too old or invalid."
                return 410, orjson.dumps(status(410, "Expired", message))
        else:
            selector = Selector(params.get("labelSelector"), params.get("fieldSelector"))
            with store.cond:
                rv = store.rv
                values: Iterable[Stored] = store.objects[resource].values()
                matched = [
                    i
                    for i in values
                    if (namespace is None or i.namespace == namespace) and selector.matches(i)
                ]
            # In storage-key order (".../pods/{namespace}/{name}"), as etcd hands them over.
            items = tuple(sorted(matched, key=_storage_key))
            snapshot_id = str(next(self._snapshot_ids))
            offset = 0
        limit = int(params.get("limit") or 0)
        end = offset + limit if limit > 0 else len(items)
        page = items[offset:end]
        metadata = f'"resourceVersion":"{rv}"'
        if end < len(items):
            with store.cond:
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
                b'","apiVersion":"',
                store.api_versions[resource].encode(),
                b'","metadata":{',
                metadata.encode(),
                b'},"items":[',
                b",".join(item.raw for item in page),
                b"]}",
            )
        )
        return 200, body


def _storage_key(item: Stored) -> str:
    return f"{item.namespace}/{item.name}" if item.namespace else item.name
