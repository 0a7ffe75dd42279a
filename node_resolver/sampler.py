"""Background sampling: one GPU scan per interval, whatever the number of callers.

A thread scans the GPU source, resolves the PIDs it reports to processes,
containers and pods, drops the PIDs that are gone, and publishes the result
as the latest ``NodeSnapshot``. Readers only ever take that snapshot, so a
call never waits on NVML.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .gpu_source import GpuSource
from .models import NodeSample, NodeSnapshot
from .pids import PidResolver

log = logging.getLogger(__name__)


class Sampler:
    """Scans ``source`` every ``interval`` seconds in a daemon thread."""

    def __init__(
        self,
        source: GpuSource,
        resolver: PidResolver,
        *,
        node_name: str,
        interval: float = 1.0,
        expose_cmdline: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.source = source
        self.resolver = resolver
        self.node_name = node_name
        self.interval = interval
        self.expose_cmdline = expose_cmdline
        self._clock = clock
        self._latest: NodeSnapshot | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        # Scans done so far; tests and benchmarks read it to count NVML work.
        self.scans = 0
        # How long the last scan took (source plus PID resolution), in seconds.
        self.last_scan_seconds = 0.0

    @property
    def ready(self) -> bool:
        """True once the first snapshot exists."""
        return self._ready.is_set()

    def latest(self) -> NodeSnapshot | None:
        """The most recent snapshot, or None before the first scan finishes."""
        return self._latest

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the first snapshot exists; False on timeout."""
        return self._ready.wait(timeout)

    def start(self) -> None:
        """Start the sampling thread; the first scan begins at once."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread and wait for it to finish its current scan."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def scan(self) -> NodeSnapshot:
        """Take one snapshot now and publish it; the thread calls this every interval."""
        started = time.perf_counter()
        sampled_at = self._clock()
        try:
            sample = self.source.sample()
        except Exception as exc:
            # A broken source must not end sampling: report it and try again next interval.
            log.exception("GPU scan failed")
            sample = NodeSample(error=f"GPU scan failed: {type(exc).__name__}: {exc}")
        else:
            self._resolve(sample)
        snapshot = NodeSnapshot(node_name=self.node_name, sample=sample, sampled_at=sampled_at)
        self.last_scan_seconds = time.perf_counter() - started
        self._latest = snapshot
        self.scans += 1
        self._ready.set()
        return snapshot

    def _resolve(self, sample: NodeSample) -> None:
        pids = {process.pid for gpu in sample.gpus for process in gpu.processes}
        if not pids:
            return
        try:
            resolved = self.resolver.resolve(pids)
        except Exception as exc:
            # Keep the GPUs and their processes, unresolved, rather than nothing.
            log.exception("PID resolution failed")
            sample.error = f"PID resolution failed: {type(exc).__name__}: {exc}"
            return
        for gpu in sample.gpus:
            kept = []
            for process in gpu.processes:
                found = resolved.get(process.pid)
                if found is None:  # exited since NVML listed it
                    continue
                process.name = found.name
                process.cmdline = found.cmdline if self.expose_cmdline else None
                process.container = found.container
                kept.append(process)
            gpu.processes = kept

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:
                # scan() reports source and resolver failures itself; this is the last guard
                # that keeps the loop alive whatever happens.
                log.exception("sampler scan crashed")
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:
                # A scan overran: skip the missed slots rather than scanning back to back.
                missed = int((now - next_at) / self.interval) + 1
                next_at += missed * self.interval
            self._stop.wait(next_at - now)
