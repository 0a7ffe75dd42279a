"""SharedCalls: one call in flight per key, answers kept as long as the caller's policy says."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

import pytest

from api.shared_calls import CallCancelledError, Keep, SharedCalls, Source
from tests.support.clock import ManualClock


def keep_for(ttl: float) -> Callable[[object, float, float], Keep]:
    """A policy keeping every answer ``ttl`` seconds from the end of its call."""

    def keep(value: object, started: float, ended: float) -> Keep:
        return Keep(ended, ttl)

    return keep


class Calls:
    """A call that counts its runs, answers with the run number, and can be held open."""

    def __init__(self) -> None:
        self.runs = 0
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def __call__(self) -> int:
        self.runs += 1
        run = self.runs
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        return run


async def test_concurrent_callers_share_one_call() -> None:
    calls = Calls()
    calls.gate = asyncio.Event()
    shared: SharedCalls[str, int] = SharedCalls()
    heard: list[Source] = []
    waiters = [
        asyncio.ensure_future(shared.get("k", calls, keep_for(0), observe=heard.append))
        for _ in range(5)
    ]
    await asyncio.sleep(0)
    calls.gate.set()
    assert await asyncio.gather(*waiters) == [1] * 5
    assert calls.runs == 1
    assert heard == ["called"] + ["shared"] * 4
    assert shared.counts == {"called": 1, "shared": 4}


@pytest.mark.parametrize(
    ("after", "runs", "answer"),
    [(0.5, 1, 1), (1.0, 2, 2), (1.5, 2, 2)],
    ids=["within-the-ttl", "at-the-ttl", "past-the-ttl"],
)
async def test_an_answer_is_kept_for_its_ttl_only(after: float, runs: int, answer: int) -> None:
    clock = ManualClock()
    calls = Calls()
    shared: SharedCalls[str, int] = SharedCalls(clock=clock)
    assert await shared.get("k", calls, keep_for(1.0)) == 1
    clock.advance(after)
    assert await shared.get("k", calls, keep_for(1.0)) == answer
    assert calls.runs == runs


async def test_the_policy_sees_the_answer_and_may_refuse_to_keep_it() -> None:
    calls = Calls()
    shared: SharedCalls[str, int] = SharedCalls(clock=ManualClock())
    seen: list[tuple[int, float, float]] = []

    def odd_only(value: int, started: float, ended: float) -> Keep | None:
        seen.append((value, started, ended))
        return Keep(started, 10.0) if value % 2 else None

    assert await shared.get("k", calls, odd_only) == 1
    assert await shared.get("k", calls, odd_only) == 1  # kept
    shared.forget("k")
    assert await shared.get("k", calls, odd_only) == 2  # not kept: the next caller calls
    assert await shared.get("k", calls, odd_only) == 3
    assert seen == [(1, 1000.0, 1000.0), (2, 1000.0, 1000.0), (3, 1000.0, 1000.0)]
    assert shared.keys() == {"k"}


async def test_a_call_counts_as_started_when_it_was_asked_for_not_when_its_task_ran() -> None:
    clock = ManualClock()
    shared: SharedCalls[str, int] = SharedCalls(clock=clock)
    seen: list[tuple[float, float]] = []

    def note(value: int, started: float, ended: float) -> None:
        seen.append((started, ended))

    waiter = asyncio.ensure_future(shared.get("k", Calls(), note))
    # Runs after get() has started the call and before the call's task first runs:
    # a busy loop between the two must not make the answer look younger.
    asyncio.get_running_loop().call_soon(clock.advance, 5.0)
    assert await waiter == 1
    assert seen == [(1000.0, 1005.0)]


async def test_a_failed_call_is_not_kept_and_the_next_caller_tries_again() -> None:
    shared: SharedCalls[str, int] = SharedCalls()
    attempts = 0

    async def flaky() -> int:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("down")
        return attempts

    with pytest.raises(ConnectionError, match="down"):
        await shared.get("k", flaky, keep_for(60))
    assert await shared.get("k", flaky, keep_for(60)) == 2
    assert await shared.get("k", flaky, keep_for(60)) == 2


async def test_before_call_runs_only_for_a_new_call_and_may_refuse_it() -> None:
    calls = Calls()
    shared: SharedCalls[str, int] = SharedCalls()
    refused = True

    def gate() -> None:
        if refused:
            raise PermissionError("not now")

    with pytest.raises(PermissionError):
        await shared.get("k", calls, keep_for(60), before_call=gate)
    assert calls.runs == 0
    refused = False
    assert await shared.get("k", calls, keep_for(60), before_call=gate) == 1
    refused = True  # a kept answer needs no new call, so the gate is not asked
    assert await shared.get("k", calls, keep_for(60), before_call=gate) == 1


async def test_a_caller_that_goes_away_does_not_cancel_the_shared_call() -> None:
    calls = Calls()
    calls.gate = asyncio.Event()
    shared: SharedCalls[str, int] = SharedCalls()
    joined = asyncio.Event()

    def heard(source: Source) -> None:
        if source == "shared":
            joined.set()

    first = asyncio.ensure_future(shared.get("k", calls, keep_for(60)))
    second = asyncio.ensure_future(shared.get("k", calls, keep_for(60), observe=heard))
    await asyncio.gather(calls.started.wait(), joined.wait())
    first.cancel()  # its client went away, its time limit hit, its subscription closed
    with pytest.raises(asyncio.CancelledError):
        await first
    calls.gate.set()
    assert await second == 1
    # The call ran to its end and its answer is kept for the callers after.
    assert await shared.get("k", calls, keep_for(60)) == 1
    assert calls.runs == 1


async def test_a_caller_closed_before_the_call_failed_leaves_no_unread_failure() -> None:
    # The compiled plan drives its fields' coroutines itself, and closes those it hands
    # over to strawberry: a failure that lands after is an answer, not a traceback.
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    shared: SharedCalls[str, int] = SharedCalls()
    gate = asyncio.Event()

    async def failing() -> int:
        await gate.wait()
        raise RuntimeError("agent down")

    field = shared.get("k", failing, keep_for(60))
    awaited = field.send(None)  # the field now waits on the call...
    field.close()  # ...and is handed over, never to resume
    gate.set()
    with pytest.raises(RuntimeError, match="agent down"):
        await shared.get("k", failing, keep_for(60))
    del awaited
    gc.collect()
    assert [c["message"] for c in reported] == []


async def test_a_caller_past_its_own_time_limit_times_out_and_the_call_runs_on() -> None:
    calls = Calls()
    calls.gate = asyncio.Event()
    shared: SharedCalls[str, int] = SharedCalls()
    later = asyncio.ensure_future(shared.get("k", calls, keep_for(60)))
    await calls.started.wait()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await shared.get("k", calls, keep_for(60))
    calls.gate.set()
    assert await later == 1


async def test_a_call_cancelled_under_its_callers_is_an_error_to_each_not_a_cancellation() -> None:
    # As gRPC does to a call whose channel another caller closes: the call's own work
    # is cancelled, and none of the callers waiting on it.
    work: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    runs = 0

    async def call() -> int:
        nonlocal runs
        runs += 1
        return await work if runs == 1 else runs

    shared: SharedCalls[str, int] = SharedCalls()
    joined = asyncio.Event()
    waiters = [
        asyncio.ensure_future(shared.get("k", call, keep_for(60))),
        asyncio.ensure_future(shared.get("k", call, keep_for(60), observe=lambda _: joined.set())),
    ]
    await joined.wait()
    work.cancel()
    for waiter in waiters:
        with pytest.raises(CallCancelledError, match="was cancelled"):
            await waiter
    # Not kept: the next caller calls again.
    assert await shared.get("k", call, keep_for(60)) == 2


async def test_the_oldest_answers_go_past_max_entries() -> None:
    calls = Calls()
    shared: SharedCalls[str, int] = SharedCalls(max_entries=2)
    for key in ("a", "b", "c"):
        await shared.get(key, calls, keep_for(60))
    assert shared.keys() == {"b", "c"}
    assert await shared.get("a", calls, keep_for(60)) == 4


async def test_close_cancels_calls_in_flight_and_drops_kept_answers() -> None:
    calls = Calls()
    shared: SharedCalls[str, int] = SharedCalls()
    await shared.get("kept", calls, keep_for(60))
    calls.gate = asyncio.Event()
    calls.started.clear()
    waiter = asyncio.ensure_future(shared.get("slow", calls, keep_for(60)))
    await calls.started.wait()
    await shared.close()
    # Closing cancels the call, not its caller: an error to answer with.
    with pytest.raises(CallCancelledError):
        await waiter
    assert shared.keys() == set()


async def test_while_a_refresh_is_late_a_caller_gets_the_answer_past_its_time_but_not_forever() -> (
    None
):
    clock = ManualClock()
    calls = Calls()
    shared: SharedCalls[str, int] = SharedCalls(clock=clock)
    heard: list[Source] = []

    def get() -> asyncio.Future[int]:
        return asyncio.ensure_future(
            shared.get("k", calls, keep_for(1.0), observe=heard.append, stale_while_refreshing=2.0)
        )

    assert await get() == 1
    calls.gate = asyncio.Event()
    assert shared.refresh("k", calls, keep_for(1.0))
    # Past its TTL, the refresh not landed: the kept answer, without waiting for it...
    clock.advance(1.5)
    assert await get() == 1
    assert heard[-1] == "stale"
    # ...up to the allowance past the TTL; then the caller joins the refresh.
    clock.advance(1.5)
    late = get()
    await asyncio.sleep(0)
    assert not late.done()
    calls.gate.set()
    assert await late == 2
    assert heard[-1] == "shared"


async def test_without_a_refresh_in_flight_an_expired_answer_is_never_given() -> None:
    clock = ManualClock()
    calls = Calls()
    shared: SharedCalls[str, int] = SharedCalls(clock=clock)
    assert await shared.get("k", calls, keep_for(1.0)) == 1
    clock.advance(1.5)
    # A caller's own call in flight is no refresh: the next caller waits for it too.
    calls.gate = asyncio.Event()
    first = asyncio.ensure_future(shared.get("k", calls, keep_for(1.0), stale_while_refreshing=5))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(shared.get("k", calls, keep_for(1.0), stale_while_refreshing=5))
    await asyncio.sleep(0)
    assert not second.done()
    calls.gate.set()
    assert await asyncio.gather(first, second) == [2, 2]
