"""The keep-warm policy over an injected clock and refresh cost: what it keeps warm,
what it drops, the budget it holds, and how old the answers it leads to are."""

from __future__ import annotations

import asyncio
import heapq
import inspect
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest

from api.agents.keep_warm import (
    MAX_STRETCH,
    PLANNED_SHARE,
    REFRESH_AT,
    KeepWarm,
    OwnCpu,
    count_started_tasks,
)
from tests.support.clock import ManualClock

TTL = 1.0
TIMEOUT = 2.0


@dataclass
class Run:
    """What a simulated stretch of reads and refreshes led to."""

    refreshes: int = 0
    fetched_on_read: int = 0
    served: int = 0
    # The age of every snapshot a read found in memory, by node.
    ages: dict[str, list[float]] = field(default_factory=dict)
    refresh_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def cores(self) -> float:
        """Background refresh CPU per second, in cores."""
        return self.refresh_seconds / self.seconds


def simulate(
    policy: KeepWarm,
    clock: ManualClock,
    periods: dict[str, float],
    *,
    seconds: float,
    cost: float | Callable[[int], float],
    warm_up: float = 0.0,
) -> Run:
    """Each node read every ``periods[node]`` seconds, as the pool would serve it: a
    snapshot kept for ``hold``, fetched when a read finds none, refreshed when the
    policy says; each refresh costs ``cost`` of CPU (or ``cost(n)`` for the n-th
    refresh). Counted after ``warm_up``."""
    cost_of = cost if callable(cost) else lambda _: cost
    done = 0
    start = clock.now
    queue: list[tuple[float, int, str, str]] = []
    seq = 0

    def at(when: float, kind: str, node: str) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(queue, (when, seq, kind, node))

    for i, (node, period) in enumerate(periods.items()):
        # Spread over the first period, as a whole-cluster query's reads are not.
        at(start + period * i / max(1, len(periods)) * 0.01, "read", node)
    kept: dict[str, tuple[float, float]] = {}
    timers: dict[str, int] = {}
    run = Run()

    def landed(node: str) -> None:
        kept[node] = (clock.now, policy.hold(node))
        delay = policy.next_refresh(node)
        timers[node] = timers.get(node, 0) + 1
        if delay is not None:
            assert delay > 0
            at(clock.now + delay, f"refresh:{timers[node]}", node)

    while queue and queue[0][0] <= start + seconds:
        when, _, kind, node = heapq.heappop(queue)
        clock.now = when
        counting = when >= start + warm_up
        if kind == "read":
            policy.read(node)
            snapshot = kept.get(node)
            if snapshot is not None and when - snapshot[0] < snapshot[1]:
                if counting:
                    run.served += 1
                    run.ages.setdefault(node, []).append(when - snapshot[0])
            else:
                if counting:
                    run.fetched_on_read += 1
                landed(node)
            at(when + periods[node], "read", node)
        elif kind == f"refresh:{timers.get(node)}":
            # A refresh the pool still holds a timer for (a read's call replaced older ones).
            took = cost_of(done)
            done += 1
            policy.spent(took)
            if counting:
                run.refreshes += 1
                run.refresh_seconds += took
            landed(node)
    run.seconds = seconds - warm_up
    return run


def adaptive(clock: ManualClock, budget: float = 0.25) -> KeepWarm:
    return KeepWarm(ttl=TTL, budget=budget, timeout=TIMEOUT, clock=clock)


def test_a_dashboard_slower_than_the_ttl_gets_one_refresh_per_read_and_never_waits() -> None:
    clock = ManualClock()
    policy = adaptive(clock)
    nodes = {f"node-{i}": 2.0 for i in range(100)}
    run = simulate(policy, clock, nodes, seconds=60, cost=0.0005, warm_up=10)
    # Every read after the first few finds its node in memory...
    assert run.fetched_on_read == 0
    assert run.served == pytest.approx(100 * 25, abs=100)
    # ...refreshed once per read, not at REFRESH_AT of the TTL (2 s / 0.6 s = 3x as often)...
    assert run.refreshes == pytest.approx(run.served, rel=0.05)
    # ...and younger than the TTL when read.
    assert max(max(ages) for ages in run.ages.values()) <= TTL
    assert policy.kept_count() == 100
    assert policy.plan().regime == "within-ttl"


