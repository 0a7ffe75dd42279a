"""GPU health events in ``gpugraph top``: the EVENTS flag, and ``top --events``.

The flag: each view reads ``gpuEvents`` for the last ``EVENT_HOURS`` in a
document of its own, on a thread of its own while the snapshot's query runs,
and again once a minute while it watches (as the map does): one fan-out to the
agents' logs per read, its answer only UUIDs. A GPU or MIG device of the
view with an event is flagged, and so are the pods that had a process on it
at that moment and its node. What the server withholds from the caller
(another tenant's events and processes, through its visibility seam) never
reaches the flags. Not in the snapshot's document: an error of the events
field (a node whose log is off, a server that reads no events) would have
taken the table with it; here it leaves the flags it could not know out and
says so below the table (``errors`` in ``-o json``).

``top --events``: the events themselves, newest first, with the process the
driver blamed and the pods that were on the GPU, from the same connection
paged to its end (at most ``MAX_PAGES`` pages, said when cut).
"""

from __future__ import annotations

import argparse
import datetime
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from .documents import VERSION
from .errors import TopError
from .flags import DEFAULT_VIEW
from .gpu_hours import since_of
from .marks import EVENT_HOURS
from .model import DownNode, EventHits, down_from_errors
from .transport import Transport

if TYPE_CHECKING:
    from .render import Cell

__all__ = [
    "EVENTS",
    "EVENT_REFRESH_SECONDS",
    "HITS",
    "MAX_PAGES",
    "PAGE",
    "EventFlags",
    "EventList",
    "EventProcess",
    "EventRow",
    "event_list",
    "fetch_hits",
    "run_events",
]

# gpuEvents' largest page (the server's MAX_FIRST; a test holds them equal).
PAGE = 1000
# Pages read at most: 20,000 events, some 10 MB of answer. Past it the list is cut, and says so.
MAX_PAGES = 20
# How often a watched view reads the events again (the map's pace).
EVENT_REFRESH_SECONDS = 60.0
NO_POD = "(no pod)"

HITS = """
query TopEventHits($since: DateTime!, $node: String, $first: Int, $after: String) {
  gpuEvents(since: $since, nodeName: $node, first: $first, after: $after) {
    edges { node { gpu { uuid } node { name } processes { podUid } } }
    pageInfo { hasNextPage endCursor }
  }
}
"""

# The first page also asks each GPU's index, which an event does not carry.
EVENTS = """
query TopEvents($since: DateTime!, $node: String, $namespace: String, $first: Int,
  $after: String, $withGpus: Boolean!) {
  gpuEvents(since: $since, nodeName: $node, namespace: $namespace, first: $first,
    after: $after) {
    edges {
      node {
        time kind xid description migDeviceUuid hiddenProcessCount
        gpu { uuid }
        node { name }
        culprit { pid processName podNamespace podName }
        processes { pid processName podNamespace podName allocation }
      }
    }
    pageInfo { hasNextPage endCursor }
  }
  gpus(nodeName: $node) @include(if: $withGpus) { uuid index }
}
"""

T = TypeVar("T")


class Background(Generic[T]):
    """``work()`` on a daemon thread: a run that ends early (an error, Ctrl-C) never waits
    for it. (Not concurrent.futures, which top would import for this alone.)"""

    def __init__(self, work: Callable[[], T]) -> None:
        self._ended = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(work,), daemon=True).start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._result = work()
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc
        finally:
            self._ended.set()

    def done(self) -> bool:
        """Whether the work has ended."""
        return self._ended.is_set()

    def result(self) -> T:
        """What the work returned, once it has (its exception raised here)."""
        self._ended.wait()
        if self._error is not None:
            raise self._error
        return cast(T, self._result)


@dataclass(frozen=True, slots=True)
class Pages:
    """Every page of a ``gpuEvents`` read: its edges' nodes, the first page's data, its
    errors (each message once) and whether it stopped at ``MAX_PAGES`` with more left."""

    events: list[Mapping[str, Any]]
    first: Mapping[str, Any]
    errors: list[Mapping[str, Any]]
    truncated: bool


def _path_head(error: Mapping[str, Any]) -> Any:
    path = error.get("path") or [None]
    return path[0]


