"""A fake ``libnvidia-ml.so.1`` in C, loaded by the real nvidia-ml-py.

``fake_nvml.c`` implements the NVML entry points the agent reaches through
pynvml, with nvml.h's struct layouts. ``build_library(variant)`` compiles it
with the system C compiler once per test session; ``FakeNode`` describes the
GPUs and ``FakeNode.write`` lays them out as the text file the library reads.

pynvml dlopens "libnvidia-ml.so.1" by name, so the library is found through
``LD_LIBRARY_PATH``, which the dynamic loader reads only at process start:
code that loads it runs in a subprocess with ``library_env``. That also gives
every test its own NVML state, which pynvml otherwise keeps per process.

The config file has one record per line (indices are GPU index and MIG slot,
slot -1 meaning the whole GPU; memory -1 is NVML's "not available")::

    driver 535.54.03
    cuda 12020
    init_error CODE
    gpu UUID TOTAL USED RESERVED UTIL_GPU UTIL_MEM TEMP_C POWER_MW LIMIT_MW MIG_MODE LOST NAME...
    slots GPU COUNT
    mig GPU SLOT UUID GI CI TOTAL USED
    proc GPU SLOT c|g|m PID MEMORY    (m: an MPS client, in the MPS list)
    sample GPU PID TIMESTAMP_US SM
    blackwell GPU                     (the legacy per-process utilization is NOT_SUPPORTED)
    error GPU SLOT FUNCTION CODE      (GPU -1: node-wide, e.g. nvmlDeviceGetCount_v2)

NVML events come from another file, appended to while the library runs
(``events.py``, ``FAKE_NVML_EVENTS``).

A line that does not parse, or one past the library's fixed capacity (e.g. 256
processes per device), fails the load with ``UNKNOWN`` and a line on stderr.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import require

SOURCE = Path(__file__).with_name("fake_nvml.c")
# Included by SOURCE: NVML's event API and PCI bus IDs (see ``events.py``).
EVENTS_SOURCE = Path(__file__).with_name("fake_nvml_events.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
CONFIG_ENV = "FAKE_NVML_CONFIG"
REPO_ROOT = Path(__file__).resolve().parents[3]

# NVML's return codes, as nvml.h numbers them.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
INSUFFICIENT_RESOURCES = 23
UNKNOWN = 999


class Variant(enum.Enum):
    """Which driver generation the library's exported symbols imitate."""

    # _v3 process lists with 24-byte entries, MemoryInfo_v2, ProcessesUtilizationInfo (R550)
    CURRENT = "CURRENT"
    OLD = "OLD"  # no _v3, no MemoryInfo_v2
    R535 = "R535"  # early R535: _v3 writing 32-byte entries
    R430 = "R430"  # as OLD, and no _v2 process lists: only the unversioned v1 ones


# The variants whose process lists the agent reads (all but R430's).
LISTING_VARIANTS = (Variant.CURRENT, Variant.OLD, Variant.R535)


@dataclass
class FakeProcess:
    """One process on a GPU or MIG device; ``memory`` None is NVML's "not available"."""

    pid: int
    memory: int | None = 1 << 30
    compute: bool = True
    graphics: bool = False
    # Listed by nvmlDeviceGetMPSComputeRunningProcesses: an MPS client.
    mps: bool = False


@dataclass
class FakeMig:
    """One MIG device in a slot of its GPU."""

    uuid: str
    gi: int
    ci: int = 0
    total: int = 20 << 30
    used: int = 1 << 30
    processes: list[FakeProcess] = field(default_factory=list)
    # NVML function name -> the error code it returns for this MIG device
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeGpu:
    """One GPU: what NVML reports for it."""

    uuid: str
    name: str = "NVIDIA H200"
    total: int = 150754820096
    used: int = 2147483648
    reserved: int = 0
    util_gpu: int = 87
    util_mem: int = 40
    temperature: int = 55
    power_mw: int = 350500
    limit_mw: int = 700000
    mig_mode: int | None = None  # None: not MIG-capable
    lost: bool = False
    # The legacy nvmlDeviceGetProcessUtilization answers NOT_SUPPORTED, as on Blackwell.
    blackwell: bool = False
    processes: list[FakeProcess] = field(default_factory=list)
    # (pid, timestamp in microseconds, SM %)
    samples: list[tuple[int, int, int]] = field(default_factory=list)
    # A slot holds a MIG device or None (empty)
    mig: list[FakeMig | None] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeNode:
    """Everything the fake library reports."""

    gpus: list[FakeGpu] = field(default_factory=list)
    driver: str = "550.90.07"
    cuda: int = 12040
    init_error: int | None = None
    # Node-wide errors, e.g. {"nvmlDeviceGetCount_v2": UNKNOWN}
    errors: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The config file's lines."""
        out = [f"driver {self.driver}", f"cuda {self.cuda}"]
        if self.init_error is not None:
            out.append(f"init_error {self.init_error}")
        out += [f"error -1 -1 {fn} {code}" for fn, code in self.errors.items()]
        for index, gpu in enumerate(self.gpus):
            mode = -1 if gpu.mig_mode is None else gpu.mig_mode
            out.append(
                f"gpu {gpu.uuid} {gpu.total} {gpu.used} {gpu.reserved} {gpu.util_gpu} "
                f"{gpu.util_mem} {gpu.temperature} {gpu.power_mw} {gpu.limit_mw} {mode} "
                f"{int(gpu.lost)} {gpu.name}"
            )
            out += _device_lines(index, -1, gpu.processes, gpu.errors)
            if gpu.blackwell:
                out.append(f"blackwell {index}")
            out += [f"sample {index} {pid} {ts} {sm}" for pid, ts, sm in gpu.samples]
            out.append(f"slots {index} {len(gpu.mig)}")
            for slot, mig in enumerate(gpu.mig):
                if mig is None:
                    continue
                out.append(
                    f"mig {index} {slot} {mig.uuid} {mig.gi} {mig.ci} {mig.total} {mig.used}"
                )
                out += _device_lines(index, slot, mig.processes, mig.errors)
        return out

    def write(self, path: Path) -> Path:
        """Write this node's config to ``path``."""
        return write_config(path, self.lines())


