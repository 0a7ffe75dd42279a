"""The compiled execution path, the fan-out off the query path, and a whole fleet.

Side by side in one run:

1. At ``--compare-nodes`` (1,000) nodes over real agents: the full-cluster
   query through strawberry and through the compiled plan, with snapshots in
   memory (overhead / orjson floor) and end to end with the fan-out to every
   agent (TTL 0), then with the pool keeping snapshots warm (TTL 1 s,
   ``keep_warm``), so queries do not wait for agents; the single-worker walk.
2. At ``--nodes`` (10,000) nodes and ``--pods`` (300,000) pods: the real
   ``gpugraph serve`` in its own process against the stub API server and a
   fleet of real agents: cache fill time and RSS; the full-cluster query read
   once, then polled every 2 s as a dashboard does (default flags keep the
   nodes warm), with single-worker walks between the polls (three half way
   from one poll's start to the next, which at 10,000 nodes is as the poll's
   answer ends, and three half way through the gap left after it); the map's first
   query and ``top``'s; ``/metrics``; each step's peak RSS (``VmHWM``, started
   over before it). ``--baseline-tree DIR`` first runs the same against a
   server from another checkout (the tree before a change), same fleet. With
   ``--serve-flags=--no-metrics-gpu-series`` the server's ``/metrics`` is its
   own series alone, and each timed poll is bracketed by two reads of them:
   the server's own execution time, and how many agents the poll called.
   ``--server-cpu N`` runs each server on CPU N alone and the agents and this
   process on the others, as a server has its own cores where the agents run
   on the GPU nodes.
3. At 4 nodes x 8 GPUs of the fleet, 100 HTTP clients sending queries that all
   differ (``bench/http_load.py``: lean clients, so the server is what is
   measured), beside ``/healthz`` and an empty answer: this machine's ceiling.

Run ``python bench/scale_bench.py`` (full size) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import math
import os
import platform
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import orjson  # noqa: E402
import uvloop  # noqa: E402
from cluster_bench import (  # noqa: E402
    FULL_QUERY,
    TRAVERSAL_QUERY,
    CallLog,
    Preloaded,
    floor_seconds,
    pct,
    serve_process,
    start_cluster,
)
from fleet import build_fleet  # noqa: E402
from http_load import Request, frame, process_cpu_seconds, read_response, run_load  # noqa: E402
from keep_warm_bench import series  # noqa: E402
from strawberry.http import process_result  # noqa: E402

from api.agents.discovery import NodeIpDiscovery  # noqa: E402
from api.agents.pool import AgentPool  # noqa: E402
from api.demo.cluster import StubApiServer, write_kubeconfig  # noqa: E402
from api.http.map_queries import SNAPSHOT_QUERY  # noqa: E402
from api.lifecycle.gc_tuning import tune_gc_for_serving  # noqa: E402
from api.top.queries import SNAPSHOT as TOP_QUERY  # noqa: E402
from graph_schema.compiled.documents import CompiledDocuments  # noqa: E402
from graph_schema.context import GraphContext  # noqa: E402
from graph_schema.interfaces import SnapshotSource  # noqa: E402
from graph_schema.schema import build_schema  # noqa: E402
from node_resolver.models import NodeSnapshot  # noqa: E402
from tests.support.demo_process import free_port  # noqa: E402

Run = Callable[[], Awaitable[Any]]

AGENT_TIMEOUT = 10.0


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


async def alternate(
    runs: dict[str, Run], repeat: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, list[float]]:
    """Each run ``repeat`` times, interleaved, so load on the machine hits all alike;
    the seconds each took by ``clock`` (wall time unless told)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            gc.collect()
            start = clock()
            await run()
            times[name].append(clock() - start)
    return times


def paths(
    source: SnapshotSource,
    cache: Any,
    query: str = FULL_QUERY,
    variables: dict[str, Any] | None = None,
) -> tuple[Run, Run, Callable[[], Any]]:
    """A query (the full-cluster one) through strawberry and through the plan, over ``source``."""
    schema = build_schema()
    # The same schema over the same state, with the plan in strawberry's executing step.
    compiled = CompiledDocuments()
    planned = build_schema(state=schema.state, gauge=schema.gauge, compiled=compiled)
    if isinstance(source, AgentPool):
        # As ``gpugraph serve`` wires it: a refreshed snapshot's objects built as it lands.
        views = schema.state.views

        def build_views(node_name: str, snapshot: NodeSnapshot) -> None:
            views.gpus(node_name, snapshot, cache)

        source.on_refreshed(build_views)

    async def strawberry_run() -> Any:
        return await schema.execute(
            query,
            variable_values=variables,
            context_value=GraphContext(cache, source, schema.state),
        )

    async def compiled_run() -> Any:
        answered = compiled.counts["compiled"]
        result = await planned.execute(
            query,
            variable_values=variables,
            context_value=GraphContext(cache, source, schema.state),
        )
        assert compiled.counts["compiled"] > answered, "the plan declined the query"
        return result

    return strawberry_run, compiled_run, lambda: compiled.counts