def _refusal(errors: Sequence[Mapping[str, Any]], node: str | None) -> TopError:
    """The error of an answer without ``gpuEvents``."""
    for error in errors:
        code = (error.get("extensions") or {}).get("code")
        if code == "NOT_FOUND" and node is not None:
            return TopError(f"no nodes match --node {node}")
        if code == "NOT_READY":
            return TopError(f"server not ready: {error.get('message')}")
    message = errors[0].get("message") if errors else "no gpuEvents in the answer"
    return TopError(f"server error: {message}")


def read_pages(
    transport: Transport, query: str, variables: Mapping[str, Any], node: str | None = None
) -> Pages:
    """``gpuEvents`` followed by its cursor to the end, at most MAX_PAGES pages; TopError
    when a page has no ``gpuEvents`` at all."""
    events: list[Mapping[str, Any]] = []
    errors: dict[str, Mapping[str, Any]] = {}
    first: Mapping[str, Any] = {}
    after = None
    try:
        for number in range(MAX_PAGES):
            asked = {**variables, "first": PAGE, "after": after}
            if "withGpus" in variables:
                asked["withGpus"] = variables["withGpus"] and number == 0
            body = transport.execute(query, asked)
            said = [e for e in body.get("errors") or () if _path_head(e) in (None, "gpuEvents")]
            data = body.get("data") or {}
            connection = data.get("gpuEvents")
            if connection is None:
                raise _refusal(said, node)
            if number == 0:
                first = data
            # Each page asks every node again: a node down for one is down for the next.
            errors.update((str(e.get("message")), e) for e in said)
            events += [edge["node"] for edge in connection["edges"]]
            page = connection["pageInfo"]
            after = page["endCursor"]
            if not page["hasNextPage"] or after is None:
                return Pages(events, first, list(errors.values()), truncated=False)
    except (KeyError, TypeError, AttributeError) as exc:
        raise TopError(f"the server's gpuEvents answer is not the expected shape ({exc})") from None
    return Pages(events, first, list(errors.values()), truncated=True)


def fetch_hits(
    transport: Transport, node: str | None, clock: Callable[[], float] = time.time
) -> EventHits:
    """The GPUs, pods and nodes with events in the last EVENT_HOURS; what could not be read
    is in its ``down`` and ``errors``, never raised: the flags must not cost the view."""
    since = since_of(f"{EVENT_HOURS}h", clock)
    try:
        pages = read_pages(transport, HITS, {"since": since, "node": node}, node)
        gpus: set[str] = set()
        pods: set[str] = set()
        nodes: set[str] = set()
        for event in pages.events:
            # A MIG device's event names its GPU: the row the views show.
            gpus.add(event["gpu"]["uuid"])
            nodes.add(event["node"]["name"])
            pods.update(p["podUid"] for p in event["processes"] if p.get("podUid"))
    except TopError as exc:
        return EventHits(errors=(f"GPU events not known: {exc}",))
    except (KeyError, TypeError, AttributeError) as exc:
        return EventHits(errors=(f"GPU events not known: an answer of another shape ({exc})",))
    down, other = _split(pages.errors)
    other = [f"GPU events not known: {message}" for message in other]
    if pages.truncated:
        other.append(
            f"more than {MAX_PAGES * PAGE:,} GPU events in the last {EVENT_HOURS} hours: "
            "EVENTS flags those of the oldest; top --events lists them"
        )
    return EventHits(
        gpus=frozenset(gpus),
        pods=frozenset(pods),
        nodes=frozenset(nodes),
        down=tuple((d.node, message) for d, message in down),
        errors=tuple(other),
    )


def _split(errors: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[DownNode, str]], list[str]]:
    """Down nodes (each with the server's message) and the other messages of ``errors``."""
    down: list[tuple[DownNode, str]] = []
    other: list[str] = []
    for error in errors:
        message = str(error.get("message", ""))
        named, rest = down_from_errors([error])
        if named:
            down.append((named[0], message))
        other += rest
    return down, other


