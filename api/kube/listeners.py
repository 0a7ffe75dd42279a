"""The listeners a watch cache tells of its changes, shared by the pod and DRA caches.

Copy-on-write: the writing thread iterates the tuple it read, without a lock, while
other threads subscribe and unsubscribe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Listeners"]

L = TypeVar("L")


class Listeners(Generic[L]):
    """A set of listeners in subscription order, safe to change while being told."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: tuple[L, ...] = ()

    def add(self, listener: L) -> Callable[[], None]:
        """Add ``listener``; returns the call that removes it."""
        with self._lock:
            self._items = (*self._items, listener)

        def remove() -> None:
            with self._lock:
                self._items = tuple(x for x in self._items if x is not listener)

        return remove

    def __iter__(self) -> Iterator[L]:
        return iter(self._items)