def answer_form(
    snapshots: dict[str, NodeSnapshot], cache: Any, encoded: bool
) -> Callable[[], Awaitable[bytes]]:
    """The full-cluster query through the plan, its answer as dicts or encoded (as the
    server's plan hands it), made into the bytes the view sends; over views of its own."""
    schema = build_schema()
    planned = build_schema(
        state=schema.state, gauge=schema.gauge, compiled=CompiledDocuments(encoded=encoded)
    )
    source = Preloaded(snapshots)

    async def run() -> bytes:
        result = await planned.execute(
            FULL_QUERY, context_value=GraphContext(cache, source, schema.state)
        )
        return orjson.dumps(process_result(result))

    return run


async def answer_forms(
    snapshots: dict[str, NodeSnapshot], cache: Any, repeat: int
) -> dict[str, dict[str, float]]:
    """The plan's answer as dicts and encoded, side by side: the Python memory the first
    answer over new views takes at its peak and keeps (the views' included, the same for
    both), then the p50 over the selections it remembered, bytes included."""
    out: dict[str, dict[str, float]] = {}
    runs: dict[str, Run] = {}
    bodies = set()
    for label, encoded in (("dicts", False), ("encoded", True)):
        run = answer_form(snapshots, cache, encoded)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        bodies.add(await run())
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out[label] = {"peak": peak - before, "kept": kept - before}
        runs[label] = run
    assert len(bodies) == 1, "the two forms answered different bytes"
    for label, times in (await alternate(runs, repeat)).items():
        out[label]["p50"] = statistics.median(times)
    return out


