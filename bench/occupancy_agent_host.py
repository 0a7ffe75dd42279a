"""Hosts one real agent per simulated node, each with an occupancy log holding one day.

Like ``agent_host.py``, but every agent's ``HistoryLog`` is a real SQLite file
under ``--workdir`` filled with a day of the fleet's processes (each GPU's
four processes run all day) plus churn (one short job per GPU per hour).
Run by ``occupancy_log_bench.py``; prints ``ready`` once all serve.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_host import KnownProcesses, StaticSource
from fleet import build_fleet, node_ip, node_name

from node_resolver.history.log import HistoryLog, HistorySettings
from node_resolver.history.records import OccupancyRecord
from node_resolver.history.store import HistoryStore
from node_resolver.models import NodeSample
from node_resolver.pod_names import PodName, PodNames
from node_resolver.sampler import Sampler
from node_resolver.service import AgentServer

DAY = 86400.0


def day_of(sample: NodeSample, names: dict[str, PodName], now: float) -> list[OccupancyRecord]:
    """A day of records for one node: its steady processes and an hourly job per GPU."""
    records = []
    for gpu in sample.gpus:
        for process in gpu.processes:
            container = process.container
            assert container is not None and container.pod_uid is not None
            pod = names[container.pod_uid]
            memory = float(process.used_memory_bytes or 0)
            records.append(
                OccupancyRecord(
                    gpu_uuid=gpu.uuid,
                    mig_device_uuid="",
                    pid=process.pid,
                    start_ticks=1,
                    boot_id="b",
                    first_seen=now - DAY,
                    last_seen=now,
                    process_name="python3",
                    container_id=container.container_id,
                    pod_uid=pod.uid,
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    peak_memory_bytes=int(memory),
                    last_memory_bytes=int(memory),
                    memory_byte_seconds=memory * DAY,
                    memory_seconds=DAY,
                )
            )
        for hour in range(24):
            start = now - DAY + hour * 3600
            records.append(
                OccupancyRecord(
                    gpu_uuid=gpu.uuid,
                    mig_device_uuid="",
                    pid=50_000 + hour,
                    start_ticks=hour,
                    boot_id="b",
                    first_seen=start,
                    last_seen=start + 600,
                    ended=True,
                    process_name="eval",
                    peak_memory_bytes=1 << 30,
                    last_memory_bytes=1 << 30,
                    memory_byte_seconds=600.0 * (1 << 30),
                    memory_seconds=600.0,
                )
            )
    return records


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    fleet = build_fleet(args.nodes, args.pods)
    names = {
        pod["metadata"]["uid"]: PodName(
            pod["metadata"]["uid"], pod["metadata"]["namespace"], pod["metadata"]["name"], {}
        )
        for pod in fleet.pod_objects
    }
    now = time.time()
    servers = []
    for i in range(args.nodes):
        sample = fleet.sample(i)
        directory = args.workdir / node_name(i)
        store = HistoryStore(directory, max_bytes=256 << 20)
        store.open()
        store.write(day_of(sample, names, now), list(names.values())[:0], now)
        store.close()
        # Flushed only on reads: the bench measures reads, not 1,000 writer wake-ups.
        settings = HistorySettings(directory, retention_seconds=30 * DAY, flush_interval=3600.0)
        history = HistoryLog(settings, boot_id="b", pod_names=PodNames())
        history.start()
        sampler = Sampler(StaticSource(sample), KnownProcesses(sample), node_name=node_name(i))
        sampler.scan()
        server = AgentServer(sampler, history=history)
        await server.start(f"{node_ip(i)}:{args.port}")
        servers.append((server, history))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await asyncio.gather(*(s.stop(0) for s, _ in servers))
    for _, history in servers:
        history.stop()


if __name__ == "__main__":
    asyncio.run(main())