def test_a_refresh_held_up_now_and_then_does_not_make_the_budget_drop_nodes() -> None:
    clock = ManualClock()
    policy = adaptive(clock)
    # As 10,000 nodes at 0.6 ms a refresh, scaled down: the budget spaces 1,000 nodes'
    # refreshes some 22 s apart, under MAX_STRETCH. One refresh in 40 takes ten times
    # as long (a collection, a busy loop), which a mean of the last few would follow.
    usual = 0.005

    def cost(n: int) -> float:
        return usual * 10 if n % 40 == 39 else usual

    nodes = {f"node-{i}": 2.0 for i in range(1000)}
    run = simulate(policy, clock, nodes, seconds=120, cost=cost, warm_up=60)
    # Every node stays kept, spaced out: none is dropped and fetched when read...
    assert run.fetched_on_read == 0
    assert policy.plan().regime == "stretched"
    assert policy.kept_count() == 1000
    # ...and the refreshes, outliers included, stay within the budget.
    assert run.cores <= 0.25


def test_a_reader_faster_than_the_ttl_is_refreshed_at_the_ttls_share() -> None:
    clock = ManualClock()
    policy = adaptive(clock)
    run = simulate(policy, clock, {"node-a": 0.25}, seconds=30, cost=0.0005, warm_up=5)
    assert run.fetched_on_read == 0
    assert run.refreshes == pytest.approx(25 / (TTL * REFRESH_AT), abs=2)
    assert max(run.ages["node-a"]) <= TTL


def test_a_node_read_once_is_not_kept_warm() -> None:
    clock = ManualClock()
    policy = adaptive(clock)
    policy.read("node-a")
    assert policy.next_refresh("node-a") is None
    # Nor is one read twice within a burst (concurrent queries, not repeated ones).
    clock.advance(0.01)
    policy.read("node-a")
    assert policy.next_refresh("node-a") is None
    clock.advance(2.0)
    policy.read("node-a")
    assert policy.next_refresh("node-a") is not None


def test_nodes_nobody_reads_any_more_are_dropped() -> None:
    clock = ManualClock()
    policy = adaptive(clock)
    for _ in range(3):
        policy.read("node-a")
        clock.advance(2.0)
    assert policy.next_refresh("node-a") is not None
    # Three of its read periods without a read: its refreshes stop, and it takes
    # two reads again, not one, to be kept warm.
    clock.advance(6.0)
    assert policy.next_refresh("node-a") is None
    policy.read("node-a")
    assert policy.next_refresh("node-a") is None
    clock.advance(1.0)
    assert policy.kept_count() == 0


@pytest.mark.parametrize(("nodes", "budget"), [(1_000, 0.10), (10_000, 0.25)])
def test_the_budget_holds_and_answers_say_how_old_they_are(nodes: int, budget: float) -> None:
    # At 0.5 ms a refresh, keeping 1,000 nodes polled every 2 s within the TTL would
    # take 25% of a core; 10,000, 250%.
    clock = ManualClock()
    policy = adaptive(clock, budget)
    cost = 0.0005
    run = simulate(
        policy, clock, {f"node-{i}": 2.0 for i in range(nodes)}, seconds=90, cost=cost, warm_up=45
    )
    assert run.cores <= budget
    plan = policy.plan()
    assert plan.regime == "stretched"
    assert plan.interval == pytest.approx(nodes * cost / (budget * PLANNED_SHARE), rel=0.05)
    # Every node stays warm: a whole-cluster query never waits for an agent...
    assert run.fetched_on_read == 0
    assert policy.kept_count() == nodes
    # ...and what it reads is older than the TTL, but never beyond the interval the
    # policy reports (in /metrics and its log) plus one agent timeout.
    oldest = max(max(ages) for ages in run.ages.values())
    assert TTL < oldest <= plan.interval + TIMEOUT