async def compare(nodes: int, pods: int, repeat: int, walks: int) -> dict[str, Any]:
    """Part 1: strawberry and the plan side by side over one fleet of real agents."""
    cluster = start_cluster(nodes, pods)
    tune_gc_for_serving()
    calls = CallLog()
    # A generous agent deadline: the agents share the benchmark's two cores.
    fanout = AgentPool(
        NodeIpDiscovery(cluster.cache, cluster.port),
        ttl=0.0,
        timeout=AGENT_TIMEOUT,
        client_factory=calls.factory,
    )
    warm = AgentPool(
        NodeIpDiscovery(cluster.cache, cluster.port),
        ttl=1.0,
        timeout=AGENT_TIMEOUT,
        keep_warm=60.0,
    )
    out: dict[str, Any] = {"nodes": nodes, "pods": len(cluster.cache.pods())}
    try:
        s_fan, c_fan, _ = paths(fanout, cluster.cache)
        reference = await s_fan()  # connects every channel
        compiled_result = await c_fan()
        same = orjson.dumps(process_result(reference)) == orjson.dumps(
            process_result(compiled_result)
        )
        out["same_bytes"] = same
        data = compiled_result.data
        out["bytes"] = len(orjson.dumps({"data": data}))
        out["floor"] = floor_seconds(data)

        snapshots = {n.name: (await fanout.fetch(n.name)).snapshot for n in cluster.cache.nodes()}
        s_mem, c_mem, _ = paths(Preloaded(snapshots), cluster.cache)
        await s_mem()
        await c_mem()
        memory = await alternate({"strawberry": s_mem, "compiled": c_mem}, repeat)
        out["mem"] = {k: statistics.median(v) for k, v in memory.items()}
        out["forms"] = await answer_forms(snapshots, cluster.cache, repeat)
        for key, query, variables in (
            ("map", SNAPSHOT_QUERY, None),
            ("top", TOP_QUERY, {"withPods": True}),
        ):
            s_doc, c_doc, _ = paths(Preloaded(snapshots), cluster.cache, query, variables)
            await c_doc()
            doc = await alternate({"strawberry": s_doc, "compiled": c_doc}, max(3, repeat // 3))
            out[key] = {k: statistics.median(v) for k, v in doc.items()}

        fan = await alternate({"strawberry": s_fan, "compiled": c_fan}, repeat)
        out["fan"] = {k: statistics.median(v) for k, v in fan.items()}

        s_warm, c_warm, _ = paths(warm, cluster.cache)
        await c_warm()  # reads every node once: from now on the pool keeps them warm
        kept = await alternate({"strawberry": s_warm, "compiled": c_warm}, repeat)
        out["warm"] = {k: statistics.median(v) for k, v in kept.items()}
        # Its background refreshes would load the machine during the walk.
        await warm.close()
        await fanout.close()

        out["served"] = await served(cluster, repeat)

        worker = random.Random(7).choice([p for p in cluster.cache.pods() if p.node_name])
        variables = {"ns": worker.namespace, "name": worker.name}
        schema = build_schema()
        planned = build_schema(state=schema.state, gauge=schema.gauge, compiled=CompiledDocuments())
        walk_pool = AgentPool(
            NodeIpDiscovery(cluster.cache, cluster.port), ttl=1.0, timeout=AGENT_TIMEOUT
        )

        async def walk_strawberry() -> Any:
            return await schema.execute(
                TRAVERSAL_QUERY,
                variable_values=variables,
                context_value=GraphContext(cluster.cache, walk_pool, schema.state),
            )

        async def walk_compiled() -> Any:
            return await planned.execute(
                TRAVERSAL_QUERY,
                variable_values=variables,
                context_value=GraphContext(cluster.cache, walk_pool, schema.state),
            )

        await walk_compiled()
        walk = await alternate({"strawberry": walk_strawberry, "compiled": walk_compiled}, walks)
        out["walk"] = {k: pct(v, 50) for k, v in walk.items()}
        await walk_pool.close()
    finally:
        await fanout.close()
        await warm.close()
        cluster.stop()
    return out


# The real server's snapshot settings measured over HTTP in part 1: (label, flags).
SERVED = (
    ("TTL 0: every query fans out", ("--snapshot-ttl", "0")),
    ("TTL 1 s (the default)", ("--snapshot-ttl", "1")),
    ("TTL 5 s, kept warm", ("--snapshot-ttl", "5", "--snapshot-keep-warm", "60")),
)
# Between two queries over HTTP: a dashboard polls, it does not hammer.
POLL_GAP = 0.25


async def served(cluster: Any, repeat: int) -> dict[str, list[float]]:
    """The full-cluster query through a real ``gpugraph serve`` over HTTP, per SERVED row."""
    tmp = tempfile.mkdtemp(prefix="gpugraph-scale-")
    kubeconfig = write_kubeconfig(os.path.join(tmp, "kubeconfig"), cluster.stub.url)
    out: dict[str, list[float]] = {}
    for label, flags in SERVED:
        server, base = serve_process(
            kubeconfig,
            cluster.port,
            "--no-graphiql",
            "--agent-timeout",
            str(AGENT_TIMEOUT),
            "--request-timeout",
            "60",
            *flags,
        )
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                ready = asyncio.ensure_future(wait_ready(base))
                while not ready.done():
                    if server.poll() is not None:
                        ready.cancel()
                        raise SystemExit(f"{label}: the server exited")
                    await asyncio.sleep(0.05)
                # Connects every channel; with keep-warm on, every node is read from now on.
                await http.post("/graphql", json={"query": FULL_QUERY})
                await asyncio.sleep(max(POLL_GAP, 1.0))
                times = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    r = await http.post("/graphql", json={"query": FULL_QUERY})
                    times.append(time.perf_counter() - start)
                    r.raise_for_status()
                    if b',"errors":[' in r.content:
                        raise SystemExit(f"{label}: the answer has errors")
                    await asyncio.sleep(POLL_GAP)
                out[label] = times
        finally:
            server.send_signal(signal.SIGINT)
            server.wait()
    return out


# Agents per hosting process: each holds a listening socket and a connection,
# within the usual 20,000 open files of a process.
AGENTS_PER_HOST = 4_000


@dataclass
class Fleet:
    """The stub API server with the fleet, and the processes hosting its agents."""

    stub: StubApiServer
    hosts: list[subprocess.Popen[str]]
    port: int

    def stop(self) -> None:
        """Stop the agents and the stub API server."""
        for host in self.hosts:
            host.send_signal(signal.SIGTERM)
        for host in self.hosts:
            try:
                host.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                host.kill()
        self.stub.stop()


def start_fleet(nodes: int, pods: int) -> Fleet:
    """The stub API server holding the fleet, and its agents over several processes."""
    fleet = build_fleet(nodes, pods)
    stub = StubApiServer().start()
    stub.load(pods=fleet.pod_objects, nodes=fleet.node_objects)
    del fleet
    port = free_port()
    hosts = []
    for first in range(0, nodes, AGENTS_PER_HOST):
        command = [sys.executable, str(ROOT / "bench" / "agent_host.py")]
        command += ["--nodes", str(nodes), "--pods", str(pods), "--port", str(port)]
        command += ["--first", str(first), "--count", str(AGENTS_PER_HOST)]
        hosts.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
    for host in hosts:
        assert host.stdout is not None
        if host.stdout.readline().strip() != "ready":
            for other in hosts:
                other.kill()
            stub.stop()
            raise SystemExit("an agent host did not start")
    return Fleet(stub, hosts, port)


DISTINCT_QUERY = (
    "{ q%d: gpus { uuid utilizationGpu memoryUsedBytes "
    "processes { pid usedMemoryBytes pod { name namespace } } } }"
)
# One document, different variables every time: what dashboards send.
VARIABLES_QUERY = """query($selector: String) { pods(labelSelector: $selector) {
  name namespace gpus { uuid utilizationGpu memoryUsedBytes } } }"""


def distinct_text(n: int) -> Request:
    """The n-th request with a document of its own (the plan compiles each)."""
    return ("POST", "/graphql", {"query": DISTINCT_QUERY % n})


def distinct_variables(n: int) -> Request:
    """The n-th request: one document, variables of its own (no two share a result)."""
    return ("POST", "/graphql", {"query": VARIABLES_QUERY, "variables": {"selector": f"app!=x{n}"}})


# The ceiling of this machine's HTTP path: a GraphQL request whose answer is
# empty (a selector matching nothing, its own per request), and /healthz.
EMPTY_QUERY = "query($selector: String) { pods(labelSelector: $selector) { name } }"


def empty_answer(n: int) -> Request:
    """The n-th request for an empty answer (own variables: nothing shared)."""
    return ("POST", "/graphql", {"query": EMPTY_QUERY, "variables": {"selector": f"app=x{n}"}})


def healthz(n: int) -> Request:
    """``/healthz``: uvicorn and the app's routing, no GraphQL."""
    return ("GET", "/healthz", None)


def answered(status: int, body: bytes) -> bool:
    """A 200 without errors."""
    return status == 200 and b',"errors":[' not in body


async def wait_ready(base: str) -> None:
    """Until ``/readyz`` answers 200."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        while True:
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)


async def poll_distinct(
    base: str, pid: int, clients: int, seconds: float, request: Callable[[int], Request]
) -> dict[str, Any]:
    """``clients`` clients sending requests that differ, for ``seconds``; the server's CPU."""
    before = process_cpu_seconds(pid)
    result = await run_load(base, clients, seconds, request, answered)
    server_cpu = process_cpu_seconds(pid) - before
    return {
        "qps": result.qps,
        "p50": pct(result.latencies, 50),
        "errors": result.errors,
        "server_ms": server_cpu / max(1, result.requests) * 1000,
        "client_ms": result.client_cpu / max(1, result.requests) * 1000,
    }


DISTINCT_KINDS: dict[str, Callable[[int], Request]] = {
    "healthz": healthz,
    "empty": empty_answer,
    "text": distinct_text,
    "variables": distinct_variables,
}


async def distinct_clients(nodes: int, clients: int, seconds: float) -> dict[str, Any]:
    """Part 3: every query different (no shared execution), against ``gpugraph serve``
    with the compiled path and without it, one after the other."""
    cluster = start_fleet(nodes, nodes * 8)
    tmp = tempfile.mkdtemp(prefix="gpugraph-distinct-")
    kubeconfig = write_kubeconfig(os.path.join(tmp, "kubeconfig"), cluster.stub.url)
    out: dict[str, Any] = {"nodes": nodes, "clients": clients}
    paths = (("compiled", "--compiled-execution"), ("strawberry", "--no-compiled-execution"))
    try:
        for label, flag in paths:
            server, base = serve_process(kubeconfig, cluster.port, "--no-graphiql", flag)
            try:
                await wait_ready(base)
                for kind, request in DISTINCT_KINDS.items():
                    if kind == "healthz" and label == "strawberry":
                        continue  # no GraphQL: the same for both paths
                    out[f"{label}/{kind}"] = await poll_distinct(
                        base, server.pid, clients, seconds, request
                    )
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=60)
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def report_distinct(d: dict[str, Any]) -> None:
    print(
        f"\n## 3. {d['clients']} HTTP clients, every query different, {d['nodes']} nodes "
        "(the demo's size)\n"
    )
    print("| path | requests | queries/s | p50 | errors | server CPU per request |")
    print("|---|---|---|---|---|---|")
    for kind, what in (
        ("healthz", "`/healthz` (no GraphQL: the HTTP ceiling)"),
        ("empty", "an empty answer, own variables"),
        ("text", "a document of its own"),
        ("variables", "one document, own variables"),
    ):
        for label in ("strawberry", "compiled"):
            r = d.get(f"{label}/{kind}")
            if r is None:
                continue
            print(
                f"| {label} | {what} | {r['qps']:,.0f} | {ms(r['p50'])} ms | {r['errors']} "
                f"| {r['server_ms']:.2f} ms |"
            )


def rss_bytes(pid: int) -> int:
    """A process's resident set, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


STEPS = ("full", "walk", "map", "top", "metrics", "top_cli")
# A dashboard's poll of the whole cluster in part 2: the cadence, one client.
POLL_EVERY = 2.0
# Single-worker walks between two polls, at each of two moments, while the server keeps
# nodes warm.
WALKS_PER_POLL = 3


def reset_peak_rss(pid: int) -> bool:
    """Start a process's peak RSS (VmHWM) over from its RSS now; False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def fleet(
    nodes: int,
    pods: int,
    repeat: int,
    server_flags: tuple[str, ...] = (),
    steps: tuple[str, ...] = STEPS,
    trees: dict[str, Path] | None = None,
    warmup: int = 0,
    server_cpus: set[int] | None = None,
) -> dict[str, Any]:
    """Part 2: the real server over a whole fleet; one server per checkout in ``trees``
    (this one alone by default), one after the other against the same fleet; each
    server on ``server_cpus`` alone when given."""
    started = time.perf_counter()
    cluster = start_fleet(nodes, pods)
    out: dict[str, Any] = {
        "nodes": nodes,
        "pods": max(pods, nodes),
        "setup": time.perf_counter() - started,
        "servers": {},
        "server_cpus": server_cpus,
    }
    tmp = tempfile.mkdtemp(prefix="gpugraph-scale-")
    kubeconfig = write_kubeconfig(os.path.join(tmp, "kubeconfig"), cluster.stub.url)
    try:
        for label, tree in (trees or {"this tree": ROOT}).items():
            print(f"\n{label} ({tree}):", flush=True)
            out["servers"][label] = await fleet_server(
                cluster,
                kubeconfig,
                nodes,
                pods,
                repeat,
                server_flags,
                steps,
                tree,
                warmup,
                server_cpus,
            )
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


