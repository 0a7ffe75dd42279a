"""The NVML event thread through the real nvidia-ml-py and the fake libnvidia-ml.so.1.

A thread that cannot set up again after a failure tries again after a delay
that doubles up to a minute, so a driver that stays broken costs a few calls
an hour. It runs in a subprocess, as every test of the fake library does (the
loader finds the library only at a process's start).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from node_resolver.gpu_events.nvml_events import MAX_RETRY_SECONDS
from tests.support.libnvml import (
    REPO_ROOT,
    UNKNOWN,
    FakeGpu,
    FakeNode,
    build_library,
    library_env,
)
from tests.support.libnvml.events import FakeEvents

# The watcher's stop event is replaced by one that notes each delay it is asked to wait
# and answers at once, so the delays are read without waiting them out.
WATCH = """
import json, sys, threading
import pynvml
from node_resolver.gpu_events.nvml_events import NvmlEventWatcher

class Delays(threading.Event):
    def __init__(self, count):
        super().__init__()
        self.count, self.delays, self.counted = count, [], threading.Event()

    def wait(self, timeout=None):
        self.delays.append(timeout)
        if len(self.delays) >= self.count:
            self.set()
            self.counted.set()
        return self.is_set()

watcher = NvmlEventWatcher(pynvml, lambda raw: None, wait_ms=10, first_retry=8.0)
watcher._stop = delays = Delays(int(sys.argv[1]))
watcher.start()
assert delays.counted.wait(60), delays.delays
watcher.stop(timeout=60)
print(json.dumps({"delays": delays.delays, "setups": watcher.setups, "status": watcher.status}))
"""


def test_a_setup_that_keeps_failing_is_retried_after_a_delay_doubling_up_to_a_minute(
    tmp_path: Path,
) -> None:
    # Every registration fails: the GPUs cannot be counted (a driver in the middle of a reset).
    node = FakeNode([FakeGpu("GPU-0")], errors={"nvmlDeviceGetCount_v2": UNKNOWN})
    config = node.write(tmp_path / "nvml.conf")
    events = FakeEvents(tmp_path / "events")
    result = subprocess.run(
        [sys.executable, "-c", WATCH, "6"],
        env=library_env(build_library(), config, **events.env()),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    watched = json.loads(result.stdout)
    assert MAX_RETRY_SECONDS == 60.0
    assert watched["delays"] == [8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    # One setup before each delay; the status says what failed, for Node.gpuEventStatus.
    assert watched["setups"] == 6
    assert watched["status"] == "registering for events failed: UNKNOWN"
