"""Which nodes the agent pool refreshes ahead of their next read, and how often.

A query that finds a node's snapshot older than the TTL waits for that node's
agent, and a whole-cluster query waits for the slowest of N agents. Fetching
snapshots in the background, before queries ask, takes that wait off the
query path, at a price in server CPU paid whether or not a query comes. This
module decides what to pay for, so that the default is fast without tuning:

- only nodes read by repeated queries are kept warm (a node read once, or not
  for a few of its read periods, is dropped and costs nothing);
- a node is refreshed ahead of its next expected read: one refresh per read
  for a poller slower than the TTL, one per ``REFRESH_AT`` of the TTL for
  faster readers, so what a read finds is younger than the TTL;
- the refreshes' measured CPU stays within a budget (a share of one core):
  when the nodes read outgrow it, the most often read nodes' refreshes are
  spaced out until the total fits, and their snapshots are served until the
  next refresh lands, older than the TTL, which each answer's age says
  (``Received``); past ``MAX_STRETCH`` seconds the least read nodes are
  dropped instead, and fetched when read, as without keep-warm.

``--snapshot-keep-warm S`` is the fixed override: every node read within
``S`` seconds is refreshed at ``REFRESH_AT`` of the TTL, whatever it costs;
``0`` turns refreshing off.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import zlib
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Literal, TypeVar

__all__ = [
    "DEFAULT_BUDGET",
    "MAX_STRETCH",
    "REFRESH_AT",
    "KeepWarm",
    "OwnCpu",
    "Plan",
    "count_started_tasks",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

# A snapshot is fetched again when it is this share of the TTL old: early enough
# that the new one lands before the old expires.
REFRESH_AT = 0.6
# The share of one core background refreshing may use by default.
DEFAULT_BUDGET = 0.25
# The longest the budget may space a node's refreshes before nodes are dropped
# instead: past it, a kept-warm snapshot would be too old to be worth serving.
MAX_STRETCH = 30.0
# A refresh for a reader slower than the TTL starts this share of the TTL before
# its next read is expected: what it brings is younger than the TTL when read,
# and a whole cluster's refreshes have most of a TTL to land.
LEAD = 0.8
# Reads closer together than this are one burst (concurrent queries, a query's
# own retries), not a repeated read.
MIN_GAP = 0.05
# Reads further apart than this are not "repeated": a node read every few minutes
# is cheaper to fetch when read than to keep warm.
MAX_PERIOD = 300.0
# A node stays warm while read within this many of its read periods.
LINGER_PERIODS = 3.0
# Until a refresh has been measured: what one cost where it was first measured.
INITIAL_COST = 0.0006
# A refresh's cost is the mean of the last this many: refreshes held up by the
# collector or by a busy loop (a whole-cluster query, ten times the usual) must not
# swing the plan from spacing refreshes out to dropping nodes and back, as it did at
# 10,000 nodes every few seconds; there this is about ten seconds' worth.
COST_WINDOW = 4096
# A new plan keeps the interval it stretched refreshes to while the one worked out
# anew is within this share of it: a new interval moves every node's place on its
# refresh grid, and a node moved earlier is refreshed twice within one interval
# (costs that moved by 2% took refreshing 22% past its budget).
INTERVAL_SLACK = 0.05
# Weight of the newest read gap in the running mean of a node's read period.
_SMOOTHING = 0.3
# The share of the budget a plan spends: refreshes cost what the last ones did, give
# or take, and nodes read repeatedly since the plan are refreshed before the next.
PLANNED_SHARE = 0.9
# How often the plan is worked out again (reads and costs move it).
REPLAN_EVERY = 1.0

Mode = Literal["adaptive", "fixed", "off"]
Regime = Literal["idle", "within-ttl", "stretched", "dropping"]


@dataclass(slots=True)
class _Reads:
    last: float
    period: float | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """What the policy decided: how many nodes it keeps warm, and how often."""

    regime: Regime
    # Nodes kept warm when the plan was worked out.
    kept: int
    # The shortest interval between two refreshes of a node; a stretched node's
    # snapshot is served up to this plus the agent timeout old.
    interval: float
    # Refreshes' CPU per second the plan expects, in cores.
    demand: float
    # Nodes read further apart than this are not kept: a rule, so that a node read
    # repeatedly since the plan is kept at once, and counted at the next plan...
    cutoff: float = math.inf
    # ...and, where the budget drops nodes, those it chose at the cutoff (many nodes
    # read by the same queries are read equally often).
    chosen: frozenset[str] = frozenset()


class KeepWarm:
    """The keep-warm policy over an injected clock; the pool tells it reads and refresh costs."""

    def __init__(
        self,
        *,
        ttl: float,
        window: float | None = None,
        budget: float = DEFAULT_BUDGET,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window is not None and window < 0:
            raise ValueError(f"keep-warm time must not be negative, got {window}")
        if not budget > 0:
            raise ValueError(f"keep-warm budget must be positive, got {budget}")
        self.ttl = ttl
        self.window = window
        self.budget = budget
        self.timeout = timeout
        self._clock = clock
        self.mode: Mode = (
            "off" if ttl <= 0 or window == 0 else "adaptive" if window is None else "fixed"
        )
        self._reads: dict[str, _Reads] = {}
        self._costs: deque[float] = deque(maxlen=COST_WINDOW)
        # CPU seconds every measured refresh took, in all (the /metrics counter).
        self.spent_seconds = 0.0
        self._plan = Plan("idle", 0, self.base_interval, 0.0)
        self._planned_at = -math.inf
        self._told: Plan | None = None

    @property
    def enabled(self) -> bool:
        """Whether anything is ever refreshed in the background."""
        return self.mode != "off"

    @property
    def base_interval(self) -> float:
        """The refresh interval that keeps a snapshot younger than the TTL."""
        return self.ttl * REFRESH_AT

    def announce(self) -> None:
        """Log what the policy does, once, as the server starts."""
        log.info("%s", self.describe())

    def describe(self) -> str:
        """What the policy does, in a sentence."""
        if self.mode == "off":
            why = "--snapshot-ttl 0" if self.ttl <= 0 else "--snapshot-keep-warm 0"
            return f"keep-warm off ({why}): nodes are fetched when a query reads them"
        if self.mode == "fixed":
            return (
                f"keep-warm fixed (--snapshot-keep-warm {self.window:g}): nodes read within "
                f"{self.window:g} s are fetched every {self.base_interval:g} s, whatever it costs"
            )
        return (
            f"keep-warm adaptive: nodes read by repeated queries are fetched ahead of their "
            f"next read, within {self.budget:.0%} of one core (--snapshot-refresh-budget); "
            f"answers are at most {self.ttl:g} s old (--snapshot-ttl) unless the budget "
            f"spaces refreshes further apart, which their age says"
        )

    # ------------------------------------------------------------- what it hears

    def read(self, node_name: str) -> None:
        """A query read the node."""
        if self.mode == "off":
            return
        now = self._clock()
        reads = self._reads.get(node_name)
        if reads is None:
            self._reads[node_name] = _Reads(now)
            return
        gap = now - reads.last
        if gap < MIN_GAP:
            return
        reads.last = now
        if gap > MAX_PERIOD:
            reads.period = None
        elif reads.period is None:
            reads.period = gap
        else:
            reads.period += _SMOOTHING * (gap - reads.period)

    def spent(self, seconds: float) -> None:
        """A background refresh took ``seconds`` of CPU."""
        self.spent_seconds += seconds
        self._costs.append(seconds)

    @property
    def cost(self) -> float:
        """What a refresh costs: the mean of the last ``COST_WINDOW`` measured."""
        costs = self._costs
        return sum(costs) / len(costs) if costs else INITIAL_COST

    def forget(self, node_name: str) -> None:
        """The node left the cluster."""
        self._reads.pop(node_name, None)

    # --------------------------------------------------------- what it decides

    def next_refresh(self, node_name: str) -> float | None:
        """Seconds from now until the node's next refresh; None: let it expire."""
        if self.mode == "off":
            return None
        now = self._clock()
        reads = self._reads.get(node_name)
        if reads is None:
            return None
        if self.mode == "fixed":
            assert self.window is not None
            if now - reads.last > self.window:
                del self._reads[node_name]
                return None
            return self.base_interval
        if not self._live(reads, now):
            if reads.period is not None:
                # Read no more: start over, so one later read does not make it warm.
                del self._reads[node_name]
            return None
        plan = self.plan()
        period = reads.period
        assert period is not None
        if not _kept(plan, node_name, period):
            return None
        every = max(plan.interval, self.base_interval)
        if period <= every:
            # Read at least as often as it is refreshed: every interval.
            if every == self.base_interval:
                return every
            # Spaced out by the budget: on a grid of its own, so that the nodes one
            # query read together are refreshed spread over the interval, not at once.
            offset = every * (zlib.crc32(node_name.encode()) / 2**32)
            delay = every - (now - offset) % every
            return delay if delay >= self.base_interval else delay + every
        # Read less often: one refresh per read, started LEAD of the TTL before the
        # next read expected after this refresh lands.
        lead = self.ttl * LEAD
        expected = reads.last + period
        while expected - lead <= now + MIN_GAP:
            expected += period
        return expected - lead - now

    def hold(self, node_name: str) -> float:
        """How long a snapshot of the node that lands now is served."""
        if self.mode != "adaptive":
            return self.ttl
        plan = self._plan
        reads = self._reads.get(node_name)
        if (
            plan.interval > self.base_interval
            and reads is not None
            and reads.period is not None
            and reads.period <= plan.interval
            and _kept(plan, node_name, reads.period)
        ):
            # The budget spaced its refreshes past the TTL: the kept snapshot is served
            # until the next one lands, an interval and at most a timeout from now,
            # its age saying how old.
            return max(self.ttl, plan.interval + self.timeout)
        return self.ttl

    def kept_count(self) -> int:
        """Nodes kept warm now."""
        if self.mode == "fixed":
            now = self._clock()
            assert self.window is not None
            return sum(1 for r in self._reads.values() if now - r.last <= self.window)
        if self.mode == "off":
            return 0
        return self.plan().kept

    def interval(self) -> float:
        """The shortest interval between two refreshes of a node, in force now."""
        if self.mode == "adaptive":
            return self.plan().interval
        return self.base_interval

    def plan(self) -> Plan:
        """The nodes kept warm and their interval, worked out at most every REPLAN_EVERY."""
        now = self._clock()
        if now - self._planned_at >= REPLAN_EVERY:
            self._planned_at = now
            self._plan = self._work_out(now)
            self._tell(self._plan)
        return self._plan

    def _live(self, reads: _Reads, now: float) -> bool:
        period = reads.period
        return period is not None and now - reads.last <= LINGER_PERIODS * period

    def _work_out(self, now: float) -> Plan:
        # One pass over the reads, and the nodes' names sorted only where the budget
        # drops some: at 10,000 nodes this runs on the event loop every REPLAN_EVERY.
        periods: list[float] = []
        stale: list[str] = []
        for name, reads in self._reads.items():
            period = reads.period
            if period is None:
                if now - reads.last > MAX_PERIOD:
                    stale.append(name)
            elif self._live(reads, now):
                periods.append(period)
            else:
                stale.append(name)
        for name in stale:
            del self._reads[name]
        base = self.base_interval
        if not periods:
            return Plan("idle", 0, base, 0.0)
        cost = self.cost
        # Each node's refresh interval as its reads ask: its period, but no shorter
        # than what keeps it within the TTL; ascending.
        periods.sort()
        wanted = [max(base, period) for period in periods]
        # tails[k]: what the nodes from the k-th on cost per second at their wanted interval.
        tails = list(accumulate(cost / w for w in reversed(wanted)))
        tails.reverse()
        tails.append(0.0)
        demand = tails[0]
        budget = self.budget * PLANNED_SHARE
        if demand <= budget:
            return Plan("within-ttl", len(wanted), base, demand)
        # Space out the shortest intervals first (water-filling): with ``floor`` as the
        # shortest, node i refreshes every max(wanted[i], floor).
        floor = _floor_for(wanted, tails, cost, budget)
        held = self._plan
        if held.regime == "stretched" and abs(held.interval / floor - 1) <= INTERVAL_SLACK:
            floor = held.interval
        if floor <= MAX_STRETCH:
            return Plan("stretched", len(wanted), floor, budget)
        # Even at MAX_STRETCH the budget does not cover them: keep the most often read.
        # Every node left in the reads is live now; names break ties between equal periods.
        live = sorted(
            (reads.period, name) for name, reads in self._reads.items() if reads.period is not None
        )
        chosen: list[str] = []
        spend = 0.0
        cutoff = 0.0
        for r, (period, name) in zip(wanted, live, strict=True):
            share = cost / max(r, MAX_STRETCH)
            if spend + share > budget:
                break
            chosen.append(name)
            spend += share
            cutoff = period
        return Plan("dropping", len(chosen), MAX_STRETCH, spend, cutoff, frozenset(chosen))

    def _tell(self, plan: Plan) -> None:
        """Log the plan when its regime changes, or its interval by half or more."""
        told = self._told
        if plan.regime == "idle" and (told is None or told.regime == "idle"):
            return
        if (
            told is not None
            and told.regime == plan.regime
            and 2 / 3 <= plan.interval / told.interval <= 1.5
            and (plan.regime != "dropping" or 2 / 3 <= (plan.kept + 1) / (told.kept + 1) <= 1.5)
        ):
            return
        self._told = plan
        cost_ms = self.cost * 1000
        if plan.regime == "idle":
            log.info("keep-warm: no node is read repeatedly; none is kept warm")
        elif plan.regime == "within-ttl":
            log.info(
                "keep-warm: nodes read repeatedly are kept warm within the %g s TTL (%d so "
                "far, %.2f ms of CPU per refresh, %.1f%% of one core of a %.0f%% budget)",
                self.ttl, plan.kept, cost_ms, plan.demand * 100, self.budget * 100,
            )  # fmt: skip
        elif plan.regime == "stretched":
            log.info(
                "keep-warm: %d nodes read repeatedly cost more than %.0f%% of one core to keep "
                "within the %g s TTL (%.2f ms per refresh): refreshing them every %.1f s, "
                "their answers up to %.1f s old",
                plan.kept, self.budget * 100, self.ttl, cost_ms, plan.interval,
                plan.interval + self.timeout,
            )  # fmt: skip
        else:
            log.info(
                "keep-warm: the %.0f%% budget keeps %d of the nodes read repeatedly warm, "
                "every %.0f s (%.2f ms per refresh); the others are fetched when read",
                self.budget * 100, plan.kept, plan.interval, cost_ms,
            )  # fmt: skip