async def fleet_server(
    cluster: Fleet,
    kubeconfig: str,
    nodes: int,
    pods: int,
    repeat: int,
    server_flags: tuple[str, ...],
    steps: tuple[str, ...],
    tree: Path,
    warmup: int,
    server_cpus: set[int] | None,
) -> dict[str, Any]:
    """One server over the fleet: fill, RSS, and each step's time and peak RSS."""
    begin = time.perf_counter()
    server, base = serve_process(
        kubeconfig,
        cluster.port,
        "--no-graphiql",
        "--request-timeout",
        "120",
        # The agents share the machine's cores: a generous deadline, so a slow first
        # round is not a failure (and a reconnect) per node.
        "--agent-timeout",
        "60",
        *server_flags,
        tree=tree,
        cpus=server_cpus,
    )
    out: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            while True:
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None:
                    raise SystemExit("the server exited")
                await asyncio.sleep(0.05)
            out["fill"] = time.perf_counter() - begin
            out["rss_ready"] = rss_bytes(server.pid)
            print(f"fill: {out['fill']:.1f} s, RSS {out['rss_ready'] / 2**30:.2f} GiB", flush=True)

            async def post(query: str, variables: dict[str, Any] | None = None) -> bytes:
                r = await http.post("/graphql", json={"query": query, "variables": variables})
                r.raise_for_status()
                return r.content

            timings: dict[str, list[float]] = {}
            sizes: dict[str, int] = {}
            errors: dict[str, int] = {}
            peaks: dict[str, int] = {}

            def record(name: str, took: float, body: bytes) -> None:
                timings.setdefault(name, []).append(took)
                sizes[name] = len(body)
                if b',"errors":[' in body:
                    errors[name] = errors.get(name, 0) + 1

            async def measure(name: str, run: Run, times: int) -> None:
                if name not in steps:
                    return
                reset_peak_rss(server.pid)
                for _ in range(times):
                    start = time.perf_counter()
                    try:
                        body = await run()
                    except (httpx.HTTPError, WalkError, subprocess.SubprocessError, OSError) as exc:
                        out[f"{name}_failed"] = f"{type(exc).__name__}: {exc}"
                        print(f"{name}: failed: {exc!r}", flush=True)
                        return
                    took = time.perf_counter() - start
                    record(name, took, body)
                    # As it goes: a run at full size is long, and a later step may fail.
                    print(f"{name}: {took * 1000:,.1f} ms, {len(body):,} bytes", flush=True)
                peaks[name] = _peak_rss(server.pid)

            from fleet import _pod  # the fleet's pod placement

            pick = random.Random(7)

            def worker() -> dict[str, Any]:
                _, namespace, name = _pod(pick.randrange(pods), nodes)
                return {"ns": namespace, "name": name}

            if "full" in steps:
                # The first read fetches every node (and makes the server's channels); the
                # polls after it are what a dashboard sees: the nodes kept warm by default
                # once they are read repeatedly, which at 10,000 nodes takes a few polls
                # (``warmup``, timed apart), then single-worker walks between the polls.
                reset_peak_rss(server.pid)
                first = time.perf_counter()
                body = await post(FULL_QUERY)
                out["first_full"] = time.perf_counter() - first
                peaks["first_full"] = _peak_rss(server.pid)
                print(f"full, first read: {out['first_full'] * 1000:,.1f} ms", flush=True)
                reset_peak_rss(server.pid)
                next_poll = time.perf_counter() + POLL_EVERY
                # Without the GPU series, /metrics is the server's own: cheap to read
                # around each timed poll.
                series = "--no-metrics-gpu-series" in server_flags
                for n in range(warmup + repeat):
                    await asyncio.sleep(max(0.0, next_poll - time.perf_counter()))
                    next_poll = max(next_poll + POLL_EVERY, time.perf_counter())
                    before = await _own_series(http) if series and n >= warmup else None
                    start = time.perf_counter()
                    body = await post(FULL_QUERY)
                    took = time.perf_counter() - start
                    if before is not None:
                        after = await _own_series(http)
                        for key, value in after.items():
                            out.setdefault("series", {}).setdefault(key, []).append(
                                value - before[key]
                            )
                    record("full" if n >= warmup else "full_warmup", took, body)
                    kind = "full" if n >= warmup else "full (warm-up)"
                    print(f"{kind}: {took * 1000:,.1f} ms, {len(body):,} bytes", flush=True)
                    del body
                    if "walk" not in steps or n < warmup:
                        continue
                    # Half way from the poll's start to the next: where a poll takes
                    # most of the period (10,000 nodes), that is as its answer ends.
                    # Then half way through what is left of the gap, the poll done.
                    await asyncio.sleep(max(0.0, next_poll - POLL_EVERY / 2 - time.perf_counter()))
                    for key in ("walk", "walk_gap"):
                        if key == "walk_gap":
                            left = next_poll - time.perf_counter()
                            await asyncio.sleep(max(0.0, left / 2))
                        before = await _own_series(http) if series else None
                        async with Walker(base) as walker:
                            for _ in range(WALKS_PER_POLL):
                                start = time.perf_counter()
                                walked = await walker.post(TRAVERSAL_QUERY, worker())
                                record(key, time.perf_counter() - start, walked)
                        if before is not None:
                            after = await _own_series(http)
                            for name, value in after.items():
                                out.setdefault(f"{key}_series", {}).setdefault(name, []).append(
                                    (value - before[name]) / WALKS_PER_POLL
                                )
                peaks["full"] = _peak_rss(server.pid)
                out["rss_after"] = rss_bytes(server.pid)
            if "walk" in steps and "walk" not in timings:
                async with Walker(base) as walker:
                    await measure("walk", lambda: walker.post(TRAVERSAL_QUERY, worker()), 30)
            await measure("map", lambda: post(SNAPSHOT_QUERY), 3)
            await measure("top", lambda: post(TOP_QUERY, {"withPods": False}), 3)
            # One scrape, after the GraphQL steps: at full size it fetches every agent and
            # renders every GPU's series (150 MB of text), and RSS stays where it took it.
            await measure("metrics", lambda: _get(http, "/metrics"), 1)

            async def top_cli() -> bytes:
                done = subprocess.run(
                    [sys.executable, "-m", "api.cli", "top", "--server", base],
                    cwd=tree,
                    check=True,
                    stdout=subprocess.PIPE,
                    timeout=180,
                )
                return done.stdout

            await measure("top_cli", top_cli, 3)
            out["rss_peak"] = max(peaks.values(), default=_peak_rss(server.pid))
            out["peaks"] = peaks
            out["timings"] = {k: statistics.median(v) for k, v in timings.items()}
            out["sizes"] = sizes
            out["errors"] = errors
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    return out


