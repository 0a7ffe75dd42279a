"""Which containerd task a host PID belongs to, asked over containerd's task API.

``ContainerdTasks`` is the transport: two unary calls (Tasks.List, Tasks.ListPids)
on containerd's gRPC socket. ``ContainerdPidMap`` keeps a PID -> container ID map
built from them and decides when it is stale.

Staleness uses process start times rather than a timer. A process that was
already running when the map was built, and is still running now, is the same
process that held its PID then: the map's answer for it (a container, or
"none") is final. Only a process that started after (or just before) the last
refresh can be missing from the map, or collide with a stale entry left by a
process that exited and freed its PID, so only such a process triggers a
refresh. A host process therefore costs nothing after its first few seconds,
and a reused PID is never attributed to the old container.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import grpc

from .generated import tasks_pb2, tasks_pb2_grpc

__all__ = [
    "SETTLE_SECONDS",
    "ContainerdError",
    "ContainerdPidMap",
    "ContainerdTasks",
    "PidMapSource",
    "boot_ticks",
]

log = logging.getLogger(__name__)

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# containerd lists a new task's PIDs only once the task is registered, shortly after the
# process appears; a process younger than this may still be missing for that reason.
SETTLE_SECONDS = 2.0


def boot_ticks() -> int:
    """Return the time since boot in clock ticks, the unit of /proc/<pid>/stat's starttime."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _CLOCK_TICKS)


class ContainerdError(Exception):
    """containerd could not be asked (socket missing, daemon down, call failed)."""


class ContainerdTasks:
    """A client of containerd's task service on a unix socket, in one namespace."""

    def __init__(self, socket_path: str, namespace: str = "k8s.io", *, timeout: float = 2.0):
        self.socket_path = socket_path
        self.namespace = namespace
        self.timeout = timeout
        self._metadata = (("containerd-namespace", namespace),)
        self._channel: grpc.Channel | None = None
        self._stub: tasks_pb2_grpc.TasksStub | None = None

    def pid_map(self) -> dict[int, str]:
        """List every running task's PIDs and return PID -> container ID."""
        if not os.path.exists(self.socket_path):
            raise ContainerdError(f"containerd socket {self.socket_path} does not exist")
        stub = self._connect()
        try:
            tasks = stub.List(
                tasks_pb2.ListTasksRequest(), metadata=self._metadata, timeout=self.timeout
            ).tasks
            # One round trip per task; issue them all before waiting on any.
            pending = [
                (
                    task.id or task.container_id,
                    stub.ListPids.future(
                        tasks_pb2.ListPidsRequest(container_id=task.id or task.container_id),
                        metadata=self._metadata,
                        timeout=self.timeout,
                    ),
                )
                for task in tasks
            ]
        except grpc.RpcError as exc:
            raise ContainerdError(f"containerd at {self.socket_path}: {_describe(exc)}") from None
        result: dict[int, str] = {}
        for container_id, future in pending:
            try:
                processes = future.result().processes
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    continue  # the task exited between List and ListPids
                raise ContainerdError(
                    f"containerd at {self.socket_path}: {_describe(exc)}"
                ) from None
            for process in processes:
                result[process.pid] = container_id
        return result

    def close(self) -> None:
        """Close the connection; a later call reconnects."""
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

    def _connect(self) -> tasks_pb2_grpc.TasksStub:
        if self._stub is None:
            self._channel = grpc.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[
                    # containerd restarts should be noticed within seconds, not minutes.
                    ("grpc.initial_reconnect_backoff_ms", 500),
                    ("grpc.max_reconnect_backoff_ms", 5000),
                ],
            )
            self._stub = tasks_pb2_grpc.TasksStub(self._channel)
        return self._stub


def _describe(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    return f"{code.name if code else 'error'}: {details}"


class PidMapSource(Protocol):
    """Where ContainerdPidMap gets its map from: ContainerdTasks, or a stand-in in tests."""

    socket_path: str

    def pid_map(self) -> dict[int, str]:
        """Return PID -> container ID for every running task; raises ContainerdError."""
        ...


class ContainerdPidMap:
    """A cached PID -> container ID map that refreshes only for processes it cannot vouch for."""

    def __init__(
        self,
        tasks: PidMapSource,
        *,
        settle_seconds: float = SETTLE_SECONDS,
        retry_seconds: float = 5.0,
        clock: Callable[[], int] = boot_ticks,
    ) -> None:
        self.tasks = tasks
        self._settle_ticks = int(settle_seconds * _CLOCK_TICKS)
        self._retry_ticks = int(retry_seconds * _CLOCK_TICKS)
        self._clock = clock
        self._map: dict[int, str] = {}
        self._built_at: int | None = None
        self._failed_at: int | None = None
        self.refreshes = 0

    def lookup(self, processes: Iterable[tuple[int, int]]) -> dict[int, str]:
        """Map (PID, start time) pairs to container IDs; PIDs in no task are left out."""
        wanted = list(processes)
        if any(not self._vouches_for(start) for _, start in wanted):
            self._refresh()
        return {pid: self._map[pid] for pid, start in wanted if self._usable(pid, start)}

    def _vouches_for(self, start_time: int) -> bool:
        return self._built_at is not None and start_time + self._settle_ticks < self._built_at

    def _usable(self, pid: int, start_time: int) -> bool:
        # An entry recorded before this process started belongs to an earlier owner of the PID.
        return pid in self._map and self._built_at is not None and start_time <= self._built_at

    def _refresh(self) -> None:
        now = self._clock()
        if self._failed_at is not None and now - self._failed_at < self._retry_ticks:
            return
        try:
            fresh = self.tasks.pid_map()
        except ContainerdError as exc:
            if self._failed_at is None:
                log.warning("containerd PID lookup unavailable, PIDs stay unresolved: %s", exc)
            self._failed_at = now
            return
        if self._failed_at is not None:
            log.info("containerd PID lookup available again at %s", self.tasks.socket_path)
        self._failed_at = None
        self._map = fresh
        self._built_at = now
        self.refreshes += 1
