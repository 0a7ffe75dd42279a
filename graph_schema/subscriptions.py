"""The Subscription root: live views that re-read the agents on every tick."""

from __future__ import annotations

from asyncio import sleep
from collections.abc import AsyncGenerator
from typing import cast

import strawberry
from strawberry.types import Info

from .context import GraphContext
from .errors import check_name, named_nodes
from .limits import clamp_interval
from .occupancy.event_resolvers import EVENT_STREAM_DESCRIPTION, batch_of, event_stream
from .occupancy.events import GpuEventObject
from .query import gpus_of_nodes
from .types import Gpu, Pod, ready_context


def _live_context(info: Info) -> GraphContext:
    # Subscriptions need more than resolvers do: the server-wide slot limiter
    # and fresh loaders for every tick.
    return cast(GraphContext, ready_context(info))


def _identity(ctx: GraphContext) -> str | None:
    # Each authenticated identity gets its own share of the slots; without
    # authentication there is no identity and only the server-wide cap applies.
    return ctx.viewer.username if ctx.viewer is not None else None


@strawberry.type(
    description="Live views: each field yields a fresh result every tick, re-reading the "
    "agents. The server caps how many subscriptions run at once, in all and per caller."
)
class Subscription:
    @strawberry.subscription(
        description="Every tick, the GPUs of one node (or of every node). Nodes whose agent "
        "cannot answer are left out and named in that tick's errors; a nodeName the caller "
        "cannot see (or no node has) is the error NOT_FOUND. The interval is at least 0.5 s."
    )
    async def gpu_updates(
        self, info: Info, node_name: str | None = None, interval_seconds: float | None = 2.0
    ) -> AsyncGenerator[list[Gpu], None]:
        ctx = _live_context(info)
        interval = clamp_interval(interval_seconds)
        with ctx.state.subscriptions.hold(_identity(ctx)):
            while True:
                # Fresh loaders each tick; the snapshot source's TTL sharing
                # keeps many subscribers of one node to about one call a tick.
                ctx.new_tick()
                # Re-checks the caller once its reviews expire; ends when it fails.
                await ctx.refresh_scope()
                # A node the caller may not see (or gone) ends the stream NOT_FOUND, as gpus
                # answers: an empty tick would look like a node with idle GPUs.
                names = named_nodes(ctx.cluster, node_name)
                # The operation has a context of its own, so the errors of
                # failing nodes go out with this tick's result.
                gpus = await gpus_of_nodes(ctx, info, names)
                ctx.charge(len(gpus))
                yield gpus
                await sleep(interval)

    @strawberry.subscription(
        description="Every tick, the pod (null while it does not exist) with its GPU usage. "
        "The interval is at least 0.5 s."
    )
    async def pod_gpu_usage(
        self, info: Info, namespace: str, name: str, interval_seconds: float | None = 2.0
    ) -> AsyncGenerator[Pod | None, None]:
        ctx = _live_context(info)
        # An empty name is no pod's: refused, not followed with null for ever.
        check_name("namespace", namespace)
        check_name("name", name)
        interval = clamp_interval(interval_seconds)
        with ctx.state.subscriptions.hold(_identity(ctx)):
            while True:
                ctx.new_tick()
                await ctx.refresh_scope()
                record = ctx.cluster.pod(namespace, name)
                yield None if record is None else Pod.from_record(record)
                await sleep(interval)

    @strawberry.subscription(description=EVENT_STREAM_DESCRIPTION)
    async def gpu_event_stream(
        self, info: Info, node_name: str | None = None, namespace: str | None = None
    ) -> AsyncGenerator[GpuEventObject, None]:
        ctx = _live_context(info)
        with ctx.state.subscriptions.hold(_identity(ctx)):
            async for batch in event_stream(ctx, node_name, namespace):
                # Re-checks the caller once its reviews expire; ends when it fails.
                await ctx.refresh_scope()
                for event in batch_of(ctx, batch):
                    yield event
