"""The agent pool: one reused gRPC channel per node, shared calls, backoff.

The GraphQL dataloaders ask the pool for node snapshots. The pool makes sure
that however many queries ask, each node's agent sees at most one call per
``ttl`` seconds: concurrent askers join the call in flight, later ones within
the TTL get its result. An agent that fails is skipped with exponential
backoff, so a dead node costs each query nothing rather than a full timeout.

History and usage reads are shared too, while in flight only (an occupancy
log moves on, so a kept answer would soon be stale history): identical
requests to one node reach its agent once. Each caller has a budget of reads
in flight (``caller_reads``), so one tenant's flood of varied history queries
waits its own turn instead of filling every agent's readers. GPU event reads
are history reads: the same sharing, the same budget. A follower's long poll
(a subscription waiting for the next event) is shared by identical followers
but holds no read slot, since it waits up to half a minute by design; the
subscription cap bounds how many there are.

Kept warm (the default), the fan-out leaves the query path: a node read by
repeated queries is fetched again in the background ahead of its next read,
so a dashboard's query finds every snapshot in memory. Which nodes, and how
often, within a CPU budget, is ``keep_warm.KeepWarm``'s decision; the pool
tells it each read and each refresh's CPU. Readers keep the current snapshot
while the refresh is in flight; one that arrives after it expired joins the
refresh. Nodes nobody reads stop being refreshed, and cost nothing; a node
in backoff is not refreshed until a read finds its agent again.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol, TypeGuard, TypeVar, cast, runtime_checkable

import grpc
from prometheus_client import Counter

from graph_schema.interfaces import AgentUnavailableError, EventSource, Received
from graph_schema.limits import (
    DEFAULT_MAX_HISTORY_READS_PER_CALLER,
    DEFAULT_MAX_HISTORY_READS_PER_CALLER_PER_NODE,
)
from node_resolver.auth import TokenFile
from node_resolver.gpu_events.records import EventPage, EventQuery
from node_resolver.history.records import (
    HistoryPage,
    HistoryQuery,
    UsageQuery,
    UsageRow,
)
from node_resolver.models import NodeSnapshot

from ..backoff import Backoff
from ..metrics import Metrics
from ..shared_calls import Keep, SharedCalls, being_cancelled
from .caller_reads import CallerReads
from .discovery import AddressUnknownError, Discovery
from .keep_warm import DEFAULT_BUDGET, REFRESH_AT, KeepWarm, OwnCpu, count_started_tasks

__all__ = [
    "CHANNEL_OPTIONS",
    "REFRESH_AT",
    "REFRESH_CONCURRENCY",
    "AgentClientLike",
    "AgentPool",
    "ClientFactory",
    "GpuEventReader",
    "HistoryReader",
    "RefreshListener",
    "event_reader",
    "history_reader",
    "reads_history",
]

log = logging.getLogger(__name__)

# Background refreshes in flight at once. Refreshes that land together run their
# decoding and their graph objects' building back to back on the event loop, and a
# query's next step waits behind the whole batch, so the batches are kept small
# (bench/README.md, section 25: two did no better than four). A refresh stuck on a
# hung agent holds its place for at most --agent-timeout, and refreshes take a few
# milliseconds each: four keep up.
REFRESH_CONCURRENCY = 4

# Told of each snapshot a background refresh brought: (node name, snapshot).
RefreshListener = Callable[[str, NodeSnapshot], None]


class AgentClientLike(Protocol):
    """What the pool needs from an agent client (node_resolver.client.AgentClient)."""

    async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
        """One GetSnapshot call with a deadline."""
        ...

    def close(self) -> Awaitable[None] | None:
        """Close the channel."""
        ...


@runtime_checkable
class HistoryReader(Protocol):
    """An agent client's reads of the occupancy log (node_resolver.client.AgentClient's).

    A client the factory makes need not read history (a snapshot-only fake, say):
    ``reads_history`` tells, and a read from one that does not fails as the node's.
    """

    async def get_history(
        self, query: HistoryQuery, *, page_token: str = "", timeout: float
    ) -> HistoryPage:
        """One GetHistory page."""
        ...

    async def get_usage(self, query: UsageQuery, *, timeout: float) -> tuple[list[UsageRow], str]:
        """One GetUsage call: the rows, keyed as the query groups them, and the log's status."""
        ...


@functools.cache
def _class_reads_history(client_class: type) -> bool:
    # A runtime Protocol check costs tens of microseconds: once per class, not per read.
    return issubclass(client_class, HistoryReader)