def test_the_most_often_read_nodes_are_spaced_out_first_to_spend_the_budget_exactly() -> None:
    clock = ManualClock()
    budget = 0.25
    cost = 0.0005
    policy = adaptive(clock, budget)
    policy.spent(cost)
    # 1,000 nodes read every second, 1,000 every 5 s, 1,000 every 30 s: 0.62 of a core
    # at the rates they are read. Spacing out only the first thousand, to every 4.6 s,
    # spends the planned budget; the others keep their own rates.
    periods = {f"fast-{i}": 1.0 for i in range(1000)}
    periods |= {f"mid-{i}": 5.0 for i in range(1000)}
    periods |= {f"slow-{i}": 30.0 for i in range(1000)}
    # Read for a minute, as the queries that read them would.
    reads = sorted(
        (k * period, node) for node, period in periods.items() for k in range(int(60 / period) + 1)
    )
    for when, node in reads:
        clock.now = when
        policy.read(node)
    plan = policy.plan()
    assert plan.regime == "stretched"
    assert plan.kept == 3000
    spent = sum(cost / max(period, plan.interval) for period in periods.values())
    assert spent == pytest.approx(budget * PLANNED_SHARE)
    assert 1.0 < plan.interval < 5.0


def test_past_the_longest_stretch_the_least_read_nodes_are_dropped() -> None:
    clock = ManualClock()
    budget = 0.01
    cost = 0.001
    policy = adaptive(clock, budget)
    # A dashboard's 100 nodes every 2 s, and 1,000 more read every 20 s: at 30 s apart,
    # the budget buys 300 nodes (270 planned).
    periods = {f"dash-{i}": 2.0 for i in range(100)} | {f"rare-{i}": 20.0 for i in range(1000)}
    run = simulate(policy, clock, periods, seconds=240, cost=cost, warm_up=120)
    assert run.cores <= budget
    plan = policy.plan()
    assert plan.regime == "dropping"
    assert plan.interval == MAX_STRETCH
    assert plan.kept == pytest.approx(budget * PLANNED_SHARE * MAX_STRETCH / cost, abs=2)
    # The dashboard's nodes are among those kept; most of the rarely read are not.
    assert all(policy.next_refresh(f"dash-{i}") is not None for i in range(100))
    assert run.fetched_on_read > 0
    assert max(max(ages) for ages in run.ages.values()) <= MAX_STRETCH + TIMEOUT


def test_a_storm_of_distinct_narrow_queries_keeps_nothing_warm() -> None:
    clock = ManualClock()
    policy = adaptive(clock)
    for i in range(10_000):
        policy.read(f"node-{i}")
        clock.advance(0.001)
    clock.advance(1.0)
    assert policy.kept_count() == 0
    assert policy.next_refresh("node-5") is None


def test_a_storm_that_reads_every_node_repeatedly_stays_within_the_budget() -> None:
    clock = ManualClock()
    budget = 0.25
    policy = adaptive(clock, budget)
    # 10,000 nodes, each read every 5 s by distinct narrow queries (2,000 a second).
    run = simulate(
        policy, clock, {f"node-{i}": 5.0 for i in range(10_000)}, seconds=120, cost=0.0006,
        warm_up=60,
    )  # fmt: skip
    assert run.cores <= budget


def test_the_fixed_flag_refreshes_every_node_read_within_it_whatever_it_costs() -> None:
    clock = ManualClock()
    policy = KeepWarm(ttl=TTL, window=60.0, budget=0.01, clock=clock)
    run = simulate(
        policy, clock, {f"node-{i}": 2.0 for i in range(1000)}, seconds=30, cost=0.001,
        warm_up=10,
    )  # fmt: skip
    assert run.fetched_on_read == 0
    # 1,000 nodes every 0.6 s, at 1 ms: 1.7 cores, far past the (unused) budget.
    assert run.cores == pytest.approx(1000 * 0.001 / (TTL * REFRESH_AT), rel=0.05)
    assert max(max(ages) for ages in run.ages.values()) <= TTL
    assert policy.hold("node-1") == TTL


def test_keep_warm_zero_or_ttl_zero_refresh_nothing() -> None:
    clock = ManualClock()
    for policy in (
        KeepWarm(ttl=TTL, window=0.0, clock=clock),
        KeepWarm(ttl=0.0, clock=clock),
    ):
        assert not policy.enabled
        run = simulate(policy, clock, {"node-a": 2.0}, seconds=20, cost=0.001)
        assert run.refreshes == 0
        assert policy.next_refresh("node-a") is None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        KeepWarm(ttl=1.0, window=-1.0)
    with pytest.raises(ValueError, match="budget"):
        KeepWarm(ttl=1.0, budget=0.0)