def write_config(path: Path, lines: Sequence[str]) -> Path:
    """Replace the config file whole: the library re-reads it when it is replaced."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text("\n".join(lines) + "\n")
    os.replace(partial, path)
    return path


def _device_lines(
    gpu: int, slot: int, processes: Sequence[FakeProcess], errors: Mapping[str, int]
) -> list[str]:
    out = []
    for process in processes:
        memory = -1 if process.memory is None else process.memory
        for kind, listed in (("c", process.compute), ("g", process.graphics), ("m", process.mps)):
            if listed:
                out.append(f"proc {gpu} {slot} {kind} {process.pid} {memory}")
    out += [f"error {gpu} {slot} {fn} {code}" for fn, code in errors.items()]
    return out


_built: dict[Variant, Path] = {}


def compiler() -> str | None:
    """The system C compiler, or None."""
    return shutil.which("cc") or shutil.which("gcc")


def build_library(variant: Variant = Variant.CURRENT) -> Path:
    """The directory holding ``libnvidia-ml.so.1`` for ``variant``, compiled once per session.

    Skips the calling test without a C compiler (a failure under GPUGRAPH_REQUIRE_ALL=1).
    """
    if variant in _built:
        return _built[variant]
    cc = compiler()
    require(cc is not None, "no C compiler (cc or gcc) to build the fake libnvidia-ml.so.1")
    assert cc is not None
    flags = ["-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden"]
    # The flags count with the source, so that changing either rebuilds.
    sources = SOURCE.read_bytes() + EVENTS_SOURCE.read_bytes()
    digest = hashlib.sha256(sources + " ".join(flags).encode()).hexdigest()[:16]
    directory = (
        Path(tempfile.gettempdir()) / f"gpugraph-libnvml-{digest}-{os.getuid()}" / variant.value
    )
    library = directory / LIBRARY_NAME
    if not library.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f"{LIBRARY_NAME}.{os.getpid()}.partial"
        command = [cc, *flags, f"-DFAKE_NVML_{variant.value}", "-o", str(partial), str(SOURCE)]
        built = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if built.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed:\n{built.stderr}")
        os.replace(partial, library)
    _built[variant] = directory
    return directory


def library_env(library_dir: Path, config: Path, **extra: str) -> dict[str, str]:
    """An environment whose processes load the fake library from ``library_dir``."""
    env = dict(os.environ)
    env.pop("GPUGRAPH_NVML_FAKE", None)
    env["LD_LIBRARY_PATH"] = str(library_dir)
    env[CONFIG_ENV] = str(config)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{path}" if path else str(REPO_ROOT)
    env.update(extra)
    return env


@dataclass
class ProbeResult:
    """What ``tests.support.libnvml.probe`` printed: one dict per scan, or the startup error."""

    scans: list[dict[str, Any]]
    error: str | None
    stderr: str


def probe(
    library_dir: Path,
    config: Path,
    *,
    scans: int = 1,
    window: float = 2.0,
    now: float | None = None,
    between: Sequence[FakeNode] = (),
    layout: tuple[str, int] | None = None,
) -> ProbeResult:
    """Run ``NvmlGpuSource()`` (the real pynvml) in a subprocess; its scans as plain dicts.

    ``between[i]`` is written to ``config`` after scan ``i``; ``now`` fixes the source's clock;
    ``layout`` replaces the (suffix, entry bytes) the source would tell from the symbols.
    """
    spec: dict[str, Any] = {"scans": scans, "window": window, "now": now, "layout": layout}
    spec["between"] = [node.lines() for node in between]
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.libnvml.probe", str(config)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env=library_env(library_dir, config),
    )
    if result.returncode != 0:
        raise AssertionError(f"probe failed ({result.returncode}):\n{result.stderr}")
    out = json.loads(result.stdout)
    return ProbeResult(out["scans"], out["error"], result.stderr)