def reads_history(client: AgentClientLike) -> TypeGuard[HistoryReader]:
    """Whether ``client`` reads the agent's occupancy log."""
    return _class_reads_history(type(client))


def history_reader(client: AgentClientLike) -> HistoryReader:
    """``client`` as a HistoryReader; TypeError (the node's failure) when it reads none."""
    if not reads_history(client):
        raise TypeError(f"{type(client).__name__} reads no history")
    return client


@runtime_checkable
class GpuEventReader(Protocol):
    """An agent client's reads of its GPU health events (node_resolver.client.AgentClient's)."""

    async def get_gpu_events(
        self,
        query: EventQuery,
        *,
        page_token: str = "",
        wait_seconds: float = 0.0,
        timeout: float,
    ) -> EventPage:
        """One GetGpuEvents page; following, the agent waits up to ``wait_seconds``."""
        ...


@functools.cache
def _class_reads_events(client_class: type) -> bool:
    return issubclass(client_class, GpuEventReader)


def event_reader(client: AgentClientLike) -> GpuEventReader:
    """``client`` as a GpuEventReader; TypeError (the node's failure) when it reads none."""
    if not _class_reads_events(type(client)):
        raise TypeError(f"{type(client).__name__} reads no GPU events")
    return cast(GpuEventReader, client)


ClientFactory = Callable[[str, "str | None"], AgentClientLike]
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
Usage = tuple[list[UsageRow], str]
# Whose budget a read counts against when the graph names no caller (benchmarks, tools).
ANONYMOUS: Hashable = None


# gRPC shares subchannels (connections) between channels to the same address
# by default, so a rebuilt channel would inherit a dead connection's reconnect
# backoff; a channel of its own makes "rebuilt" mean a fresh connection.
# A fixed 4 MiB receive window instead of gRPC's bandwidth-delay probe (whose
# window starts at that size): the probe pings as replies land, on gRPC's own
# threads, a quarter of a snapshot call's CPU (bench/README.md, section 22), and
# a window this size still lets a history page stream without waiting on it.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 4 * 1024 * 1024),
)


def _default_client_factory(target: str, token: str | None) -> AgentClientLike:
    from node_resolver.client import AgentClient

    client: AgentClientLike = AgentClient(target, token=token, options=CHANNEL_OPTIONS)
    return client


@dataclasses.dataclass(frozen=True, slots=True)
class _Stamped:
    snapshot: NodeSnapshot
    received_at: float  # on the pool's clock


@dataclasses.dataclass(slots=True)
class _Channel:
    address: str
    token: str | None
    client: AgentClientLike


