"""The agent's gRPC server: NodeAgent, the standard health service and reflection.

Every GetSnapshot call, and every read on a StreamSnapshots stream, is
answered from the sampler's latest snapshot, which is encoded once per scan; a
reply only copies it and stamps its age. History
calls read the occupancy log in a worker thread, never on the event loop, as
many at once as the log has readers; usage sums may take all of them but one,
so a page of records never waits behind a flood of sums.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .address import join_host_port, split_host_port
from .auth import BearerTokenInterceptor
from .codec import snapshot_to_proto
from .generated import agent_pb2, agent_pb2_grpc
from .gpu_event_codec import event_query_from_proto, event_to_proto
from .gpu_events.node_events import OFF as EVENTS_OFF
from .gpu_events.node_events import NodeGpuEvents
from .gpu_events.records import GpuEvent
from .history.log import OFF, OK, HistoryLog
from .history.store import READERS
from .history_codec import (
    BadHistoryRequestError,
    history_page_to_proto,
    history_query_from_proto,
    pod_names_from_proto,
    usage_query_from_proto,
    usage_reply_to_proto,
)
from .log_limits import AGENT_LOGGERS, limit_tracebacks
from .metrics.http import MetricsHttpServer
from .models import NodeSnapshot
from .pod_names import PodNames
from .request_guard import MalformedRequestGuard
from .sampler import Sampler

log = logging.getLogger(__name__)

Q = TypeVar("Q")
T = TypeVar("T")

# The largest request any method takes: requests are small (the biggest, a
# batch of pod names, is sent in pieces of 16 KiB), and gRPC buffers a whole
# message before any interceptor can refuse its call.
MAX_REQUEST_BYTES = 64 * 1024
MAX_STREAMS_PER_CONNECTION = 64
MAX_CONNECTIONS = 64
# A connection counts against MAX_CONNECTIONS while its HTTP/2 handshake is
# pending; gRPC's own limit (120 s) let 64 silent sockets lock everyone out.
HANDSHAKE_TIMEOUT_SECONDS = 5
# Options of the whole server, so every method on it, present or future, is
# bounded alike; no method can opt out.
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    # gRPC sets SO_REUSEPORT by default, which would let a second agent bind the same
    # port and silently take half the calls; a port in use must be an error instead.
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
    ("grpc.max_metadata_size", 16 * 1024),
    # HTTP/2 flow control: without these, gRPC widens each stream's window to
    # fit the message a caller announces, and 100 unauthenticated 4 MiB
    # messages on one connection raised the agent's peak RSS by 115 MB (its
    # memory limit in the chart is 256 Mi); with them, by about 1 MB.
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 16 * 1024),
    # Streams per connection, and connections: the server opens one channel per
    # agent, Prometheus and probes a few more.
    ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
    ("grpc.max_allowed_incoming_connections", MAX_CONNECTIONS),
    ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_SECONDS * 1000),
    # An idle connection is closed (GOAWAY; a client reconnects when it needs to).
    ("grpc.max_connection_idle_ms", 5 * 60 * 1000),
)

# Followers of the GPU event log waiting at once; more are answered without waiting.
MAX_EVENT_WAITERS = 16
# The most a page's events take on the wire (always one at least): a client receives
# at most 4 MiB by default, and 500 events of 48 processes each came to 4.85 MB.
MAX_EVENT_PAGE_BYTES = 1024 * 1024

SERVICE_NAME: str = agent_pb2.DESCRIPTOR.services_by_name["NodeAgent"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class NodeAgentServicer(agent_pb2_grpc.NodeAgentServicer):
    """Answers GetSnapshot from the sampler without touching NVML."""

    def __init__(
        self,
        sampler: Sampler,
        *,
        clock: Callable[[], float] = time.time,
        history: HistoryLog | None = None,
        pod_names: PodNames | None = None,
        events: NodeGpuEvents | None = None,
    ) -> None:
        self._sampler = sampler
        self._clock = clock
        self._history = history
        self._events = events
        # Set (and replaced) when new event records land; followers wait on it.
        self._landed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event_waiters = 0
        self.pod_names = pod_names if pod_names is not None else PodNames()
        # The last snapshot and its encoding, or None when it could not be encoded.
        self._encoded: tuple[NodeSnapshot, agent_pb2.Snapshot | None] | None = None
        # Snapshots answered so far (calls and stream reads); tests and benchmarks read it.
        self.calls_served = 0
        # Whether a call's metadata still carries a valid token; None when no token is set.
        self.authorized: Callable[[Any], bool] | None = None
        # The tasks serving snapshot streams, which a stop ends at once.
        self._streams: set[asyncio.Task[Any]] = set()
        self._stopping = False
        # Waiting for a reader happens here, not in a worker thread that would sit idle.
        self._reads = asyncio.Semaphore(READERS)
        self._usage_reads = asyncio.Semaphore(max(1, READERS - 1))

    def _encode(self, snapshot: NodeSnapshot) -> agent_pb2.Snapshot | None:
        cached = self._encoded
        if cached is None or cached[0] is not snapshot:
            try:
                encoded = snapshot_to_proto(snapshot, now=snapshot.sampled_at)
            except Exception:
                # Logged once per snapshot; calls get INTERNAL until a scan encodes again.
                log.exception("cannot encode the snapshot taken at %s", snapshot.sampled_at)
                encoded = None
            if encoded is not None:
                encoded.history_status = self.history_status
                encoded.gpu_event_status = self.gpu_event_status
            cached = self._encoded = (snapshot, encoded)
        return cached[1]

    @property
    def history_status(self) -> str:
        """The occupancy log's status: "ok", "off" or what is wrong."""
        return self._history.status if self._history is not None else OFF

    @property
    def gpu_event_status(self) -> str:
        """GPU health events: "ok", "unsupported", "off" or what is wrong."""
        return self._events.status if self._events is not None else EVENTS_OFF

    def listen_for_events(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wake followers on ``loop`` whenever event records land (call once, on the loop)."""
        self._loop = loop
        self._landed = asyncio.Event()
        if self._events is not None:
            self._events.recorder.on_records(self._records_landed)

    def _records_landed(self) -> None:
        # Called on the recorder's thread; the loop may be gone if the server stopped first.
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_followers)

    def _wake_followers(self) -> None:
        landed, self._landed = self._landed, asyncio.Event()
        if landed is not None:
            landed.set()

    async def GetGpuEvents(
        self, request: agent_pb2.GetGpuEventsRequest, context: aio.ServicerContext[Any, Any]
    ) -> agent_pb2.GpuEventPage:
        """One page of GPU events; following, waits for the next to land if asked to."""
        page = agent_pb2.GpuEventPage(
            node_name=self._sampler.node_name, event_status=self.gpu_event_status
        )
        try:
            query, wait = event_query_from_proto(request)
        except BadHistoryRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise AssertionError("unreachable: abort raises") from None
        history = self._history
        if history is None:
            page.status = OFF
            return page
        deadline = time.monotonic() + wait
        waiting = False
        try:
            while True:
                landed = self._landed
                try:
                    async with self._reads:
                        events, log_id, last = await _read_to_its_end(history.gpu_events, query)
                except (sqlite3.Error, OSError) as exc:
                    page.status = await _read_failed(context, history, exc)
                    return page
                remaining = deadline - time.monotonic()
                if events or remaining <= 0 or landed is None:
                    break
                if not waiting:
                    if self._event_waiters >= MAX_EVENT_WAITERS:
                        break
                    waiting = True
                    self._event_waiters += 1
                try:
                    await asyncio.wait_for(landed.wait(), remaining)
                except TimeoutError:
                    deadline = 0.0  # one more read, then answer
        finally:
            if waiting:
                self._event_waiters -= 1
        page.status = history.status
        page.log_id = log_id
        page.last_sequence = max([last, *(e.id for e in events)])
        sent = _within_page_bytes(events)
        page.events.extend(sent)
        # A page cut short continues after its last event, as a full one does; a
        # follower continues after the highest sequence it got.
        if query.after_sequence is None and (len(sent) < len(events) or len(events) == query.limit):
            page.next_page_token = sent[-1].cursor
        return page

    async def GetHistory(
        self, request: agent_pb2.GetHistoryRequest, context: aio.ServicerContext[Any, Any]
    ) -> agent_pb2.HistoryPage:
        """One page of the records overlapping the asked range."""
        node_name = self._sampler.node_name
        try:
            query = history_query_from_proto(request)
        except BadHistoryRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise AssertionError("unreachable: abort raises") from None
        history = self._history
        if history is None:
            return history_page_to_proto(node_name, OFF)
        try:
            async with self._reads:
                records = await _read_to_its_end(history.history, query)
        except (sqlite3.Error, OSError) as exc:
            return history_page_to_proto(node_name, await _read_failed(context, history, exc))
        return history_page_to_proto(node_name, history.status, records, limit=query.limit)

    async def GetUsage(
        self, request: agent_pb2.GetUsageRequest, context: aio.ServicerContext[Any, Any]
    ) -> agent_pb2.UsageReply:
        """GPU- and GiB-seconds over the asked range, summed and grouped here."""
        node_name = self._sampler.node_name
        try:
            query = usage_query_from_proto(request, now=self._clock())
        except BadHistoryRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise AssertionError("unreachable: abort raises") from None
        history = self._history
        if history is None:
            return usage_reply_to_proto(node_name, OFF)
        try:
            async with self._usage_reads, self._reads:
                rows = await _read_to_its_end(history.usage, query)
        except (sqlite3.Error, OSError) as exc:
            return usage_reply_to_proto(node_name, await _read_failed(context, history, exc))
        return usage_reply_to_proto(node_name, history.status, rows)

    async def PutPodNames(
        self, request: agent_pb2.PutPodNamesRequest, context: aio.ServicerContext[Any, Any]
    ) -> agent_pb2.PutPodNamesReply:
        """Remember the names of pods on this node (written to the log with its next flush)."""
        node_name = self._sampler.node_name
        if request.node_name and request.node_name != node_name:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this agent serves node {node_name!r}, not {request.node_name!r}",
            )
        try:
            pods = pod_names_from_proto(list(request.pods))
        except BadHistoryRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise AssertionError("unreachable: abort raises") from None
        return agent_pb2.PutPodNamesReply(stored=self.pod_names.put(pods))

    async def GetSnapshot(
        self, request: agent_pb2.GetSnapshotRequest, context: aio.ServicerContext[Any, Any]
    ) -> agent_pb2.Snapshot:
        """The latest snapshot, with its age at the time of the reply."""
        return await self._reply(context)

    async def StreamSnapshots(
        self,
        request_iterator: AsyncIterator[agent_pb2.GetSnapshotRequest],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[agent_pb2.Snapshot]:
        """GetSnapshot's answer for each request on the stream."""
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            async for _ in request_iterator:
                # The token was checked when the stream opened; a stream outlives a
                # rotation, so each read checks it again: a retired token reads no more.
                if self.authorized is not None and not self.authorized(
                    context.invocation_metadata()
                ):
                    await context.abort(
                        grpc.StatusCode.UNAUTHENTICATED, "the bearer token is no longer valid"
                    )
                yield await self._reply(context)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            # Ended by ``end_streams``: a status tells the reader, and ends the call now.
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the agent is stopping")
        finally:
            self._streams.discard(task)

    def end_streams(self) -> None:
        """End every snapshot stream (UNAVAILABLE): a reader's stream never ends on its
        own, and a stop would otherwise wait its whole grace for them."""
        self._stopping = True
        for task in list(self._streams):
            task.cancel()

    async def _reply(self, context: aio.ServicerContext[Any, Any]) -> agent_pb2.Snapshot:
        snapshot = self._sampler.latest()
        if snapshot is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no GPU sample taken yet")
            raise AssertionError("unreachable: abort raises")
        encoded = self._encode(snapshot)
        if encoded is None:
            await context.abort(grpc.StatusCode.INTERNAL, "the latest snapshot cannot be encoded")
            raise AssertionError("unreachable: abort raises")
        reply = agent_pb2.Snapshot()
        reply.CopyFrom(encoded)
        reply.age_seconds = max(0.0, self._clock() - snapshot.sampled_at)
        self.calls_served += 1
        return reply


async def _read_to_its_end(read: Callable[[Q], T], query: Q) -> T:
    """``read(query)`` in a worker thread; a cancelled caller still waits for it to end."""
    work = asyncio.ensure_future(asyncio.to_thread(read, query))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        # A thread cannot be stopped: its caller keeps the reader slot it holds until
        # the read ends, or calls cancelled by their deadline would let more reads run
        # at once than the log has readers.
        await asyncio.wait([work])
        raise


def _within_page_bytes(events: list[GpuEvent]) -> list[agent_pb2.GpuEvent]:
    """The first of ``events`` on the wire, as many as MAX_EVENT_PAGE_BYTES holds (one at least)."""
    sent: list[agent_pb2.GpuEvent] = []
    size = 0
    for event in events:
        message = event_to_proto(event)
        size += message.ByteSize()
        if sent and size > MAX_EVENT_PAGE_BYTES:
            break
        sent.append(message)
    return sent


async def _read_failed(
    context: aio.ServicerContext[Any, Any], history: HistoryLog, exc: BaseException
) -> str:
    """The log's status to answer a failed read with where it says what is wrong; else
    abort the call with UNAVAILABLE naming the read error ``exc``."""
    status = history.status
    if status == OK:
        # The status tells only of opening and writing the log: "ok" with nothing read
        # would look like an empty log, and a follower of its events would start again
        # from its first event and count every one twice.
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"cannot read the occupancy log: {type(exc).__name__}: {exc}",
        )
    return status


