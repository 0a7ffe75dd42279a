"""One running agent: a sampler scanning in the background behind its gRPC server
(and, when asked, its own ``/metrics``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from .gpu_events.node_events import NodeGpuEvents
from .history.log import HistoryLog
from .metrics.http import MetricsHttpServer
from .metrics.node_series import NodeSeries
from .sampler import Sampler
from .service import AgentServer

__all__ = ["CALLS_STOP_GRACE_SECONDS", "agent_running"]

# How long calls in flight may take to finish once the agent is asked to stop.
CALLS_STOP_GRACE_SECONDS = 2.0


@contextlib.asynccontextmanager
async def agent_running(
    sampler: Sampler,
    listen: str,
    *,
    token: str | Callable[[], str] | None = None,
    grace: float | None = CALLS_STOP_GRACE_SECONDS,
    join_timeout: float | None = None,
    history: HistoryLog | None = None,
    metrics_listen: str | None = None,
    metrics_token: Callable[[], str] | None = None,
    events: NodeGpuEvents | None = None,
) -> AsyncIterator[AgentServer]:
    """Serve ``sampler`` on ``listen`` and start it scanning; stop both on exit.

    A bind failure raises ``OSError`` before the sampler starts. On exit the
    server gets ``grace`` seconds for calls in flight, then the sampler is
    joined (at most ``join_timeout`` seconds; ``Sampler.stop``'s default if
    None), before the loop closes, so a scan in progress finishes cleanly.
    The sampler is joined even if stopping the server fails. With ``history``
    (whose ``observe`` the sampler must call on each scan), the occupancy log
    is opened before the first scan and flushed and closed after the last.
    With ``metrics_listen``, the node's GPU series are served there over HTTP
    (``server.metrics``), behind ``metrics_token`` when one is given. With
    ``events`` (whose ``observe`` the sampler must call on each scan), GPU health
    events are recorded from before the first scan until after the last.
    """
    # The judge names processes from the pod names the server pushes to this agent.
    names = sampler.judge.pod_names if sampler.judge is not None else None
    server = AgentServer(sampler, token=token, history=history, pod_names=names, events=events)
    try:
        await server.start(listen)
        if metrics_listen is not None:
            series = NodeSeries(sampler.latest, server.pod_names)
            render = series.render if events is None else _with_events(series.render, events)
            server.metrics = MetricsHttpServer(render, token=metrics_token)
            await server.metrics.start(metrics_listen)
    except OSError:
        await server.stop(0)
        raise
    if history is not None:
        await asyncio.to_thread(history.start)
    if events is not None:
        events.start()
    sampler.start()
    try:
        yield server
    finally:
        try:
            if server.metrics is not None:
                await server.metrics.stop()
            await server.stop(grace)
        finally:
            await asyncio.to_thread(sampler.stop, join_timeout)
            if events is not None:
                await asyncio.to_thread(events.stop)
            if history is not None:
                await asyncio.to_thread(history.stop)


def _with_events(
    render: Callable[[], bytes | None], events: NodeGpuEvents
) -> Callable[[], bytes | None]:
    """The node's GPU series followed by its event counters."""

    def both() -> bytes | None:
        gauges = render()
        return None if gauges is None else gauges + events.render()

    return both