class AgentPool:
    """Fetches node snapshots from agents; implements graph_schema's SnapshotSource."""

    def __init__(
        self,
        discovery: Discovery,
        *,
        timeout: float = 2.0,
        token: str | TokenFile | None = None,
        ttl: float = 1.0,
        backoff: Backoff | None = None,
        metrics: Metrics | None = None,
        client_factory: ClientFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        keep_warm: float | None = None,
        refresh_budget: float = DEFAULT_BUDGET,
        history_reads_per_caller: int = DEFAULT_MAX_HISTORY_READS_PER_CALLER,
        history_reads_per_node: int = DEFAULT_MAX_HISTORY_READS_PER_CALLER_PER_NODE,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"agent timeout must be positive, got {timeout}")
        if ttl < 0:
            raise ValueError(f"snapshot TTL must not be negative, got {ttl}")
        self.discovery = discovery
        self.timeout = timeout
        self.ttl = ttl
        self._token = token
        self._clock = clock
        self._backoff = backoff if backoff is not None else Backoff(clock=clock)
        # Where each failing node's agent was asked, for the errors of its skipped calls.
        self._failed_at: dict[str, str] = {}
        self._metrics = metrics
        self._source_counters: dict[str, Counter] = {}
        self._client_factory = client_factory or _default_client_factory
        self._clients: dict[str, _Channel] = {}
        self._calls: SharedCalls[str, _Stamped] = SharedCalls(clock=clock)
        # History reads, keyed by node and the exact request; shared in flight only.
        self._pages: SharedCalls[tuple[object, ...], HistoryPage] = SharedCalls(clock=clock)
        self._usage: SharedCalls[tuple[object, ...], Usage] = SharedCalls(clock=clock)
        self._events: SharedCalls[tuple[object, ...], EventPage] = SharedCalls(clock=clock)
        self._follows: SharedCalls[tuple[object, ...], EventPage] = SharedCalls(clock=clock)
        self._following: dict[str, int] = {}
        self.history_reads = CallerReads(history_reads_per_caller, history_reads_per_node)
        self._closed = False
        # Refresh ahead: which nodes, how often (None: adaptive, within the budget;
        # seconds: nodes read within them, at REFRESH_AT of the TTL; 0: never).
        self.keep_warm = KeepWarm(
            ttl=ttl, window=keep_warm, budget=refresh_budget, timeout=timeout, clock=clock
        )
        self._refresh_timers: dict[str, asyncio.TimerHandle] = {}
        self._metering = False
        self._refresh_slots = asyncio.Semaphore(REFRESH_CONCURRENCY)
        self._refresh_listeners: list[RefreshListener] = []
        if metrics is not None:
            metrics.agents_backing_off.set_function(lambda: float(self._backoff.backing_off()))
            metrics.watch_keep_warm(self.keep_warm)

    def on_refreshed(self, listener: RefreshListener) -> None:
        """Call ``listener`` with each snapshot a background refresh brings, before any
        query reads it (the server builds its graph objects there, off the query path)."""
        self._refresh_listeners.append(listener)

    def agent_address(self, node_name: str) -> str | None:
        """Where the node's agent is expected (host:port), or None if unknown."""
        try:
            return self.discovery.address(node_name)
        except AddressUnknownError:
            return None

    async def fetch(self, node_name: str) -> Received:
        """The node's snapshot, shared within the TTL, or AgentUnavailableError."""
        if self._closed:
            raise AgentUnavailableError(node_name, "the agent pool is shut down")

        def unless_backing_off() -> None:
            blocked = self._backoff.blocked(node_name)
            if blocked is not None:
                self._count("backoff")
                raise self._skipped(node_name, *blocked)

        self.keep_warm.read(node_name)
        stamped = await self._calls.get(
            node_name,
            lambda: self._call(node_name),
            self._keeper(node_name),
            before_call=unless_backing_off,
            observe=self._count,
            name=f"agent-call-{node_name}",
            # A refresh late to land (a busy server, a slow agent) does not hold the
            # reader: the snapshot it replaces is read, at most a timeout past its
            # time, and its age says so.
            stale_while_refreshing=self.timeout,
        )
        # The very snapshot object every other reader got: the graph objects
        # built from it are cached by identity (see graph_schema.views).
        return Received(stamped.snapshot, max(0.0, self._clock() - stamped.received_at))

    def _keeper(self, node_name: str) -> Callable[[_Stamped, float, float], Keep]:
        """How long the node's snapshot is served: the TTL, or longer while the budget
        spaces its refreshes further apart (its age says so)."""

        def keep(stamped: _Stamped, started: float, ended: float) -> Keep:
            return Keep(stamped.received_at, self.keep_warm.hold(node_name))

        return keep

    async def _call(self, node_name: str) -> _Stamped:
        try:
            address = self.discovery.address(node_name)
        except AddressUnknownError as exc:
            # Often a node that left the cluster: forget everything held for it.
            await self.forget(node_name)
            raise AgentUnavailableError(node_name, str(exc)) from None
        client = await self._client_for(node_name, address)
        started = time.perf_counter()
        outcome = "error"
        try:
            snapshot = await client.get_snapshot(timeout=self.timeout)
            if snapshot.node_name and snapshot.node_name != node_name:
                raise _WrongNodeError(f"it reports node {snapshot.node_name!r}")
            outcome = "ok"
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            # The call that closed the channel dealt with the node: no backoff here.
            raise _closed_under(node_name, address, "GetSnapshot") from None
        except Exception as exc:
            if _is_deadline(exc):
                outcome = "timeout"
            reason = _describe(exc, self.timeout)
            # A failed channel may be stuck (e.g. on a dead TCP connection);
            # the next call after the backoff builds a fresh one.
            await self._drop_client(node_name)
            self._calls.forget(node_name)
            # A node that stays down would otherwise log on every retry.
            level = logging.DEBUG if self._backoff.failing(node_name) else logging.WARNING
            delay = self._backoff.failed(node_name, reason)
            self._failed_at[node_name] = address
            log.log(
                level,
                "agent on node %s failed, skipping it for %.1f s: unreachable at %s: %s",
                node_name,
                delay,
                address,
                reason,
            )
            raise AgentUnavailableError(node_name, reason, address=address) from None
        finally:
            if self._metrics is not None:
                self._metrics.agent_calls.labels(node=node_name, outcome=outcome).inc()
                self._metrics.agent_call_seconds.observe(time.perf_counter() - started)
        if self._backoff.failing(node_name):
            log.warning("agent on node %s answers again", node_name)
            self._backoff.forget(node_name)
            self._failed_at.pop(node_name, None)
        self._schedule_refresh(node_name)
        return _Stamped(snapshot, self._clock())

    def _schedule_refresh(self, node_name: str) -> None:
        """Fetch the node again when the keep-warm policy says, while it is read."""
        if not self.keep_warm.enabled or self._closed:
            return
        previous = self._refresh_timers.pop(node_name, None)
        if previous is not None:
            previous.cancel()
        delay = self.keep_warm.next_refresh(node_name)
        if delay is None:
            # Not read repeatedly, or not within the budget: let its snapshot expire.
            return
        loop = asyncio.get_running_loop()
        # In a context of its own: a timer set by a refresh would otherwise run the next
        # one in that refresh's context, its meter included.
        self._refresh_timers[node_name] = loop.call_later(
            delay, self._refresh, node_name, context=contextvars.Context()
        )

    def _refresh(self, node_name: str) -> None:
        self._refresh_timers.pop(node_name, None)
        if self._closed or self._backoff.blocked(node_name) is not None:
            return
        self._count("refresh")
        self._calls.refresh(
            node_name,
            lambda: self._refreshed(node_name),
            self._keeper(node_name),
            name=f"agent-refresh-{node_name}",
        )

    async def _refreshed(self, node_name: str) -> _Stamped:
        if not self._metering:
            # The gRPC call runs in a task of the library's own: counted with the refresh.
            self._metering = True
            count_started_tasks(asyncio.get_running_loop())
        async with self._refresh_slots:
            cpu = OwnCpu()
            try:
                return await cpu.run(self._refresh_once(node_name))
            finally:
                self.keep_warm.spent(cpu.seconds)

    async def _refresh_once(self, node_name: str) -> _Stamped:
        stamped = await self._call(node_name)
        for listener in self._refresh_listeners:
            try:
                listener(node_name, stamped.snapshot)
            except Exception:
                # The snapshot is good; whatever the listener prepares is built on first read.
                log.exception("a refresh listener failed on node %s", node_name)
        return stamped

    async def call(
        self, node_name: str, method: Callable[[AgentClientLike], Awaitable[T]], *, what: str
    ) -> T:
        """Run ``method`` on the node's agent channel (history, pod names).

        Skips a node in backoff, as snapshots do, and turns every failure into
        AgentUnavailableError; a failure here leaves the snapshot path's backoff
        alone (a history call may fail for its own reasons, e.g. an old agent).
        """
        if self._closed:
            raise AgentUnavailableError(node_name, "the agent pool is shut down")
        blocked = self._backoff.blocked(node_name)
        if blocked is not None:
            raise self._skipped(node_name, *blocked)
        try:
            address = self.discovery.address(node_name)
        except AddressUnknownError as exc:
            raise AgentUnavailableError(node_name, str(exc)) from None
        client = await self._client_for(node_name, address)
        try:
            return await method(client)
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            raise _closed_under(node_name, address, what) from None
        except Exception as exc:
            reason = f"{what}: {_describe(exc, self.timeout)}"
            log.debug("agent on node %s at %s: %s", node_name, address, reason)
            raise AgentUnavailableError(node_name, reason, address=address) from None

    async def history_page(
        self, node_name: str, query: HistoryQuery, page_token: str = "", *, caller: Hashable = None
    ) -> HistoryPage:
        """One page of the node's occupancy log (graph_schema's HistorySource).

        Counted against ``caller``'s budget of reads in flight; identical requests
        in flight share one agent call.
        """
        timeout = self.timeout

        async def get(client: AgentClientLike) -> HistoryPage:
            reader = history_reader(client)
            return await reader.get_history(query, page_token=page_token, timeout=timeout)

        key = (node_name, *_exact(query), page_token)
        return await self._read(
            self._pages, key, caller, node_name,
            lambda: self.call(node_name, get, what="GetHistory"),
        )  # fmt: skip

    async def usage(self, node_name: str, query: UsageQuery, *, caller: Hashable = None) -> Usage:
        """The node's usage sums, grouped on the agent (graph_schema's HistorySource).

        Counted and shared as ``history_page`` is.
        """
        timeout = self.timeout

        async def get(client: AgentClientLike) -> Usage:
            return await history_reader(client).get_usage(query, timeout=timeout)

        key = (node_name, *_exact(query))
        return await self._read(
            self._usage, key, caller, node_name, lambda: self.call(node_name, get, what="GetUsage")
        )

    async def gpu_events(
        self, node_name: str, query: EventQuery, page_token: str = "", *, caller: Hashable = None
    ) -> EventPage:
        """One page of the node's GPU events (graph_schema's EventSource).

        Counted and shared as ``history_page`` is.
        """
        timeout = self.timeout

        async def get(client: AgentClientLike) -> EventPage:
            reader = event_reader(client)
            return await reader.get_gpu_events(query, page_token=page_token, timeout=timeout)

        key = (node_name, *_exact(query), page_token)
        return await self._read(
            self._events, key, caller, node_name,
            lambda: self.call(node_name, get, what="GetGpuEvents"),
        )  # fmt: skip

    async def follow_gpu_events(
        self, node_name: str, query: EventQuery, *, wait_seconds: float
    ) -> EventPage:
        """The node's events after ``query.after_sequence``, waiting up to ``wait_seconds``
        on the agent for one to land; identical followers share one call."""
        timeout = self.timeout + wait_seconds

        async def get(client: AgentClientLike) -> EventPage:
            reader = event_reader(client)
            return await reader.get_gpu_events(query, wait_seconds=wait_seconds, timeout=timeout)

        key = (node_name, *_exact(query), wait_seconds)
        self._following[node_name] = self._following.get(node_name, 0) + 1
        try:
            return await self._follows.get(
                key, lambda: self.call(node_name, get, what="GetGpuEvents"), _in_flight_only
            )
        finally:
            left = self._following[node_name] - 1
            if left:
                self._following[node_name] = left
            else:
                del self._following[node_name]

    def followers(self, node_name: str) -> int:
        """How many followers of the node's GPU events wait on its agent now."""
        return self._following.get(node_name, 0)

    def for_caller(self, caller: Hashable) -> EventSource:
        """The agents' logs as one caller reads them: each read counted against its budget."""
        return _CallerHistory(self, caller)

    async def _read(
        self,
        calls: SharedCalls[K, T],
        key: K,
        caller: Hashable,
        node_name: str,
        call: Callable[[], Awaitable[T]],
    ) -> T:
        """``call``'s answer, shared with an identical read in flight, else started once
        ``caller`` has a slot at ``node_name``; the slot is held until the agent answers."""
        try:
            # Joining a read in flight asks nothing more of the agent: no slot needed.
            return await calls.get(key, call, _in_flight_only, before_call=_refuse_to_start)
        except _NoSlotYet:
            pass
        slot = await self.history_reads.acquire(caller, node_name)
        started = False

        def starting() -> None:
            nonlocal started
            started = True

        async def holding_the_slot() -> T:
            # The call holds the slot, not its first caller: a caller that goes away
            # (its time limit, a closed connection) leaves the agent's read in flight,
            # and the read counts until the agent answers.
            try:
                return await call()
            finally:
                slot.release()

        try:
            # Another caller may have started the same read meanwhile: then join it.
            return await calls.get(key, holding_the_slot, _in_flight_only, before_call=starting)
        finally:
            if not started:
                slot.release()

    async def _client_for(self, node_name: str, address: str) -> AgentClientLike:
        token = self._token.current() if isinstance(self._token, TokenFile) else self._token
        current = self._clients.get(node_name)
        if current is not None:
            if current.address == address and current.token == token:
                return current.client
            if current.address != address:
                # The agent moved (a new pod IP): the old channel points nowhere.
                log.info(
                    "agent on node %s moved from %s to %s", node_name, current.address, address
                )
            # A rotated token: the channel's calls carry the old one.
            await self._drop_client(node_name)
        client = self._client_factory(address, token)
        self._clients[node_name] = _Channel(address, token, client)
        return client

    async def _drop_client(self, node_name: str) -> None:
        entry = self._clients.pop(node_name, None)
        if entry is not None:
            await _close_quietly(entry.client)

    def channel_count(self) -> int:
        """How many agent channels are open."""
        return len(self._clients)

    def node_names(self) -> set[str]:
        """Every node the pool holds something for: a channel, a snapshot, failures."""
        return set(self._clients) | self._calls.keys() | self._backoff.keys()

    async def forget(self, node_name: str) -> None:
        """Close the node's channel and drop its snapshot and failures (it left the cluster)."""
        self._stop_refreshing(node_name)
        await self._drop_client(node_name)
        self._calls.forget(node_name)
        self._backoff.forget(node_name)
        self._failed_at.pop(node_name, None)

    def _skipped(self, node_name: str, error: str, left: float) -> AgentUnavailableError:
        """The error of a call skipped while the node's agent is backed off."""
        return AgentUnavailableError(
            node_name,
            f"{error} (next retry in {left:.1f} s)",
            address=self._failed_at.get(node_name),
        )

    def _stop_refreshing(self, node_name: str) -> None:
        self.keep_warm.forget(node_name)
        timer = self._refresh_timers.pop(node_name, None)
        if timer is not None:
            timer.cancel()

    async def close(self) -> None:
        """Cancel calls in flight and close every channel."""
        self._closed = True
        for node_name in list(self._refresh_timers):
            self._stop_refreshing(node_name)
        await self._calls.close()
        await self._pages.close()
        await self._usage.close()
        await self._events.close()
        await self._follows.close()
        for node_name in list(self._clients):
            await self._drop_client(node_name)

    def _count(self, source: str) -> None:
        if self._metrics is not None:
            # The labelled child, looked up once: a whole-cluster read counts every node.
            counter = self._source_counters.get(source)
            if counter is None:
                counter = self._metrics.snapshot_requests.labels(source=source)
                self._source_counters[source] = counter
            counter.inc()