class AgentServer:
    """A running (or runnable) agent gRPC server over one sampler."""

    def __init__(
        self,
        sampler: Sampler,
        *,
        token: str | Callable[[], str] | None = None,
        history: HistoryLog | None = None,
        pod_names: PodNames | None = None,
        events: NodeGpuEvents | None = None,
    ) -> None:
        # A flood of failing calls must not flood the log.
        limit_tracebacks(AGENT_LOGGERS)
        self.sampler = sampler
        self.history = history
        if pod_names is None and history is not None:
            pod_names = history.pod_names
        self.servicer = NodeAgentServicer(
            sampler, history=history, pod_names=pod_names, events=events
        )
        self.pod_names = self.servicer.pod_names
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        # The token check first: an unauthenticated call is refused before its payload
        # is decoded at all; then undecodable payloads are INVALID_ARGUMENT, not tracebacks.
        interceptors: list[aio.ServerInterceptor] = []
        if token:
            guard = BearerTokenInterceptor(token)
            self.servicer.authorized = guard.authorized
            interceptors.append(guard)
        interceptors.append(MalformedRequestGuard())
        self._server = aio.server(interceptors=interceptors, options=SERVER_OPTIONS)
        agent_pb2_grpc.add_NodeAgentServicer_to_server(self.servicer, self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )
        self._ready_task: asyncio.Task[None] | None = None
        self.address: str | None = None
        # The node's /metrics listener, when ``agent_running`` was asked for one.
        self.metrics: MetricsHttpServer | None = None
        # True while health reports SERVING.
        self.serving = False

    @property
    def calls_served(self) -> int:
        """Snapshots answered so far: GetSnapshot calls and StreamSnapshots reads."""
        return self.servicer.calls_served

    async def start(self, listen: str) -> str:
        """Bind ``listen`` (HOST:PORT, port 0 picks one) and serve; returns the bound address."""
        host, _ = split_host_port(listen)
        try:
            port = self._server.add_insecure_port(listen)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {listen}: {exc}") from exc
        if port == 0:
            raise OSError(f"cannot listen on {listen}")
        for service in ("", SERVICE_NAME):
            await self.health.set(service, NOT_SERVING)
        await self._server.start()
        self.servicer.listen_for_events(asyncio.get_running_loop())
        self.address = join_host_port(host, port)
        self._ready_task = asyncio.create_task(self._serving_when_ready())
        return self.address

    async def _serving_when_ready(self) -> None:
        # Health turns SERVING once there is a snapshot to serve.
        ready = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:
            # Called from the sampling thread; the loop may be gone if the server stopped first.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(ready.set)

        self.sampler.when_ready(wake)
        await ready.wait()
        for service in ("", SERVICE_NAME):
            await self.health.set(service, SERVING)
        self.serving = True

    async def stop(self, grace: float | None = 2.0) -> None:
        """Report NOT_SERVING, let calls in flight finish for ``grace`` seconds, then stop."""
        if self._ready_task is not None:
            self._ready_task.cancel()
        self.serving = False
        await self.health.enter_graceful_shutdown()
        self.servicer.end_streams()
        await self._server.stop(grace)
