"""How many of the project's files one full-cluster query passes through on the server.

The stub API server and one real agent per node (``tests/support/server.py``'s
standard cluster: three nodes) run in a child process, so the server's process
holds only the server. The production server stack (``serving``) answers

    { nodes { name gpus { uuid memoryUsedBytes utilizationGpu
                          processes { pid usedMemoryBytes pod { name namespace } } } } }

(its list under an alias of each run's own) over HTTP, once to warm up (imports,
the plan), then ``--runs`` times under ``sys.settrace`` on the event loop's
thread, where a query runs; a file counts
when code of ``api/``, ``graph_schema/`` or ``node_resolver/`` runs during a
query. Background work that lands in the same moment (a watch bookmark, a
timer) is left out by counting only the files every run passes through. Two
cases: the snapshots fetched fresh (``--snapshot-ttl 0``: the agent pool, the
gRPC client and the decoding), and read from memory (a warm TTL). Keep-warm is
off, so no refresh runs beside the query.

Run ``python bench/query_path.py`` (``--list`` prints the files).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import Served, serving, standard_cluster  # noqa: E402

QUERY = (
    "{ %s: nodes { name gpus { uuid memoryUsedBytes utilizationGpu "
    "processes { pid usedMemoryBytes pod { name namespace } } } } }"
)
PACKAGES = ("api", "graph_schema", "node_resolver")


def host_cluster(workdir: str, conn: Connection) -> None:
    """The child: start the stub API server and the agents, say where, serve until told."""

    async def main() -> None:
        cluster = standard_cluster(Path(workdir))
        await cluster.start()
        conn.send((str(cluster.kubeconfig), cluster.port))
        await asyncio.to_thread(conn.recv)
        await cluster.stop()

    asyncio.run(main())


def project_file(filename: str) -> str | None:
    """``filename`` relative to the repository when it is a module of the project's packages."""
    path = Path(filename)
    if not path.is_absolute() or ROOT not in path.parents:
        return None
    relative = path.relative_to(ROOT)
    if relative.parts[0] not in PACKAGES or "generated" in relative.parts:
        return None
    return relative.as_posix()


async def files_of_one_query(server: Served, alias: str) -> set[str]:
    """The project's files whose code runs on this thread while one query is answered.

    Each run names its list differently: an identical query would be answered by the
    execution shared with the one before (``api/execution/shared_results.py``).
    """
    seen: set[str] = set()

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        seen.add(frame.f_code.co_filename)
        return None  # no line events: only which functions run

    sys.settrace(tracer)
    try:
        result = await server.query(QUERY % alias)
    finally:
        sys.settrace(None)
    assert "errors" not in result, result
    assert len(result["data"][alias]) == 3
    return {name for f in seen if (name := project_file(f)) is not None}


async def measure(kubeconfig: str, port: int, ttl: float, runs: int) -> tuple[set[str], set[str]]:
    """The files every run passed through, and those some run did."""
    from api.settings import Settings

    settings = Settings(
        listen_host="127.0.0.1",
        listen_port=0,
        kubeconfig=Path(kubeconfig),
        agent_port=port,
        log_level="warning",
        snapshot_ttl=ttl,
        snapshot_keep_warm=0.0,
    )
    async with serving(settings) as server:
        await server.query(QUERY % "warm")  # imports, the compiled plan, warm snapshots
        found = [await files_of_one_query(server, f"run{i}") for i in range(runs)]
    return set.intersection(*found), set.union(*found)


def main() -> None:
    """Count and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--list", action="store_true", help="print the files of each case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpugraph-query-path-") as workdir:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        child = context.Process(target=host_cluster, args=(workdir, theirs), daemon=True)
        child.start()
        try:
            kubeconfig, port = ours.recv()
            for label, ttl in (
                ("snapshots fetched fresh (TTL 0)", 0.0),
                ("snapshots in memory", 60.0),
            ):
                every, some = asyncio.run(measure(kubeconfig, port, ttl, args.runs))
                by_package = {p: sum(f.startswith(p + "/") for f in every) for p in PACKAGES}
                print(
                    f"{label}: {len(every)} files in every run ({len(some)} in some), "
                    + ", ".join(f"{p}/ {n}" for p, n in by_package.items())
                )
                if args.list:
                    for name in sorted(every):
                        print(f"  {name}")
        finally:
            ours.send("stop")
            child.join(timeout=30)


if __name__ == "__main__":
    main()