class _CallerHistory:
    """The pool's history and event reads on one caller's budget (graph_schema's EventSource)."""

    __slots__ = ("_caller", "_pool")

    def __init__(self, pool: AgentPool, caller: Hashable) -> None:
        self._pool = pool
        self._caller = caller

    async def history_page(
        self, node_name: str, query: HistoryQuery, page_token: str = ""
    ) -> HistoryPage:
        """One page of the node's log, read on this caller's budget."""
        return await self._pool.history_page(node_name, query, page_token, caller=self._caller)

    async def usage(self, node_name: str, query: UsageQuery) -> Usage:
        """The node's usage sums, read on this caller's budget."""
        return await self._pool.usage(node_name, query, caller=self._caller)

    async def gpu_events(
        self, node_name: str, query: EventQuery, page_token: str = ""
    ) -> EventPage:
        """One page of the node's GPU events, read on this caller's budget."""
        return await self._pool.gpu_events(node_name, query, page_token, caller=self._caller)

    async def follow_gpu_events(
        self, node_name: str, query: EventQuery, *, wait_seconds: float
    ) -> EventPage:
        """The node's next events, followed (held by the subscription cap, not the budget)."""
        return await self._pool.follow_gpu_events(node_name, query, wait_seconds=wait_seconds)


class _NoSlotYet(Exception):
    """No identical read is in flight: this one needs a slot of its caller's first."""


