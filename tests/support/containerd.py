"""A private containerd for tests and benchmarks, running busybox containers kubelet-style.

``LocalContainerd`` starts its own containerd (own root, state, socket and
config), so it never touches a containerd the machine already runs. Containers
are started with ``ctr run --rootfs`` from a directory holding a static busybox,
in namespace ``k8s.io``, under the cgroupfs path kubelet would give them
(``/kubepods/burstable/pod<uid>/<id>``) and with 64-hex IDs like kubelet's.
Everything it started is torn down on ``stop()``, even after a failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import struct
import subprocess
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from . import require

NAMESPACE = "k8s.io"
BUSYBOX_APPLETS = ("sh", "sleep", "cat", "true")
TOOLS = ("containerd", "ctr", "runc", "containerd-shim-runc-v2")


def missing_prerequisite() -> str | None:
    """Why a real containerd cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "real containerd tests need root"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian packages containerd and runc)"
    if find_static_busybox() is None:
        return "no static busybox (Debian package busybox-static)"
    return None


def require_containerd() -> None:
    """Skip (or fail under GPUGRAPH_REQUIRE_ALL=1) where a real containerd cannot run."""
    reason = missing_prerequisite()
    require(reason is None, reason or "")


def find_static_busybox() -> Path | None:
    """A statically linked busybox binary, which runs in an otherwise empty rootfs."""
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        if path.is_file() and _is_static_elf(path):
            return path
    return None


def _is_static_elf(path: Path) -> bool:
    # Static means no PT_INTERP program header; only 64-bit little-endian ELF is checked.
    with path.open("rb") as f:
        header = f.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return False
        (phoff,) = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    types = (struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum))
    return 3 not in types  # PT_INTERP


def new_container_id() -> str:
    """A random 64-hex container ID, the shape kubelet's runtimes use."""
    return secrets.token_hex(32)


@dataclass
class Container:
    """A running container: its ID, pod UID, cgroup and host PIDs (the init process first)."""

    id: str
    pod_uid: str
    cgroup_path: str
    pids: list[int] = field(default_factory=list)


