"""``gpugraph top`` run: connect, fetch, build the view, print it or follow it live."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from . import model
from .connection import resolve
from .errors import MIB, TopError
from .flags import DEFAULT_SORT
from .gpu_events import EventFlags, fetch_hits
from .keys import quit_key
from .queries import IDLE, SNAPSHOT, WATCH
from .text import one_line
from .transport import HttpTransport, Transport

PIPE_WIDTH = 1000


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off for the block, as it was before after it.

    The answer of a 1,000-node cluster becomes some 200,000 objects (parsed
    JSON, rows, cells), none in a cycle: each allocation threshold crossed
    started a collection that walked all of them again, a third of the time
    from bytes to table. Reference counting still frees everything.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def filters_of(args: argparse.Namespace) -> model.Filters:
    """The Filters the flags ask for; TopError for contradicting flags."""
    if args.namespace and args.all_namespaces:
        raise TopError("-n/--namespace and -A/--all-namespaces contradict each other")
    if args.view == "nodes" and (args.namespace or args.selector):
        raise TopError("top nodes has no -n or -l: it sums every pod; try top pods")
    if args.watch and args.selector:
        raise TopError("-l/--selector does not work with --watch: use -n or --node")
    if args.watch and args.output in ("json", "yaml"):
        raise TopError("--watch draws a live table; use -o json or yaml without it")
    return model.Filters(
        namespace=args.namespace,
        node=args.node,
        selector=args.selector,
        sort_by=args.sort_by or DEFAULT_SORT,
    )


# The views of the pod list, each pod with its requests and the GPUs it holds idle.
POD_VIEWS = ("pods", "namespaces")


def fetch(
    transport: Transport,
    filters: model.Filters,
    view: str,
    events: Callable[[], model.EventHits] | None = None,
) -> model.Snapshot:
    """One snapshot of the cluster for ``view``, with the filters applied and, where
    ``events`` gives them, the GPUs, pods and nodes with health events flagged."""
    variables = {
        "node": filters.node,
        "namespace": filters.namespace,
        "selector": filters.selector,
        # The pod list: what pods requested (top pods, namespaces), which match -l, and the
        # nodes -n's pods run on (whose down agents matter).
        "withPods": view in POD_VIEWS or filters.by_pod,
    }
    body = transport.execute(SNAPSHOT, variables)
    try:
        snapshot = model.snapshot_from_query(body)
    except model.NotFoundError:
        # A node the server does not know (or the caller may not see) matches nothing.
        if filters.node is None:
            raise
        raise no_match(view, filters) from None
    if view in POD_VIEWS:
        snapshot.idle = model.idle_from_query(
            transport.execute(IDLE, {"node": filters.node, "namespace": filters.namespace})
        )
    if events is not None:
        snapshot.events = events().beside(snapshot.down)
    return model.apply(snapshot, filters)


NOUNS = {"gpus": "GPUs", "pods": "pods", "nodes": "nodes", "namespaces": "namespaces"}


def no_match(view: str, filters: model.Filters) -> TopError:
    """The error of filters that select nothing."""
    flags = (("--node", filters.node), ("-n", filters.namespace), ("-l", filters.selector))
    asked = [f"{flag} {value}" for flag, value in flags if value is not None]
    return TopError(f"no {NOUNS.get(view, view)} match {' '.join(asked)}")


def check_matches(view: str, snapshot: model.Snapshot, filters: model.Filters) -> None:
    """TopError when the filters select nothing, as kubectl says "No resources found" and fails.

    A down node the filters select is a match: its line says what is not known.
    """
    filtered = filters.node is not None or filters.by_pod
    if not filtered or snapshot.down:
        return
    rows = {
        "pods": model.pod_rows,
        "nodes": model.node_rows,
        "namespaces": model.namespace_rows,
    }.get(view)
    if rows(snapshot, filters.sort_by) if rows else snapshot.gpus:
        return
    raise no_match(view, filters)


def _dump(view: str, snapshot: model.Snapshot, filters: model.Filters, fmt: str) -> str:
    from .documents import document

    doc = document(view, snapshot, filters.sort_by)
    if fmt == "yaml":
        import yaml

        # libyaml's emitter writes the same text as PyYAML's own, about 4x faster
        # (15 s to 4 s for 8,000 GPUs); PyYAML built without it falls back.
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return str(yaml.dump(doc, Dumper=dumper, sort_keys=False))
    return json.dumps(doc, indent=2) + "\n"


def _console() -> Any:
    from rich.console import Console

    # rich turns colour off when stdout is no terminal, and honours NO_COLOR. Piped
    # output is for grep and scripts: no 80-column squeeze that would cut cells.
    width = None if sys.stdout.isatty() else PIPE_WIDTH
    # Names are data, never markup or emoji codes: "[triton]" stays as it is.
    return Console(highlight=False, markup=False, emoji=False, soft_wrap=False, width=width)


def _stamp(count: int, clock: Callable[[], float]) -> str:
    return f"update {count} at {time.strftime('%H:%M:%S', time.localtime(clock()))}"


async def snapshots(
    transport: Transport,
    filters: model.Filters,
    interval: float,
    first: model.Snapshot,
    events: EventFlags | None = None,
) -> AsyncIterator[model.Snapshot]:
    """``first`` (the query's answer), then one snapshot per subscription tick, filtered, with
    the newest health events ``events`` has read."""
    yield first
    variables = {"node": filters.node, "interval": interval}
    async for body in transport.subscribe(WATCH, variables):
        tick = model.snapshot_from_tick(body)
        # The tick carries no pod list, nor the pods holding GPUs idle that the caller does
        # not see: the first query's answer fills them in.
        tick.pods, tick.idle = first.pods, first.idle
        if events is not None:
            tick.events = events.latest().beside(tick.down)
        yield model.apply(tick, filters)
    # gpuUpdates runs until the client leaves; a server that completes it is going away.
    raise TopError("the server completed the gpuUpdates subscription")


async def watch(
    transport: Transport,
    view: str,
    filters: model.Filters,
    interval: float,
    first: model.Snapshot,
    *,
    wide: bool = False,
    clock: Callable[[], float] = time.time,
    events: EventFlags | None = None,
) -> None:
    """Follow the cluster: redrawn in place on a terminal, else one whole frame per tick.

    A pipe or a file gets every frame in turn, each under its update line, as
    ``kubectl get -w`` prints each change: a live display would print only
    when it ends.
    """
    console = _console()
    frames = snapshots(transport, filters, interval, first, events)
    if console.is_terminal:
        await _live(console, frames, view, filters, wide=wide, clock=clock)
    else:
        await _stream(console, frames, view, filters, wide=wide, clock=clock)


async def _stream(
    console: Any,
    frames: AsyncIterator[model.Snapshot],
    view: str,
    filters: model.Filters,
    *,
    wide: bool,
    clock: Callable[[], float],
) -> None:
    from .render import draw
    from .render import view as render

    count = 0
    async for snapshot in frames:
        count += 1
        if count > 1:
            console.print()
        console.print(_stamp(count, clock))
        draw(console, render(view, snapshot, filters.sort_by, wide=wide))


async def _live(
    console: Any,
    frames: AsyncIterator[model.Snapshot],
    view: str,
    filters: model.Filters,
    *,
    wide: bool,
    clock: Callable[[], float],
) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from .render import down_lines, error_lines
    from .render import view as render

    count = 0

    def frame(snapshot: model.Snapshot) -> Any:
        # Rows for the screen only: less the header, the "more" line, the footer and
        # the down nodes' lines (long reasons wrap).
        notes = [*down_lines(snapshot.down), *error_lines(snapshot.events.errors)]
        down = len(console.render_lines(Group(*notes))) if notes else 0
        height = console.size.height - 3 - down
        parts = render(view, snapshot, filters.sort_by, wide=wide, height=height)
        footer = Text(f"{_stamp(count, clock)}; q or Ctrl-C to quit", style="dim")
        return Group(*parts, footer)

    live: Live | None = None
    with contextlib.ExitStack() as stack:
        async for snapshot in frames:
            count += 1
            if live is None:
                live = stack.enter_context(
                    Live(
                        frame(snapshot), console=console, auto_refresh=False, redirect_stdout=False
                    )
                )
                stack.enter_context(quit_key(asyncio.current_task()))
            else:
                live.update(frame(snapshot), refresh=True)


def run(args: argparse.Namespace, transport: Transport | None = None) -> int:
    """The whole command; errors are one line on stderr and exit code 1."""
    try:
        filters = filters_of(args)
        if transport is None:
            endpoint = resolve(
                server=args.server,
                token=args.token,
                kubeconfig=args.kubeconfig,
                namespace=args.gpugraph_namespace,
                service=args.service,
                deadline=args.request_timeout,
                max_answer_bytes=int(args.max_answer * MIB),
            )
            transport = HttpTransport(endpoint)
        if getattr(args, "events", False):
            from .gpu_events import run_events

            return run_events(args, transport, _console, sys.stdout.write)
        if getattr(args, "since", None) is not None:
            from .gpu_hours import run_since

            return run_since(args, transport, _console, sys.stdout.write)
        wide = args.output == "wide"
        # The EVENTS flags' read runs beside the snapshot's query, on a thread of its own.
        asked = transport
        events = EventFlags(lambda: fetch_hits(asked, filters.node))
        with no_cycle_collection():
            # On an event loop of its own, as --watch's loop is not yet running: Ctrl-C here
            # cancels the query and ends with 130 at once.
            snapshot = fetch(transport, filters, args.view, events.wait)
            check_matches(args.view, snapshot, filters)
        if args.watch:
            # Ctrl-C, or q (which cancels the watch): the terminal is left as it was.
            with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
                live = watch(
                    transport,
                    args.view,
                    filters,
                    args.interval,
                    snapshot,
                    wide=wide,
                    events=events,
                )
                asyncio.run(live)
            return 0
        with no_cycle_collection():
            if args.output in ("json", "yaml"):
                sys.stdout.write(_dump(args.view, snapshot, filters, args.output))
                return 0
            from .render import draw, view

            # Block by block, so the first rows show while the rest are drawn.
            draw(_console(), view(args.view, snapshot, filters.sort_by, wide=wide))
            return 0
    except TopError as exc:
        # Messages quote kubeconfig loaders and servers, which may span lines.
        print(f"gpugraph top: error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