# The server's own series read around a timed poll: its execution, agents it called,
# and the garbage collector's runs and pauses by generation.
_GENERATIONS = ("young", "middle", "full")
_OWN_SERIES = {
    "execution": "gpugraph_query_seconds_sum",
    "called": 'gpugraph_snapshot_requests_total{source="called"}',
    **{
        f"gc_seconds_{g}": f'gpugraph_gc_pause_seconds_total{{generation="{g}"}}'
        for g in range(len(_GENERATIONS))
    },
    **{
        f"gc_runs_{g}": f'gpugraph_gc_collections_total{{generation="{g}"}}'
        for g in range(len(_GENERATIONS))
    },
}


class WalkError(Exception):
    """A walk the server did not answer with 200, or whose connection ended mid-answer."""


class Walker:
    """A single worker's queries on one kept-alive connection, framed by hand as
    ``http_load`` frames them: httpx spends several times the server's CPU on a small
    request (bench/README.md, section 13, run 3), and a walk is timed for the server's
    sake. Opened per batch of walks: uvicorn closes a connection idle for 5 s."""

    def __init__(self, base: str) -> None:
        url = urlsplit(base)
        assert url.hostname is not None and url.port is not None
        self._address = (url.hostname, url.port)
        self._host = url.netloc

    async def __aenter__(self) -> Walker:
        self._reader, self._writer = await asyncio.open_connection(*self._address)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def post(self, query: str, variables: dict[str, Any] | None = None) -> bytes:
        """The answer's body; WalkError on a status other than 200 or a cut answer."""
        body = {"query": query, "variables": variables}
        self._writer.write(frame(self._host, "POST", "/graphql", body))
        try:
            status, answer = await read_response(self._reader)
        except asyncio.IncompleteReadError as exc:
            raise WalkError(f"the connection ended mid-answer ({len(exc.partial)} bytes)") from None
        if status != 200:
            raise WalkError(f"the walk got HTTP {status}: {answer[:200]!r}")
        return answer


