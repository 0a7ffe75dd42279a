"""What Kubernetes auth costs per request, with its reviews cached.

The same real cache, agent pool and agents behind two apps served by real
uvicorn: one with ``--auth none``, one with ``--auth kubernetes`` against the
stub API server's TokenReview and SubjectAccessReview. Requests alternate
between them, so drift hits both alike. Measured with an admin token (sees
everything: the graph's shared objects, unfiltered) and a one-namespace token
(every GPU copied with other tenants' processes withheld), on:

1. the single-worker traversal ``pod -> node -> gpus -> processes -> pod``;
2. the full-cluster query (``nodes { gpus { processes { pod } } } }``).

Snapshot TTL 0: every request fans out to its agents and nothing is shared,
so each figure is one whole request. Target: auth <= 1.10x ``--auth none``.

Run ``python bench/auth_bench.py`` (full size) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from cluster_bench import (  # noqa: E402
    FULL_QUERY,
    TRAVERSAL_QUERY,
    add_cluster_sizes,
    pct,
    start_cluster,
)
from starlette.applications import Starlette  # noqa: E402

from api.agents.discovery import NodeIpDiscovery  # noqa: E402
from api.agents.pool import AgentPool  # noqa: E402
from api.app import create_app  # noqa: E402
from api.auth import kubernetes_auth  # noqa: E402
from api.demo.cluster.apiserver.reviews import Rule, StubUser  # noqa: E402
from api.lifecycle.gc_tuning import tune_gc_for_serving  # noqa: E402
from api.settings import Settings  # noqa: E402


@asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[str]:
    """``app`` under real uvicorn on a free loopback port; its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[attr-defined]
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def run(nodes: int, pods: int, repeat: int, traversals: int) -> dict[str, Any]:
    """Both benchmarks at one cluster size; p50s per caller and the ratios."""
    cluster = start_cluster(nodes, pods)
    tune_gc_for_serving()
    reviews = cluster.stub.reviews
    worker = random.Random(7).choice([p for p in cluster.cache.pods() if p.node_name])
    tokens = {
        "admin": reviews.token_of("admin"),
        "one namespace": reviews.add_user(
            StubUser(
                "tenant",
                "uid-tenant",
                ("tenant",),
                (Rule(frozenset({"list"}), frozenset({"pods"}), frozenset({worker.namespace})),),
            )
        ),
    }
    pool = AgentPool(NodeIpDiscovery(cluster.cache, cluster.port), ttl=0.0)
    base = Settings(snapshot_ttl=0.0, graphiql=False, log_level="warning")
    open_app = create_app(base, cluster.cache, pool)
    auth = kubernetes_auth(cluster.stub.configuration(), cluster.cache)
    auth_app = create_app(
        Settings(snapshot_ttl=0.0, graphiql=False, auth_mode="kubernetes"),
        cluster.cache,
        pool,
        auth=auth,
    )
    queries = {
        "traversal": ({"query": TRAVERSAL_QUERY,
                       "variables": {"ns": worker.namespace, "name": worker.name}}, traversals),
        "full cluster": ({"query": FULL_QUERY}, repeat),
    }  # fmt: skip
    rows: dict[str, dict[str, float]] = {}
    try:
        async with (
            served(open_app) as open_url,
            served(auth_app) as auth_url,
            httpx.AsyncClient(timeout=60) as client,
        ):
            callers = {
                "--auth none": (open_url, {}),
                **{
                    name: (auth_url, {"Authorization": f"Bearer {token}"})
                    for name, token in tokens.items()
                },
            }

            async def once(url: str, headers: dict[str, str], body: dict[str, Any]) -> float:
                start = time.perf_counter()
                response = await client.post(f"{url}/graphql", json=body, headers=headers)
                elapsed = time.perf_counter() - start
                answer = response.json()
                assert response.status_code == 200 and not answer.get("errors"), answer
                return elapsed

            for body, _ in queries.values():  # warm channels and the review caches
                for url, headers in callers.values():
                    await once(url, headers, body)
            asked = (auth.tokens.cache.asked, auth.access.cache.asked)
            for label, (body, count) in queries.items():
                times: dict[str, list[float]] = {name: [] for name in callers}
                for _ in range(count):
                    for name, (url, headers) in callers.items():
                        times[name].append(await once(url, headers, body))
                rows[label] = {name: pct(t, 50) for name, t in times.items()}
            reviews_during = auth.tokens.cache.asked - asked[0] + auth.access.cache.asked - asked[1]
    finally:
        await pool.close()
        cluster.stop()
    return {"nodes": nodes, "pods": pods, "rows": rows, "reviews": reviews_during}


def report(results: list[dict[str, Any]]) -> None:
    print(
        f"\n# gpugraph auth benchmark — {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}\n"
    )
    print(
        "| nodes | pods | query | --auth none p50 | admin p50 | admin ÷ none | "
        "one-namespace p50 | one-namespace ÷ none | reviews while measuring |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for label, row in r["rows"].items():
            none, admin, scoped = row["--auth none"], row["admin"], row["one namespace"]
            print(
                f"| {r['nodes']} | {r['pods']} | {label} | {none * 1000:.1f} ms | "
                f"{admin * 1000:.1f} ms | {admin / none:.2f}x | {scoped * 1000:.1f} ms | "
                f"{scoped / none:.2f}x | {r['reviews']} |"
            )
    print(
        "\nReviews are cached (60 s), so 'reviews while measuring' should be 0; "
        "the one-namespace caller sees one namespace's pods out of 20."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_cluster_sizes(parser)
    parser.add_argument("--repeat", type=int, default=20, help="full-cluster queries per caller")
    parser.add_argument("--traversals", type=int, default=100)
    parser.add_argument("--small", action="store_true", help="CI size: 10 nodes, a few seconds")
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.repeat, args.traversals = "10", 300, 5, 20
    sizes = [int(n) for n in args.nodes.split(",")]
    results = [asyncio.run(run(n, args.pods, args.repeat, args.traversals)) for n in sizes]
    report(results)
    if any(r["reviews"] for r in results):
        raise SystemExit("reviews were made while measuring: the review cache did not hold")


if __name__ == "__main__":
    main()
