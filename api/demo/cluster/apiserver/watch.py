"""``?watch=true``: a chunked stream of events after a resourceVersion, with bookmarks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import orjson

from .selectors import Selector
from .status import gone_event
from .store import OBJECT_KIND, Event, ObjectStore, Stored, event_line

__all__ = ["ChunkedStream", "Dropped", "stream_watch"]


class Dropped(Exception):
    """The watch connection was closed abruptly on purpose."""


class ChunkedStream(Protocol):
    """Where a watch writes: an HTTP response in chunked transfer encoding."""

    def begin_chunked(self) -> None:
        """Send the 200 and headers."""

    def send_chunk(self, data: bytes) -> None:
        """Send one chunk."""

    def end_chunked(self) -> None:
        """Send the last (empty) chunk."""


def stream_watch(
    store: ObjectStore,
    stream: ChunkedStream,
    resource: str,
    namespace: str | None,
    params: dict[str, str],
    *,
    bookmark_interval: float,
    render: Callable[[bytes], bytes] | None = None,
) -> None:
    """Serve one watch request until its timeout, an expiry, a drop or the server's stop."""
    selector = Selector(params.get("labelSelector"), params.get("fieldSelector"))
    timeout = float(params.get("timeoutSeconds") or 1800)
    bookmarks = params.get("allowWatchBookmarks") in ("true", "1", "True")
    since = params.get("resourceVersion") or "0"
    deadline = time.monotonic() + timeout
    stream.begin_chunked()

    def matching(item: Stored) -> bool:
        return (namespace is None or item.namespace == namespace) and selector.matches(item)

    with store.cond:
        store.active_watches[resource] += 1
        opened_at = store.rv
        gone_epoch, drop_epoch = store.gone_epoch, store.drop_epoch
        if since == "0":
            # No resourceVersion: replay the current state as ADDED events.
            cursor = store.rv
            initial = [
                event_line("ADDED", i, render)
                for i in store.objects[resource].values()
                if matching(i)
            ]
        else:
            cursor = int(since)
            initial = [gone_event(cursor, store.compacted)] if cursor < store.compacted else []
    try:
        if initial:
            stream.send_chunk(b"".join(initial))
            if since != "0":
                return stream.end_chunked()
        next_bookmark = time.monotonic() + bookmark_interval
        while True:
            lines: list[bytes] = []
            ending = False
            with store.cond:
                if store.stopping or store.drop_epoch != drop_epoch:
                    raise Dropped()
                if store.gone_epoch != gone_epoch or cursor < store.compacted:
                    lines.append(gone_event(cursor, store.compacted))
                    ending = True
                else:
                    fresh: list[Event] = []
                    for event in reversed(store.history):
                        if event.rv <= cursor:
                            break
                        fresh.append(event)
                    # A watch from a resourceVersion not reached yet starts there, as on
                    # the real server: the changes up to it are not sent.
                    cursor = max(cursor, store.rv)
                    for e in reversed(fresh):
                        if e.resource != resource:
                            continue
                        if e.item is None:
                            if e.rv > opened_at:
                                lines.append(e.line)
                        elif matching(e.item):
                            lines.append(event_line(e.type, e.item, render))
                now = time.monotonic()
                if not lines and now < deadline and (not bookmarks or now < next_bookmark):
                    wake = min(deadline, next_bookmark if bookmarks else deadline)
                    store.cond.wait(min(wake - now, 0.5))
                    continue
            if lines:
                stream.send_chunk(b"".join(lines))
            if ending:
                break
            now = time.monotonic()
            if bookmarks and now >= next_bookmark:
                stream.send_chunk(_bookmark_line(resource, cursor))
                next_bookmark = now + bookmark_interval
            if now >= deadline:
                break
        stream.end_chunked()
    finally:
        with store.cond:
            store.active_watches[resource] -= 1
            store.cond.notify_all()


def _bookmark_line(resource: str, rv: int) -> bytes:
    metadata = {"resourceVersion": str(rv)}
    obj = {"kind": OBJECT_KIND[resource], "apiVersion": "v1", "metadata": metadata}
    return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"