async def _own_series(http: httpx.AsyncClient) -> dict[str, float]:
    text = (await _get(http, "/metrics")).decode()
    return {key: series(text, name) for key, name in _OWN_SERIES.items()}


async def _get(http: httpx.AsyncClient, path: str) -> bytes:
    r = await http.get(path, headers={"accept-encoding": "identity"})
    r.raise_for_status()
    return r.content


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def report(comp: dict[str, Any] | None, full: dict[str, Any] | None) -> None:
    print(
        f"\n# gpugraph scale benchmark: {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}\n"
    )
    if comp is not None:
        report_compare(comp)
    if full is not None:
        report_fleet(full)


def report_compare(c: dict[str, Any]) -> None:
    print(f"## 1. Full-cluster query at {c['nodes']:,} nodes, strawberry and the plan\n")
    print(f"Same bytes from both paths: {c['same_bytes']}; answer {c['bytes'] / 1e6:.2f} MB; ")
    print(f"orjson floor {ms(c['floor'])} ms.\n")
    print("| measure | strawberry | compiled | speed-up | compiled / floor |")
    print("|---|---|---|---|---|")
    for key, label in (
        ("mem", "snapshots in memory, p50"),
        ("map", "the map's query, snapshots in memory, p50"),
        ("top", "top's query (with pods), snapshots in memory, p50"),
        ("fan", "fan-out to every agent (TTL 0), p50"),
        ("warm", "pool keeping snapshots warm (TTL 1 s), p50"),
        ("walk", "single-worker walk, p50"),
    ):
        s, k = c[key]["strawberry"], c[key]["compiled"]
        # The floor is the full-cluster answer's: other documents' rows have none.
        floor = f"{k / c['floor']:.1f}x" if key in ("mem", "fan", "warm") else "-"
        print(f"| {label} | {ms(s)} ms | {ms(k)} ms | {s / k:.1f}x | {floor} |")
    print("\nThe plan's answer as dicts and encoded (the server's), bytes included:\n")
    print(
        "| answer | p50, selections remembered | Python memory at the peak of the first "
        "answer (new views) | kept after it (views and remembered selections) |"
    )
    print("|---|---|---|---|")
    for label, f in c["forms"].items():
        print(
            f"| {label} | {ms(f['p50'])} ms | {f['peak'] / 1e6:,.1f} MB "
            f"| {f['kept'] / 1e6:,.1f} MB |"
        )
    print(f"\nThe real server over HTTP (compiled path), a query every {POLL_GAP} s:\n")
    print("| snapshots | p50 | p90 |")
    print("|---|---|---|")
    for label, times in c["served"].items():
        print(f"| {label} | {ms(pct(times, 50))} ms | {ms(pct(times, 90))} ms |")


