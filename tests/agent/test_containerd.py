"""ContainerdPidMap's caching rules, with a stand-in for containerd and a hand-driven clock."""

from __future__ import annotations

import logging
import os

import pytest

from node_resolver.containerd import ContainerdError, ContainerdPidMap

TICKS = os.sysconf("SC_CLK_TCK")  # clock ticks per second, the unit of start times
SETTLE = 2 * TICKS
RETRY = 5 * TICKS
OLD = "a" * 64
NEW = "b" * 64


class FakeContainerd:
    """Answers pid_map() with ``tasks``, or raises while ``down``; counts the calls."""

    socket_path = "/run/fake-containerd.sock"

    def __init__(self, tasks: dict[int, str]) -> None:
        self.tasks = dict(tasks)
        self.down = False
        self.calls = 0

    def pid_map(self) -> dict[int, str]:
        self.calls += 1
        if self.down:
            raise ContainerdError("containerd is down")
        return dict(self.tasks)


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def pid_map(containerd: FakeContainerd, clock: Clock) -> ContainerdPidMap:
    return ContainerdPidMap(containerd, settle_seconds=2, retry_seconds=5, clock=clock)


def test_a_process_older_than_the_map_is_answered_from_it() -> None:
    containerd, clock = FakeContainerd({100: OLD}), Clock(10_000)
    cache = pid_map(containerd, clock)
    assert cache.lookup([(100, 1_000), (200, 1_000)]) == {100: OLD}
    clock.now += 100 * TICKS
    # Both processes predate the map by more than the settle window: no new round trip.
    assert cache.lookup([(100, 1_000), (200, 1_000)]) == {100: OLD}
    assert containerd.calls == 1


def test_a_reused_pid_is_never_given_the_old_container() -> None:
    containerd, clock = FakeContainerd({100: OLD}), Clock(10_000)
    cache = pid_map(containerd, clock)
    assert cache.lookup([(100, 1_000)]) == {100: OLD}
    # The container exits and a host process gets PID 100 after the map was built.
    containerd.tasks = {}
    clock.now = 20_000
    assert cache.lookup([(100, 15_000)]) == {}
    assert containerd.calls == 2
    # ...then a process of another container gets it.
    containerd.tasks = {100: NEW}
    clock.now = 30_000
    assert cache.lookup([(100, 25_000)]) == {100: NEW}


def test_a_reused_pid_stays_unresolved_while_containerd_is_down() -> None:
    containerd, clock = FakeContainerd({100: OLD}), Clock(10_000)
    cache = pid_map(containerd, clock)
    assert cache.lookup([(100, 1_000)]) == {100: OLD}
    containerd.down = True
    clock.now = 20_000
    # The stale map still says OLD for PID 100, but this process started after it was built.
    assert cache.lookup([(100, 15_000)]) == {}


def test_a_process_within_the_settle_window_triggers_a_refresh() -> None:
    containerd, clock = FakeContainerd({}), Clock(10_000)
    cache = pid_map(containerd, clock)
    young = 10_000 - SETTLE // 2  # started just before the map was built
    assert cache.lookup([(100, young)]) == {}
    # containerd registers the task a moment later; the next lookup asks again and finds it.
    containerd.tasks = {100: NEW}
    clock.now += 1
    assert cache.lookup([(100, young)]) == {100: NEW}
    assert containerd.calls == 2
    # Once the process is older than the map by the settle window, the map vouches for it.
    clock.now += SETTLE
    containerd.tasks = {}
    cache.lookup([(100, young)])  # refresh: built now, long after the process started
    calls = containerd.calls
    assert cache.lookup([(100, young)]) == {}
    assert containerd.calls == calls


def test_after_a_failure_containerd_is_asked_again_only_after_the_retry_delay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    containerd, clock = FakeContainerd({100: OLD}), Clock(10_000)
    cache = pid_map(containerd, clock)
    assert cache.lookup([(100, 1_000)]) == {100: OLD}
    containerd.down = True
    newcomer = (200, 12_000)  # started after the map: needs a refresh
    clock.now = 13_000
    with caplog.at_level(logging.WARNING, logger="node_resolver.containerd"):
        for _ in range(5):
            # The stale map still answers for the process it knows.
            assert cache.lookup([(100, 1_000), newcomer]) == {100: OLD}
    assert containerd.calls == 2, "one failed refresh, then none until the retry delay"
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    clock.now += RETRY - 1
    cache.lookup([newcomer])
    assert containerd.calls == 2
    clock.now += 1
    containerd.down = False
    containerd.tasks = {100: OLD, 200: NEW}
    assert cache.lookup([(100, 1_000), newcomer]) == {100: OLD, 200: NEW}
    assert containerd.calls == 3