def _refuse_to_start() -> None:
    raise _NoSlotYet


def _in_flight_only(value: object, started: float, ended: float) -> None:
    # A log moves on with every scan and pushed pod name: an answer is good only
    # for the callers that asked while it was read.
    return None


def _exact(query: Any) -> tuple[object, ...]:
    """Every field of a request's dataclass, as a key: no field it gains later is left
    out of what decides that two requests are the same."""
    return (
        type(query).__name__,
        *(_hashable(getattr(query, f.name)) for f in dataclasses.fields(query)),
    )


def _hashable(value: object) -> object:
    # Filters are tuples as the graph builds them; a list or set one would not hash.
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, set):
        return frozenset(value)
    return value


class _WrongNodeError(Exception):
    """The agent answered for another node (an address reused by another agent)."""


def _is_deadline(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):
        return True
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            return bool(code() == grpc.StatusCode.DEADLINE_EXCEEDED)
        except Exception:
            return False
    return False


def _describe(exc: BaseException, timeout: float) -> str:
    if _is_deadline(exc):
        return f"no answer within the {timeout:g} s deadline"
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    text = str(exc)
    return text if text else type(exc).__name__


def _closed_under(node_name: str, address: str, what: str) -> AgentUnavailableError:
    """A call gRPC cancelled as another call closed its channel (the agent failed, moved
    or took a new token): this call's failure, where a CancelledError would unwind every
    caller waiting on it."""
    reason = f"{what}: the channel closed during the call; the next call opens a new one"
    return AgentUnavailableError(node_name, reason, address=address)


async def _close_quietly(client: AgentClientLike) -> None:
    try:
        result = client.close()
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.debug("closing an agent channel failed", exc_info=True)