def report_fleet(f: dict[str, Any]) -> None:
    servers: dict[str, dict[str, Any]] = f["servers"]
    print(f"\n## 2. The real server over {f['nodes']:,} nodes and {f['pods']:,} pods\n")
    print(f"Fleet set-up (stub API server, agents): {f['setup']:.1f} s.\n")
    if f["server_cpus"] is not None:
        cpus = ", ".join(map(str, sorted(f["server_cpus"])))
        print(f"Each server ran on CPU {cpus} alone; the agents and this benchmark on the rest.\n")
    print(f"| measure | {' | '.join(servers)} |")
    print(f"|---|{'---|' * len(servers)}")

    def row(label: str, cell: Callable[[dict[str, Any]], str]) -> None:
        print(f"| {label} | {' | '.join(cell(s) for s in servers.values())} |")

    def gib(value: int | None) -> str:
        return "-" if value is None else f"{value / 2**30:.2f} GiB"

    row("cache fill (start to /readyz)", lambda s: f"{s['fill']:.1f} s")
    row("RSS when ready", lambda s: gib(s["rss_ready"]))
    row("RSS after the polls", lambda s: gib(s.get("rss_after")))
    row("peak RSS, whole run", lambda s: gib(s["rss_peak"]))
    for key, label in (
        ("first_full", "full-cluster query, first read (every node fetched)"),
        ("full_warmup", f"full-cluster query, the first polls (every {POLL_EVERY:g} s), p50"),
        ("full", f"full-cluster query, polled every {POLL_EVERY:g} s after those, p50"),
        ("walk", "single-worker walk half way between those polls' starts, p50"),
        ("walk_gap", "… half way through the gap between a poll's end and the next, p50"),
        ("map", "the map's first query, p50"),
        ("top", "top's query, p50"),
        ("metrics", "server /metrics, one scrape"),
        ("top_cli", "`gpugraph top`, end to end, p50"),
    ):
        row(label, functools.partial(_step, key=key))
        if key in ("first_full", "full", "metrics", "map", "top"):
            what = "… peak RSS over all the polls" if key == "full" else "… its peak RSS"
            row(what, functools.partial(_peak_of, key=key))
        if key in ("full", "walk", "walk_gap"):
            # Walks are read in threes: the mean of each three.
            which = "series" if key == "full" else f"{key}_series"
            row(
                "… the server's own execution of each (its series), p50",
                functools.partial(_execution, which=which),
            )
            row(
                "… agents it called (nodes not kept warm), p50",
                functools.partial(_called, which=which),
            )
        if key == "full":
            row("… the garbage collector's pauses in them (its series)", _gc_pauses)


def _execution(s: dict[str, Any], which: str) -> str:
    if which not in s:
        return "not measured (needs --no-metrics-gpu-series)"
    return f"{ms(statistics.median(s[which]['execution']))} ms"


