"""Garbage-collector settings for a long-running server with a large, stable cache,
and a record of the collector's pauses for ``/metrics``."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["GcPauses", "gc_paused", "gc_pauses_recorded", "tune_gc_for_serving"]

# Allocations (minus frees) between young-generation collections; CPython's default is 700.
# Above what a whole-cluster answer holds alive while it is built at 10,000 nodes (its
# coroutines, frames, dicts and fragments), so that polls do not set collections off
# (bench/README.md, section 27).
YOUNG_THRESHOLD = 500_000


def tune_gc_for_serving() -> None:
    """Move everything alive now out of the collector's reach, and collect the young rarely.

    Call it once the Kubernetes cache has filled. The cache then holds some
    100k long-lived records that every full collection would rescan for
    nothing; ``gc.freeze`` moves them to the permanent generation. Queries and
    refreshes allocate objects that reference counting frees (a snapshot's
    graph objects hold no cycles), so the count that starts a collection rises
    while an answer is being built and falls back as it is freed. A young
    collection traverses every live object made since the last one: below what
    an answer holds, that was the answer's objects and those of every node
    refreshed since, once a poll, and every twentieth time the survivors of
    twenty of them. Collecting rarely costs nothing but cycles, which wait longer.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)


class GcPauses:
    """How often the cyclic collector ran while recorded, and how long it held the
    interpreter, by generation (0 young, 1 middle, 2 full)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started: float | None = None

    def on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks``' hook: the start and the end of one collection."""
        # One collection runs at a time, so a stop ends the last start; but the hook
        # may be added while another thread's collection runs, whose stop comes alone.
        if phase == "start":
            self._started = time.perf_counter()
            return
        started, self._started = self._started, None
        if started is None:
            return
        generation = info["generation"]
        self.collections[generation] += 1
        self.seconds[generation] += time.perf_counter() - started


@contextlib.contextmanager
def gc_pauses_recorded() -> Iterator[GcPauses]:
    """Record the collector's pauses until the block ends."""
    pauses = GcPauses()
    gc.callbacks.append(pauses.on_collection)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(pauses.on_collection)


_gc_lock = threading.Lock()
_gc_holders = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a list page is parsed.

    Parsing a page allocates tens of thousands of dicts; without the pause
    the collector's repeated scans take most of the parse time. Nested and
    concurrent pauses (the pod and node loops) re-enable it only when the
    last one ends, and never enable a collector that was already off.
    """
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()
