"""Hosts one real agent gRPC server per simulated node, all in one process.

Each node's agent is the production ``AgentServer`` bound to the node's own
loopback InternalIP, serving a sampler that scanned the fleet's static GPU
sample once. Run by ``cluster_bench.py``; prints ``ready`` once all serve and
the total calls served when it receives SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Collection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import build_fleet, node_ip, node_name

from node_resolver.models import NodeSample
from node_resolver.pids import ResolvedProcess
from node_resolver.sampler import Sampler
from node_resolver.service import AgentServer


class StaticSource:
    """A GPU source that always reports the same sample."""

    def __init__(self, sample: NodeSample) -> None:
        self._sample = sample

    def sample(self) -> NodeSample:
        return self._sample

    def close(self) -> None:
        pass


class KnownProcesses:
    """Resolves the fleet's PIDs to the containers the sample already names."""

    def __init__(self, sample: NodeSample) -> None:
        self._known = {
            p.pid: ResolvedProcess(p.pid, 0, p.name, None, p.container)
            for gpu in sample.gpus
            for p in gpu.processes
        }

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        return {pid: self._known[pid] for pid in pids if pid in self._known}

    def close(self) -> None:
        pass


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--down", type=int, default=0, help="leave the last N nodes without agent")
    # A share of the fleet per process: each agent holds a listening socket and a
    # connection, and a process may open only so many files.
    parser.add_argument("--first", type=int, default=0, help="host nodes from this index")
    parser.add_argument("--count", type=int, default=None, help="host this many nodes")
    args = parser.parse_args()
    fleet = build_fleet(args.nodes, args.pods, with_objects=False)
    servers = []
    last = args.nodes - args.down
    if args.count is not None:
        last = min(last, args.first + args.count)
    for i in range(args.first, last):
        sample = fleet.sample(i)
        sampler = Sampler(StaticSource(sample), KnownProcesses(sample), node_name=node_name(i))
        sampler.scan()
        server = AgentServer(sampler)
        await server.start(f"{node_ip(i)}:{args.port}")
        servers.append(server)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    print(f"calls {sum(s.calls_served for s in servers)}", flush=True)
    await asyncio.gather(*(s.stop(0) for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
