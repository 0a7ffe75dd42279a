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
from dataclasses import replace

from .allocation_use import AllocationJudge
from .gpu_source import GpuSource
from .kubelet_devices import node_allocations
from .models import NodeAllocations, NodeSample, NodeSnapshot
from .pids import PidResolver
from .pod_resources import PodResourcesPoller

log = logging.getLogger(__name__)

# How long stop() waits for a scan in progress beyond one interval.
SCAN_STOP_GRACE_SECONDS = 5.0
# Scans in a row in which none of NVML's PIDs exists before the agent calls it
# misconfigured; one such scan happens whenever the only GPU process exits.
MISSING_SCANS = 2
PROC_HINT = (
    "none of the {count} PIDs NVML reports exists in the /proc the agent reads: the agent pod "
    "needs hostPID: true, and --proc-root must point at the host's /proc"
)


class Sampler:
    """Scans ``source`` every ``interval`` seconds in a daemon thread."""

    def __init__(
        self,
        source: GpuSource,
        resolver: PidResolver,
        *,
        node_name: str,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        on_scan: Callable[[NodeSnapshot], None] | None = None,
        pod_resources: PodResourcesPoller | None = None,
        judge: AllocationJudge | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.source = source
        self.resolver = resolver
        self.node_name = node_name
        self.interval = interval
        self._clock = clock
        # Polls the kubelet in its own thread; a scan only reads its last answer.
        self.pod_resources = pod_resources
        # Judges each allocation's use from the scan (ACTIVE, IDLE, UNUSED, UNKNOWN).
        self.judge = judge
        # The last answer mapped to GPUs, kept while neither it nor the GPUs change.
        self._mapped: tuple[object, tuple[object, ...], NodeAllocations] | None = None
        self._latest: NodeSnapshot | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._ready_lock = threading.Lock()
        self._on_ready: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._missing_scans = 0
        # Called with each published snapshot, on the sampling thread (the occupancy log).
        self._on_scan = on_scan
        self._on_scan_failed = False
        # Scans done so far; tests and benchmarks read it to count NVML work.
        self.scans = 0
        # One scan at a time: the thread's, or one asked for now from another thread.
        self._scanning = threading.Lock()

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

    def when_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the first snapshot exists: now, or from the sampling thread."""
        with self._ready_lock:
            if not self._ready.is_set():
                self._on_ready.append(callback)
                return
        callback()

    def start(self) -> None:
        """Start the sampling thread; the first scan begins at once."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        if self.pod_resources is not None:
            self.pod_resources.start()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread, waiting for its current scan at most ``timeout`` seconds.

        The default is one interval plus a few seconds. A scan stuck longer (a hung
        driver call) is left behind in its daemon thread rather than blocking shutdown.
        """
        self._stop.set()
        if self.pod_resources is not None:
            self.pod_resources.stop(0)
        if self._thread is None:
            return
        limit = self.interval + SCAN_STOP_GRACE_SECONDS if timeout is None else timeout
        self._thread.join(limit)
        if self._thread.is_alive():
            log.warning("a GPU scan is still running after %gs; not waiting for it", limit)

    def scan(self) -> NodeSnapshot:
        """Take one snapshot now and publish it; the thread calls this every interval."""
        with self._scanning:
            return self._scan()

    def _scan(self) -> NodeSnapshot:
        sampled_at = self._clock()
        try:
            sample = self.source.sample()
        except Exception as exc:
            # A broken source must not end sampling: report it and try again next interval.
            log.exception("GPU scan failed")
            sample = NodeSample(error=f"GPU scan failed: {type(exc).__name__}: {exc}")
        else:
            self._resolve(sample)
        allocations = self._allocations(sample)
        if self.judge is not None:
            allocations = self._judged(sample, allocations, sampled_at)
        snapshot = NodeSnapshot(
            node_name=self.node_name,
            sample=sample,
            sampled_at=sampled_at,
            allocations=allocations,
        )
        self._latest = snapshot
        self.scans += 1
        if not self._ready.is_set():
            self._set_ready()
        if self._on_scan is not None:
            self._observe(snapshot)
        return snapshot

    def _judged(
        self, sample: NodeSample, allocations: NodeAllocations | None, now: float
    ) -> NodeAllocations | None:
        assert self.judge is not None
        try:
            return self.judge.judge(sample, allocations, now)
        except Exception:
            # The snapshot goes out unjudged rather than not at all.
            log.exception("judging the allocations' use failed")
            return allocations

    def _observe(self, snapshot: NodeSnapshot) -> None:
        assert self._on_scan is not None
        try:
            self._on_scan(snapshot)
        except Exception:
            # The live snapshot is already published; a failing observer must not stop
            # sampling, and logs once per episode rather than every interval.
            if not self._on_scan_failed:
                log.exception("the scan observer failed")
            self._on_scan_failed = True
        else:
            self._on_scan_failed = False

    def _allocations(self, sample: NodeSample) -> NodeAllocations | None:
        poller = self.pod_resources
        if poller is None:
            return None
        state = poller.state()
        if state.answer is None:
            return NodeAllocations(available=False, reason=state.reason)
        age = poller.age_of(state.answer)
        containers = state.answer.containers
        gpus = tuple(
            (g.uuid, g.minor_number, tuple(m.uuid for m in g.mig_devices)) for g in sample.gpus
        )
        mapped = self._mapped
        replicas = state.answer.replicas
        if mapped is not None and mapped[0] is containers and mapped[1] == gpus:
            return replace(mapped[2], age_seconds=age, replicas=replicas)
        try:
            allocations = node_allocations(containers, sample.gpus, age_seconds=age)
        except Exception as exc:
            log.exception("mapping the kubelet's allocations failed")
            return NodeAllocations(available=False, reason=f"mapping failed: {exc}")
        self._mapped = (containers, gpus, allocations)
        return replace(allocations, replicas=replicas)

    def _set_ready(self) -> None:
        with self._ready_lock:
            self._ready.set()
            callbacks, self._on_ready = self._on_ready, []
        for callback in callbacks:
            callback()

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
        if self._all_missing(bool(resolved), len(pids)):
            # Most likely the agent sees another /proc than NVML's: keep what NVML reports.
            sample.error = PROC_HINT.format(count=len(pids))
            return
        for gpu in sample.gpus:
            kept = []
            for process in gpu.processes:
                found = resolved.get(process.pid)
                if found is None:  # exited since NVML listed it
                    continue
                process.name = found.name
                process.cmdline = found.cmdline
                process.container = found.container
                process.start_time = found.start_time
                kept.append(process)
            gpu.processes = kept

    def _all_missing(self, any_found: bool, count: int) -> bool:
        """Track scans in which no PID was found; True once that looks like misconfiguration."""
        if any_found:
            if self._missing_scans >= MISSING_SCANS:
                log.info("the PIDs NVML reports exist in /proc again")
            self._missing_scans = 0
            return False
        self._missing_scans += 1
        if self._missing_scans == MISSING_SCANS:
            log.warning("%s", PROC_HINT.format(count=count))
        return self._missing_scans >= MISSING_SCANS

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
