"""Run ``NvmlGpuSource()`` with the real pynvml and print its scans as JSON.

Started by ``tests.support.libnvml.probe()`` in a subprocess whose dynamic
loader finds the fake library; reads its instructions as JSON on stdin.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import time
from pathlib import Path
from typing import Any

from node_resolver.nvml import NvmlGpuSource, NvmlUnavailableError
from tests.support.libnvml import write_config


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else str(value)


def main() -> None:
    """Scan as often as asked, rewriting the config between scans; print the results."""
    config = Path(sys.argv[1])
    spec = json.load(sys.stdin)
    now = spec["now"]
    clock = time.time if now is None else lambda: float(now)
    try:
        source = NvmlGpuSource(utilization_window=spec["window"], clock=clock)
    except NvmlUnavailableError as exc:
        print(json.dumps({"scans": [], "error": str(exc)}))
        return
    scans = []
    for index in range(spec["scans"]):
        scans.append(dataclasses.asdict(source.sample()))
        if index < len(spec["between"]):
            write_config(config, spec["between"][index])
    source.close()
    print(json.dumps({"scans": scans, "error": None}, default=_plain))


if __name__ == "__main__":
    main()
