"""The watch caches' listeners: told in order, and removable while being told."""

from __future__ import annotations

from api.kube.listeners import Listeners


def test_a_listener_removed_while_the_writer_tells_them_misses_only_later_changes() -> None:
    listeners: Listeners[str] = Listeners()
    remove_a = listeners.add("a")
    listeners.add("b")
    told = []
    for listener in listeners:
        told.append(listener)
        remove_a()  # from another thread in the caches; the writer's iteration is unaffected
    assert told == ["a", "b"]
    assert list(listeners) == ["b"]
