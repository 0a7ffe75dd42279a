"""Time ``NvmlGpuSource().sample()`` scans in this process; prints their durations as JSON.

Run by bench/agent_bench.py in a subprocess whose dynamic loader finds the fake
libnvidia-ml.so.1 (``LD_LIBRARY_PATH``), so that the real nvidia-ml-py loads it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node_resolver.nvml import NvmlGpuSource


def main() -> None:
    """Scan ``argv[1]`` times after one warm-up scan and print the seconds each took.

    With ``pynvml-lists`` as ``argv[2]``, process lists go through pynvml's own calls
    (per-entry friendly objects), as they did before the agent read them itself.
    """
    scans = int(sys.argv[1])
    source = NvmlGpuSource()
    if sys.argv[2:] == ["pynvml-lists"]:
        source._process_reader = None
    sample = source.sample()  # warm-up: pynvml resolves and caches its function pointers
    processes = sum(len(gpu.processes) for gpu in sample.gpus)
    durations = []
    for _ in range(scans):
        started = time.perf_counter()
        source.sample()
        durations.append(time.perf_counter() - started)
    source.close()
    print(json.dumps({"gpus": len(sample.gpus), "processes": processes, "seconds": durations}))


if __name__ == "__main__":
    main()
