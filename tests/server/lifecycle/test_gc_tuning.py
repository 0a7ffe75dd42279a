"""The collector's record: each run counted by generation, and nothing left behind after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from api.lifecycle.gc_tuning import GcPauses, gc_pauses_recorded


@pytest.fixture
def no_automatic_collections() -> Iterator[None]:
    """Only the collections a test asks for run while it does."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.usefixtures("no_automatic_collections")
def test_each_collection_is_counted_under_its_generation_with_the_time_it_took() -> None:
    with gc_pauses_recorded() as pauses:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    assert pauses.collections == [1, 0, 2]
    assert pauses.seconds[0] > 0 and pauses.seconds[2] > 0
    assert pauses.seconds[1] == 0.0


@pytest.mark.usefixtures("no_automatic_collections")
def test_the_record_stops_with_its_block_and_leaves_no_hook_behind() -> None:
    hooks = list(gc.callbacks)
    with gc_pauses_recorded() as pauses:
        assert len(gc.callbacks) == len(hooks) + 1
    gc.collect(1)
    assert pauses.collections == [0, 0, 0]
    assert gc.callbacks == hooks


def test_a_collection_under_way_when_the_record_starts_is_not_counted() -> None:
    # Another thread's collection began before the hook was added: only its end is seen.
    pauses = GcPauses()
    pauses.on_collection("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    assert pauses.collections == [0, 0, 0] and pauses.seconds == [0.0, 0.0, 0.0]
    pauses.on_collection("start", {"generation": 0})
    pauses.on_collection("stop", {"generation": 0, "collected": 0, "uncollectable": 0})
    assert pauses.collections == [1, 0, 0]
    # A lone stop after a pair is not one more.
    pauses.on_collection("stop", {"generation": 0, "collected": 0, "uncollectable": 0})
    assert pauses.collections == [1, 0, 0]