def _gc_pauses(s: dict[str, Any]) -> str:
    if "series" not in s:
        return "not measured (needs --no-metrics-gpu-series)"
    d = s["series"]
    if any(math.isnan(v) for v in d["gc_seconds_0"]):
        return "not served by this tree"
    polls = len(d["gc_seconds_0"])
    per_poll = sum(sum(d[f"gc_seconds_{g}"]) for g in range(len(_GENERATIONS))) / polls
    runs = ", ".join(f"{sum(d[f'gc_runs_{g}']):.0f} {name}" for g, name in enumerate(_GENERATIONS))
    return f"{ms(per_poll)} ms a poll, mean ({runs} in {polls} polls)"


def _called(s: dict[str, Any], which: str) -> str:
    if which not in s:
        return "not measured"
    return f"{statistics.median(s[which]['called']):,.1f}"


def _peak_of(s: dict[str, Any], key: str) -> str:
    peak = s["peaks"].get(key)
    return "-" if peak is None else f"{peak / 2**30:.2f} GiB"


def _step(s: dict[str, Any], key: str) -> str:
    if key == "first_full":
        return f"{ms(s['first_full'])} ms" if "first_full" in s else "not measured"
    t = s["timings"]
    if key not in t:
        return str(s.get(key + "_failed", "not measured"))
    failed = s["errors"].get(key, 0)
    note = f", {failed} with errors" if failed else ""
    size = "" if key == "top_cli" else f" ({s['sizes'][key] / 1e6:.1f} MB{note})"
    return f"{ms(t[key])} ms{size}"


@contextlib.contextmanager
def _off_cpus(cpus: set[int] | None) -> Iterator[None]:
    """This process, and what it starts meanwhile (the fleet's agents), kept off ``cpus``
    until the block ends: part 3 measures the whole machine again."""
    allowed = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, allowed - cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=300_000)
    parser.add_argument("--compare-nodes", type=int, default=1_000)
    parser.add_argument("--compare-pods", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--skip-fleet", action="store_true", help="skip part 2")
    parser.add_argument("--skip-compare", action="store_true", help="skip part 1")
    parser.add_argument("--skip-distinct", action="store_true", help="skip part 3")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--steps", default=",".join(STEPS), help="part 2's measures, comma-separated"
    )
    parser.add_argument(
        "--warmup-polls",
        type=int,
        default=4,
        help="part 2's polls of the full-cluster query timed apart, before --repeat more: "
        "at 10,000 nodes the server keeps the nodes warm after a few",
    )
    parser.add_argument(
        "--max-result-items",
        type=int,
        default=None,
        help="the server's result budget in part 2 (its default refuses whole-cluster "
        "views of 10,000 nodes before they run)",
    )
    parser.add_argument(
        "--serve-flags",
        default="",
        help="more flags for part 2's server, e.g. '--snapshot-ttl 30 --snapshot-keep-warm 120'",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="another checkout (e.g. the commit before a change): part 2 runs its server "
        "first, then this tree's, against the same fleet, side by side",
    )
    parser.add_argument(
        "--server-cpu",
        type=int,
        default=None,
        help="part 2's servers on this CPU alone, the fleet's agents and this process on the "
        "others: a server with a core of its own, as where agents run on the GPU nodes",
    )
    parser.add_argument("--small", action="store_true", help="CI size: 20 nodes")
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.compare_nodes, args.compare_pods = 20, 600, 10, 300
        args.repeat, args.clients, args.seconds, args.warmup_polls = 3, 10, 2.0, 1
    comp = (
        None
        if args.skip_compare
        else asyncio.run(compare(args.compare_nodes, args.compare_pods, args.repeat, 30))
    )
    budget = args.max_result_items
    flags: tuple[str, ...] = () if budget is None else ("--max-result-items", str(budget))
    flags += tuple(shlex.split(args.serve_flags))
    server_cpus = None if args.server_cpu is None else {args.server_cpu}
    allowed = os.sched_getaffinity(0)
    if server_cpus is not None and not server_cpus < allowed:
        parser.error(
            f"--server-cpu takes one of CPUs {sorted(allowed)} and leaves another one "
            "for the fleet and this process"
        )
    trees = {"this tree": ROOT}
    if args.baseline_tree is not None:
        trees = {"baseline": args.baseline_tree.resolve(), **trees}
    with _off_cpus(server_cpus):
        full = (
            None
            if args.skip_fleet
            else asyncio.run(
                fleet(
                    args.nodes,
                    args.pods,
                    args.repeat,
                    flags,
                    tuple(args.steps.split(",")),
                    trees,
                    args.warmup_polls,
                    server_cpus,
                )
            )
        )
    distinct = (
        None
        if args.skip_distinct
        # uvloop: the clients' side of the loop costs less, leaving the cores to the server.
        else uvloop.run(distinct_clients(4, args.clients, args.seconds))
    )
    report(comp, full)
    if distinct is not None:
        report_distinct(distinct)


if __name__ == "__main__":
    main()