class LocalContainerd:
    """A containerd daemon private to one test run, plus the containers it runs."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = workdir / "containerd.sock"
        self.rootfs = workdir / "rootfs"
        self.log_path = workdir / "containerd.log"
        self.containers: dict[str, Container] = {}
        self._daemon: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalContainerd:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- daemon ----------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Write a config and rootfs, start containerd and wait for its socket to answer."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_rootfs()
        config = self.workdir / "config.toml"
        config.write_text(
            "\n".join(
                [
                    "version = 2",
                    f'root = "{self.workdir / "root"}"',
                    f'state = "{self.workdir / "state"}"',
                    # kubelet's CRI plugin is not needed and would start its own machinery.
                    'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
                    "[grpc]",
                    f'  address = "{self.socket}"',
                    "[ttrpc]",
                    f'  address = "{self.socket}.ttrpc"',
                    "[debug]",
                    '  address = ""',
                    "[metrics]",
                    '  address = ""',
                    "",
                ]
            )
        )
        log = self.log_path.open("wb")
        try:
            self._daemon = subprocess.Popen(
                ["containerd", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self._daemon.poll() is not None:
                raise RuntimeError(f"containerd exited at startup:\n{self.log_tail()}")
            if self.socket.exists():
                probe = subprocess.run(
                    self._ctr_argv("version"), capture_output=True, timeout=timeout
                )
                if probe.returncode == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not answer in {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Remove every container, stop containerd, and clean up after it."""
        if self._daemon is not None:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(self._remove_container, list(self.containers)))
        self.stop_daemon()
        # Shims outlive containerd if their tasks could not be deleted; end them and their
        # containers, which this harness started.
        leftovers = [pid for shim in self._own_shims() for pid in [*_children(shim), shim]]
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # A cgroup can only be removed once the processes in it have exited.
        _wait_gone([*leftovers, *(pid for c in self.containers.values() for pid in c.pids)])
        for container in list(self.containers.values()):
            _remove_cgroups(container)
        self.containers.clear()
        _unmount_below(self.workdir)
        shutil.rmtree(self.workdir / "root", ignore_errors=True)
        shutil.rmtree(self.workdir / "state", ignore_errors=True)

    def stop_daemon(self) -> None:
        """Stop containerd alone; its containers keep running under their shims."""
        if self._daemon is None:
            return
        self._daemon.terminate()
        try:
            self._daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._daemon.kill()
            self._daemon.wait()
        self._daemon = None

    def log_tail(self, lines: int = 30) -> str:
        """The end of containerd's log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no containerd log)"

    # -- containers ------------------------------------------------------------

    def ctr(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``ctr`` against this containerd in namespace k8s.io; returns stdout."""
        done = subprocess.run(self._ctr_argv(*args), capture_output=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(
                f"ctr {' '.join(args)} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace').strip()}\n{self.log_tail()}"
            )
        return done.stdout.decode()

    def run(
        self,
        argv: Sequence[str] = ("/bin/sleep", "100000"),
        *,
        pod_uid: str | None = None,
        container_id: str | None = None,
        cgroup_path: str | None = None,
    ) -> Container:
        """Start a container running ``argv``, by default under a kubelet-style cgroup path."""
        container_id = container_id or new_container_id()
        pod_uid = pod_uid or str(uuid.uuid4())
        cgroup_path = cgroup_path or f"/kubepods/burstable/pod{pod_uid}/{container_id}"
        container = Container(container_id, pod_uid, cgroup_path)
        self.containers[container.id] = container
        self.ctr(
            "run", "-d", "--null-io", "--rootfs", "--cgroup", container.cgroup_path,
            str(self.rootfs), container.id, *argv,
        )  # fmt: skip
        container.pids = self.task_pids(container.id)
        return container

    def run_many(self, count: int, *, workers: int = 4) -> list[Container]:
        """Start ``count`` sleeping containers, a few at a time."""
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda _: self.run(), range(count)))

    def exec(self, container: Container, argv: Sequence[str] = ("/bin/sleep", "100001")) -> int:
        """Start another process in ``container``; returns its host PID."""
        before = set(self.task_pids(container.id))
        self.ctr("task", "exec", "-d", "--exec-id", f"x{secrets.token_hex(4)}", container.id, *argv)
        added = [pid for pid in self.task_pids(container.id) if pid not in before]
        if len(added) != 1:
            raise RuntimeError(f"expected one new process in {container.id}, got {added}")
        container.pids.append(added[0])
        return added[0]

    def task_pids(self, container_id: str) -> list[int]:
        """The host PIDs of a container's task, as ``ctr task ps`` lists them."""
        out = self.ctr("task", "ps", container_id)
        return [int(line.split()[0]) for line in out.splitlines()[1:] if line.strip()]

    def kill(self, container: Container, timeout: float = 30.0) -> None:
        """SIGKILL a container's task and wait until its processes are gone."""
        self.ctr("task", "kill", "-s", "SIGKILL", "--all", container.id)
        deadline = time.monotonic() + timeout
        while any(_alive(pid) for pid in container.pids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"container {container.id} still running after SIGKILL")
            time.sleep(0.02)

    def _remove_container(self, container_id: str) -> None:
        with contextlib.suppress(Exception):
            self.ctr("task", "delete", "--force", container_id, timeout=30)
        with contextlib.suppress(Exception):
            self.ctr("container", "delete", container_id, timeout=30)

    # -- internals -------------------------------------------------------------

    def _ctr_argv(self, *args: str) -> list[str]:
        return ["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, *args]

    def _write_rootfs(self) -> None:
        busybox = find_static_busybox()
        if busybox is None:
            raise RuntimeError("no static busybox")
        bin_dir = self.rootfs / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name in ("proc", "sys", "dev", "tmp", "etc"):
            (self.rootfs / name).mkdir(exist_ok=True)
        shutil.copy2(busybox, bin_dir / "busybox")
        for applet in BUSYBOX_APPLETS:
            link = bin_dir / applet
            if not link.is_symlink():
                link.symlink_to("busybox")

    def _own_shims(self) -> list[int]:
        needle = f"-address\0{self.socket}\0".encode()
        shims = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                if b"containerd-shim" in cmdline and needle in cmdline:
                    shims.append(int(entry))
        return shims


def _alive(pid: int) -> bool:
    """True while ``pid`` is a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X", "")


def _wait_gone(pids: Sequence[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == parent:
                found.append(int(entry))
    return found


def _cgroup_mounts() -> list[Path]:
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            before, _, after = line.partition(" - ")
            if after.split(" ", 1)[0] in ("cgroup", "cgroup2"):
                mounts.append(Path(before.split()[4]))
    return mounts


def _remove_cgroups(container: Container) -> None:
    relative = container.cgroup_path.lstrip("/")
    for mount in _cgroup_mounts():
        # The container's cgroup and its pod's; rmdir only removes empty cgroups, so
        # nothing live is touched.
        path = mount / relative
        for _ in range(2):
            if path == mount:
                break
            with contextlib.suppress(OSError):
                path.rmdir()
            path = path.parent


def _unmount_below(directory: Path) -> None:
    prefix = f"{directory.resolve()}/"
    with contextlib.suppress(OSError):
        points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
