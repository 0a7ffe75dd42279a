"""What the agent's GPU event thread costs: scan time and RSS, idle and under a storm.

Three runs of ``bench/gpu_events_host.py`` (one process each), the same node
of 8 GPUs x 64 processes on the fake libnvidia-ml.so.1 through the real
nvidia-ml-py, scanning every 50 ms for ``--seconds``: without the event
thread, with it idle, and with it under a storm of 1,000 single-bit ECC
events a second (appended by another process, 10 every 10 ms), recorded into
a real occupancy log. Prints a table; asserts nothing.

    .venv/bin/python bench/gpu_events_bench.py --seconds 20
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.agent_bench import nvml_node  # noqa: E402
from tests.support.libnvml import build_library, library_env  # noqa: E402
from tests.support.libnvml.events import SINGLE_BIT_ECC, FakeEvents  # noqa: E402

STORM = f"""
import sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
line = "0 {SINGLE_BIT_ECC} 0 4294967295 4294967295\\n" * 10
end = time.monotonic() + seconds
next_at = time.monotonic()
with open(path, "a") as events:
    while time.monotonic() < end:
        events.write(line)
        events.flush()
        next_at += 0.01
        time.sleep(max(0.0, next_at - time.monotonic()))
"""


def run(mode: str, seconds: float, workdir: Path) -> dict[str, object]:
    """One host run in ``mode``; its JSON figures."""
    node = nvml_node(64)
    config = node.write(workdir / f"{mode}.conf")
    events = FakeEvents(workdir / f"{mode}.events")
    host = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "gpu_events_host.py"), mode, str(seconds),
         str(workdir / f"{mode}-history")],
        env=library_env(build_library(), config, **events.env()),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert host.stdin is not None and host.stderr is not None and host.stdout is not None
    assert host.stderr.readline().strip() == "ready"
    storm = None
    if mode == "storm":
        storm = subprocess.Popen([sys.executable, "-c", STORM, str(events.path), str(seconds + 2)])
        time.sleep(1.0)  # let the storm reach its rate before the scans are timed
    host.stdin.write("go\n")
    host.stdin.flush()
    out, err = host.communicate(timeout=seconds + 120)
    if storm is not None:
        storm.wait(timeout=60)
    if host.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{err}")
    figures: dict[str, object] = json.loads(out)
    return figures


def main() -> None:
    """Run the three modes and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    build_library()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(mode, args.seconds, Path(tmp)) for mode in ("off", "idle", "storm")]
    print(
        f"{'event thread':<14} | {'scans':>5} | {'scan p50':>8} {'p99':>8} | "
        f"{'RSS start':>9} {'end':>7} {'peak':>7} | {'events':>7} {'records':>7} "
        f"{'dropped':>7} | {'CPU s':>6}"
    )
    for row in rows:
        print(
            f"{row['mode']:<14} | {row['scans']:>5} | {row['p50_ms']:>6.2f}ms "
            f"{row['p99_ms']:>6.2f}ms | {row['rss_start_mib']:>7.1f}Mi "
            f"{row['rss_end_mib']:>5.1f}Mi {row['peak_rss_mib']:>5.1f}Mi | "
            f"{row['delivered']:>7} {row['records']:>7} {row['dropped']:>7} | "
            f"{row['cpu_seconds']:>6.1f}"
        )


if __name__ == "__main__":
    main()