class EventFlags:
    """Where a view's EVENTS flags come from: a read started at once, on a thread of its
    own, and while the view is watched another each EVENT_REFRESH_SECONDS, never waited on."""

    def __init__(
        self,
        fetch: Callable[[], EventHits],
        *,
        clock: Callable[[], float] = time.monotonic,
        every: float = EVENT_REFRESH_SECONDS,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._every = every
        self._asked_at = clock()
        self._pending: Background[EventHits] | None = Background(fetch)
        self._hits: EventHits | None = None

    def wait(self) -> EventHits:
        """The first read's answer, waited for."""
        if self._pending is not None:
            self._hits, self._pending = self._pending.result(), None
        assert self._hits is not None
        return self._hits

    def latest(self) -> EventHits:
        """The newest answer in, without waiting; another read starts once the last one
        is ``every`` seconds old."""
        if self._pending is not None and self._pending.done():
            self._hits, self._pending = self._pending.result(), None
        if self._pending is None and self._clock() - self._asked_at >= self._every:
            self._asked_at = self._clock()
            self._pending = Background(self._fetch)
        return self._hits if self._hits is not None else EventHits()


# -- top --events ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EventProcess:
    """A process on the GPU when it had an event (or the one the driver blamed)."""

    pid: int
    name: str | None
    # (namespace, name); None for a process in no pod.
    pod: tuple[str, str] | None
    allocation: str | None = None

    @property
    def pod_key(self) -> str | None:
        """``namespace/name``, or None."""
        return None if self.pod is None else f"{self.pod[0]}/{self.pod[1]}"


@dataclass(frozen=True, slots=True)
class EventRow:
    """One GPU health event as the caller may see it."""

    time: str
    node: str
    gpu_uuid: str
    gpu_index: int | None
    mig_device_uuid: str | None
    kind: str
    xid: int | None
    description: str | None
    culprit: EventProcess | None
    processes: tuple[EventProcess, ...]
    hidden: int

    @property
    def pods(self) -> list[str]:
        """The distinct pods that had a process on the GPU, as ``namespace/name``."""
        return list(dict.fromkeys(key for p in self.processes if (key := p.pod_key)))


@dataclass(frozen=True, slots=True)
class EventList:
    """A ``top --events`` answer: the events newest first, and what it could not read."""

    since: str
    events: list[EventRow]
    truncated: bool
    down: list[DownNode]
    errors: list[str]


def _process(data: Mapping[str, Any]) -> EventProcess:
    namespace, name = data.get("podNamespace"), data.get("podName")
    pod = (namespace, name) if namespace and name else None
    return EventProcess(data["pid"], data.get("processName"), pod, data.get("allocation"))


def event_list(
    transport: Transport,
    since: str,
    *,
    node: str | None = None,
    namespace: str | None = None,
) -> EventList:
    """The events since ``since``, newest first; TopError when the server answers none."""
    variables = {"since": since, "node": node, "namespace": namespace, "withGpus": True}
    pages = read_pages(transport, EVENTS, variables, node)
    try:
        # A GPU's index where the server still lists it (not on a node that is down).
        indices = {g["uuid"]: g["index"] for g in pages.first.get("gpus") or ()}
        rows = [
            EventRow(
                time=event["time"],
                node=event["node"]["name"],
                gpu_uuid=event["gpu"]["uuid"],
                gpu_index=indices.get(event["gpu"]["uuid"]),
                mig_device_uuid=event.get("migDeviceUuid"),
                kind=event["kind"],
                xid=event.get("xid"),
                description=event.get("description"),
                culprit=None if event.get("culprit") is None else _process(event["culprit"]),
                processes=tuple(_process(p) for p in event["processes"]),
                hidden=int(event.get("hiddenProcessCount") or 0),
            )
            for event in pages.events
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TopError(f"the server's gpuEvents answer is not the expected shape ({exc})") from None
    down, other = down_from_errors(pages.errors)
    # The server lists them oldest first (by time, node, place in the node's log).
    rows.reverse()
    return EventList(since, rows, pages.truncated, down, other)


def _pod_of(process: EventProcess) -> dict[str, str] | None:
    return None if process.pod is None else {"namespace": process.pod[0], "name": process.pod[1]}


def document(listing: EventList) -> dict[str, Any]:
    """``top --events -o json``: the ``GpuEventList`` shape (docs/top.md)."""
    return {
        "apiVersion": VERSION,
        "kind": "GpuEventList",
        "since": listing.since,
        "events": [
            {
                "time": e.time,
                "node": e.node,
                "gpuUuid": e.gpu_uuid,
                "gpuIndex": e.gpu_index,
                "migDeviceUuid": e.mig_device_uuid,
                "kind": e.kind,
                "xid": e.xid,
                "description": e.description,
                "culprit": None
                if e.culprit is None
                else {"pid": e.culprit.pid, "name": e.culprit.name, "pod": _pod_of(e.culprit)},
                "processes": [
                    {"pid": p.pid, "name": p.name, "pod": _pod_of(p), "allocation": p.allocation}
                    for p in e.processes
                ],
                "pods": e.pods,
                "hiddenProcessCount": e.hidden,
            }
            for e in listing.events
        ],
        "truncated": listing.truncated,
        "downNodes": [{"node": d.node, "reason": d.reason} for d in listing.down],
        "errors": listing.errors,
    }


def _when(text: str) -> str:
    """The server's time as ``2026-12-05T21:04:44Z``; as written when it cannot be read."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return text
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _short(uuid: str) -> str:
    """``GPU-681fedfe``: a UUID's kind and first eight digits, as nvidia-smi users read it."""
    return uuid[:12]


def table_rows(listing: EventList, *, wide: bool = False) -> tuple[list[str], list[list[Cell]]]:
    """The ``top --events`` table: a row per event, newest first (``wide``: whole UUIDs)."""
    from .render import Styled

    # The description last: it is the long cell that a screen cuts.
    columns = ["TIME", "NODE", "GPU", "KIND", "XID", "CULPRIT", "PODS", "DESCRIPTION"]
    rows: list[list[Cell]] = []
    cut = (lambda uuid: uuid) if wide else _short
    for e in listing.events:
        gpu = cut(e.gpu_uuid) if e.gpu_index is None else f"{e.gpu_index} {cut(e.gpu_uuid)}"
        if e.mig_device_uuid:
            gpu = f"{gpu} {cut(e.mig_device_uuid)}"
        culprit = "-"
        if e.culprit is not None:
            named = [e.culprit.name] if e.culprit.name else []
            culprit = " ".join(["PID", str(e.culprit.pid), *named, e.culprit.pod_key or NO_POD])
        pods = e.pods
        if any(p.pod is None for p in e.processes):
            pods.append(NO_POD)
        if e.hidden:
            pods.append(f"+{e.hidden} hidden")
        rows.append(
            [
                _when(e.time),
                Styled((e.node, "bold")),
                gpu,
                Styled((e.kind, "bold red")),
                "-" if e.xid is None else str(e.xid),
                culprit,
                ", ".join(pods) or "-",
                e.description or "-",
            ]
        )
    return columns, rows


def run_events(
    args: argparse.Namespace,
    transport: Transport,
    console: Callable[[], Any],
    write: Callable[[str], Any],
) -> int:
    """``top --events [--since D]``: the GPU health events since D ago (default the EVENTS
    flag's window), newest first, as a table or -o json/yaml."""
    if args.watch or args.selector:
        raise TopError("--events lists past events: it has no --watch or -l")
    if args.view != DEFAULT_VIEW:
        raise TopError(f"--events lists GPU events: it has no {args.view} view")
    if args.sort_by is not None:
        raise TopError("--events lists events newest first: it has no --sort-by")
    since = since_of(f"{EVENT_HOURS}h" if args.since is None else args.since)
    listing = event_list(transport, since, node=args.node, namespace=args.namespace)
    if args.output in ("json", "yaml"):
        doc = document(listing)
        if args.output == "yaml":
            import yaml

            write(str(yaml.safe_dump(doc, sort_keys=False)))
        else:
            write(json.dumps(doc, indent=2) + "\n")
        return 0
    from rich.text import Text

    from .render import Grid, clean, down_lines, widths
    from .text import printable

    out = console()
    if listing.events:
        columns, rows = table_rows(listing, wide=args.output == "wide")
        table: list[list[Cell]] = [list(columns), *[[clean(c) for c in row] for row in rows]]
        out.print(Grid(widths(columns, table[1:]), table, header=True))
    else:
        out.print(f"no GPU events since {since}")
    if listing.truncated:
        out.print(
            Text(
                f"more than {MAX_PAGES * PAGE:,} events: the oldest {MAX_PAGES * PAGE:,} are "
                "listed; narrow with --since, --node or -n",
                style="yellow",
            )
        )
    for line in down_lines(listing.down):
        out.print(line)
    for message in listing.errors:
        out.print(Text(printable(message), style="red"))
    return 0