def _kept(plan: Plan, node_name: str, period: float) -> bool:
    """Whether ``plan`` keeps a node read every ``period`` seconds warm."""
    if plan.regime != "dropping":
        return True
    return period < plan.cutoff or node_name in plan.chosen


def _floor_for(wanted: list[float], tails: list[float], cost: float, budget: float) -> float:
    """The shortest interval F with sum(cost / max(w, F)) == budget; ``wanted`` ascending,
    ``tails[k]`` the sum of cost / w over ``wanted[k:]``."""
    # With the first k intervals raised to F: k * cost / F + tails[k] == budget, for the
    # first k whose F is no longer than wanted[k]; that holds for every k after it too
    # (the total at F = wanted[k] only falls as k grows), so k is found by bisection.
    n = len(wanted)
    k = bisect_left(range(1, n), True, key=lambda k: k * cost / wanted[k] + tails[k] <= budget) + 1
    return max(k * cost / (budget - tails[k]), wanted[k - 1])


class OwnCpu:
    """The CPU a coroutine takes in its own steps and in the tasks it starts, not the
    other tasks' it waits beside.

    A refresh's cost is on the event loop's thread: the gRPC call (which runs in a
    task of the library's own), decoding, building the graph objects; its wall time
    also holds the agent's answer in transit and whatever else ran meanwhile. Tasks
    started while a meter runs are counted too where ``count_started_tasks`` put
    its task factory on the loop.
    """

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine``, adding the thread CPU of its steps, and of the steps of
        the tasks it starts, to ``seconds``."""
        token = _METER.set(self)
        try:
            return await _Metered(self, coroutine)
        finally:
            _METER.reset(token)


class _Metered(Coroutine[Any, Any, T]):
    """``coroutine``, each of its steps timed on the thread's CPU clock into ``meter``.

    A coroutine of its own (not a wrapping ``async def``), so that a task cancelled
    before its first step closes the coroutine it was given, as asyncio's would.
    """

    __slots__ = ("_coroutine", "_meter")

    def __init__(self, meter: OwnCpu, coroutine: Coroutine[Any, Any, T]) -> None:
        self._meter = meter
        self._coroutine = coroutine

    def send(self, value: Any) -> Any:
        """One step of the coroutine, timed."""
        started = time.thread_time()
        try:
            return self._coroutine.send(value)
        finally:
            self._meter.seconds += time.thread_time() - started

    def throw(self, *exc: Any) -> Any:
        """An exception into the coroutine (a cancellation), timed."""
        started = time.thread_time()
        try:
            return self._coroutine.throw(*exc)
        finally:
            self._meter.seconds += time.thread_time() - started

    def close(self) -> None:
        """Close the coroutine."""
        self._coroutine.close()

    def __next__(self) -> Any:
        return self.send(None)

    def __iter__(self) -> _Metered[T]:
        return self

    def __await__(self) -> Generator[Any, None, T]:
        return self


# The meter of the refresh whose step is running (a task copies it when started).
_METER: ContextVar[OwnCpu | None] = ContextVar("keep_warm_meter", default=None)


def count_started_tasks(loop: asyncio.AbstractEventLoop) -> bool:
    """Put a task factory on ``loop`` that meters the tasks a metered coroutine starts
    (the gRPC call's own task); False, and nothing changed, where it has one already."""
    if loop.get_task_factory() is not None:
        return loop.get_task_factory() is _metered_task
    loop.set_task_factory(_metered_task)  # type: ignore[arg-type]
    return True


def _metered_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], **kwargs: Any
) -> asyncio.Task[T]:
    meter = _METER.get()
    if meter is not None:
        coro = _Metered(meter, coro)
    return asyncio.Task(coro, loop=loop, **kwargs)