def test_it_logs_what_it_decided_when_its_mind_changes_not_at_every_plan(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="api.agents.keep_warm")
    clock = ManualClock()
    policy = adaptive(clock, 0.10)
    simulate(policy, clock, {f"node-{i}": 2.0 for i in range(100)}, seconds=30, cost=0.0005)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("keep-warm: nodes read repeatedly are kept warm within the 1 s TTL")
    # Ten times the nodes: over the budget, it says so once, with how old answers get.
    caplog.clear()
    simulate(policy, clock, {f"node-{i}": 2.0 for i in range(1000)}, seconds=60, cost=0.0005)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "refreshing them every 5.6 s, their answers up to 7.6 s old" in lines[0]


async def test_own_cpu_counts_a_coroutines_steps_not_what_runs_while_it_waits() -> None:
    go = asyncio.Event()
    burned = 0.0

    async def waiting() -> str:
        await go.wait()
        return "done"

    async def busy() -> None:
        nonlocal burned
        started = time.thread_time()
        # CPU spent by another task while the measured one waits.
        while time.thread_time() - started < 0.05:
            pass
        burned = time.thread_time() - started
        go.set()

    cpu = OwnCpu()
    measured = asyncio.ensure_future(cpu.run(waiting()))
    await busy()
    assert await measured == "done"
    assert cpu.seconds < burned / 5


async def test_own_cpu_passes_cancellation_and_errors_through() -> None:
    held = asyncio.Event()

    async def stalled() -> None:
        held.set()
        await asyncio.Event().wait()

    cpu = OwnCpu()
    task = asyncio.ensure_future(cpu.run(stalled()))
    await held.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def failing() -> None:
        raise RuntimeError("agent bug")

    with pytest.raises(RuntimeError, match="agent bug"):
        await OwnCpu().run(failing())


def test_at_start_it_says_what_it_will_do(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="api.agents.keep_warm")
    KeepWarm(ttl=1.0).announce()
    KeepWarm(ttl=5.0, window=60.0).announce()
    KeepWarm(ttl=1.0, window=0.0).announce()
    adaptive_line, fixed, off = (r.getMessage() for r in caplog.records)
    assert adaptive_line.startswith("keep-warm adaptive:")
    assert "25% of one core (--snapshot-refresh-budget)" in adaptive_line
    assert "at most 1 s old (--snapshot-ttl)" in adaptive_line
    assert fixed.startswith("keep-warm fixed (--snapshot-keep-warm 60): nodes read within 60 s")
    assert "every 3 s" in fixed
    assert off.startswith("keep-warm off (--snapshot-keep-warm 0)")


def burn(seconds: float) -> float:
    """Spend ``seconds`` of this thread's CPU; how much it spent."""
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        pass
    return time.thread_time() - started


async def test_own_cpu_counts_the_tasks_a_metered_coroutine_starts() -> None:
    # The gRPC call of a refresh runs in a task the library starts: its CPU is the
    # refresh's. A task started by anyone else is not.
    loop = asyncio.get_running_loop()
    assert count_started_tasks(loop)
    try:
        outside = asyncio.Event()

        async def working() -> float:
            return burn(0.05)

        async def refresh() -> float:
            spent = await loop.create_task(working())
            await outside.wait()
            return spent

        cpu = OwnCpu()
        measured = asyncio.ensure_future(cpu.run(refresh()))
        other = loop.create_task(working())
        spent_outside = await other
        outside.set()
        spent_inside = await measured
        assert spent_inside <= cpu.seconds < spent_inside + spent_outside / 2
        # A loop with a factory of its own is left alone.
        loop.set_task_factory(None)
        loop.set_task_factory(lambda loop, coro, **kw: asyncio.Task(coro, loop=loop, **kw))
        assert not count_started_tasks(loop)
    finally:
        loop.set_task_factory(None)


async def test_a_metered_task_cancelled_before_it_ran_closes_its_coroutine() -> None:
    # As asyncio's own tasks do: else "coroutine ... was never awaited" at shutdown.
    loop = asyncio.get_running_loop()
    assert count_started_tasks(loop)
    inner: list[Coroutine[Any, Any, None]] = []

    async def never() -> None:
        raise AssertionError("cancelled before its first step")

    async def refresh() -> asyncio.Task[None]:
        coroutine = never()
        inner.append(coroutine)
        return loop.create_task(coroutine)

    try:
        task = await OwnCpu().run(refresh())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert inspect.getcoroutinestate(inner[0]) == inspect.CORO_CLOSED
    finally:
        loop.set_task_factory(None)
