"""The agent's command line: ``gpugraph agent`` and ``python -m node_resolver``.

The agent runs in the foreground, logs to stderr, and on SIGTERM or SIGINT
stops serving (letting calls in flight finish), joins the sampling thread and
exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from .address import AGENT_PORT, METRICS_PORT, join_host_port, listen_address
from .agent import agent_running
from .allocation_use import (
    DEFAULT_IDLE_AFTER,
    DEFAULT_IDLE_SM_PERCENT,
    AllocationJudge,
    IdlePolicy,
)
from .auth import TokenFile
from .fake_nvml import FakeGpuSource, FakeNvmlError
from .gpu_events.node_events import NodeGpuEvents
from .gpu_source import GpuSource
from .history.durations import parse_duration
from .history.log import (
    DEFAULT_MAX_BYTES,
    DEFAULT_RETENTION,
    HistoryLog,
    HistorySettings,
    read_boot_id,
)
from .models import NodeSnapshot
from .nvml import NvmlGpuSource, NvmlUnavailableError, load_pynvml
from .pids import RESOLVER_KINDS, build_resolver
from .pod_names import PodNames
from .pod_resources import DEFAULT_POD_RESOURCES_SOCKET, PodResourcesClient, PodResourcesPoller
from .sampler import Sampler
from .version import version

log = logging.getLogger("node_resolver")

DEFAULT_LISTEN = join_host_port("0.0.0.0", AGENT_PORT)
DEFAULT_CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
DEFAULT_CONTAINERD_NAMESPACE = "k8s.io"
# What the log line that names the bound address starts with; tools and tests read it.
LISTENING = "agent listening on "
METRICS_LISTENING = "agent serving /metrics on "


def _listen(value: str) -> str:
    # Written out in full, so that gRPC binds ":PORT" as the server's flag reads it.
    return join_host_port(*listen_address(value))


# The seconds between scans an agent takes: faster is a busy loop on NVML, slower than
# an hour leaves the snapshots (and the occupancy log's clock) meaningless.
SCAN_INTERVAL_SECONDS = (0.1, 3600.0)


def scan_interval(value: str) -> float:
    """argparse type for the seconds between scans, within ``SCAN_INTERVAL_SECONDS``."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {value!r}") from None
    least, most = SCAN_INTERVAL_SECONDS
    if not least <= seconds <= most:
        raise argparse.ArgumentTypeError(f"must be {least:g} to {most:g} seconds, got {value!r}")
    return seconds


def duration_seconds(value: str) -> float:
    """argparse type for a duration such as 30d or 12h, in seconds."""
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def sm_percent(value: str) -> float:
    """argparse type for an SM utilization percentage, 0 to 100."""
    try:
        percent = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {value!r}") from None
    if not 0 <= percent <= 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100, got {value!r}")
    return percent


def positive_bytes(value: str) -> int:
    """argparse type for a positive number of bytes."""
    try:
        size = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected plain bytes, got {value!r}") from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value!r}")
    return size


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the agent's flags to ``parser``."""
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        metavar="NAME",
        help="this node's Kubernetes name (default: env NODE_NAME)",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        type=_listen,
        metavar="HOST:PORT",
        help=f"gRPC address to serve on; port 0 picks a free one (default: {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--nvml-fake",
        default=os.environ.get("GPUGRAPH_NVML_FAKE") or None,
        metavar="PATH",
        help="read GPUs from this JSON file instead of NVML (default: env GPUGRAPH_NVML_FAKE)",
    )
    parser.add_argument(
        "--proc-root",
        default="/proc",
        metavar="DIR",
        help="the host's /proc; use /host/proc when it is mounted there (default: /proc)",
    )
    parser.add_argument(
        "--pid-resolver",
        default="auto",
        choices=RESOLVER_KINDS,
        help="how host PIDs are mapped to containers (default: auto)",
    )
    parser.add_argument(
        "--containerd-socket",
        default=DEFAULT_CONTAINERD_SOCKET,
        metavar="PATH",
        help=f"containerd's socket (default: {DEFAULT_CONTAINERD_SOCKET})",
    )
    parser.add_argument(
        "--containerd-namespace",
        default=DEFAULT_CONTAINERD_NAMESPACE,
        metavar="NS",
        help="containerd namespace of Kubernetes containers "
        f"(default: {DEFAULT_CONTAINERD_NAMESPACE})",
    )
    parser.add_argument(
        "--pod-resources-socket",
        default=DEFAULT_POD_RESOURCES_SOCKET,
        metavar="PATH",
        help="the kubelet's PodResources socket, for which device each container was given; "
        f"empty to not ask (default: {DEFAULT_POD_RESOURCES_SOCKET})",
    )
    parser.add_argument(
        "--interval",
        default=1.0,
        type=scan_interval,
        metavar="SECONDS",
        help="seconds between GPU scans (default: 1)",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="require 'authorization: Bearer <token>' on every call, token read from PATH "
        "(re-read when it changes)",
    )
    parser.add_argument(
        "--metrics-listen",
        type=_listen,
        metavar="HOST:PORT",
        help="serve this node's GPU series for Prometheus on HTTP GET /metrics here, e.g. "
        f"[::]:{METRICS_PORT} (default: off)",
    )
    parser.add_argument(
        "--metrics-token-file",
        metavar="PATH",
        help="require 'Authorization: Bearer <token>' on /metrics, token read from PATH "
        "(re-read when it changes); a token of its own, not --token-file's",
    )
    parser.add_argument(
        "--expose-cmdline",
        action="store_true",
        help="send each process's full command line (it can carry secrets)",
    )
    parser.add_argument(
        "--history-dir",
        metavar="DIR",
        help="keep the occupancy log (who held which GPU, when) in a SQLite file here; "
        "without it history is off",
    )
    parser.add_argument(
        "--history-retention",
        default=parse_duration(DEFAULT_RETENTION),
        type=duration_seconds,
        metavar="DURATION",
        help=f"drop ended records older than this, e.g. 30d or 12h (default: {DEFAULT_RETENTION})",
    )
    parser.add_argument(
        "--history-max-bytes",
        default=DEFAULT_MAX_BYTES,
        type=positive_bytes,
        metavar="BYTES",
        help="the log's size on disk, pod names and WAL included; names no record refers "
        "to go first, then the oldest records "
        f"(default: {DEFAULT_MAX_BYTES})",
    )
    parser.add_argument(
        "--idle-after",
        default=parse_duration(DEFAULT_IDLE_AFTER),
        type=duration_seconds,
        metavar="DURATION",
        help="an allocation whose holder ran nothing above --idle-sm-percent for this long is "
        f"IDLE (processes holding memory) or UNUSED (none), e.g. 30m (default: "
        f"{DEFAULT_IDLE_AFTER})",
    )
    parser.add_argument(
        "--idle-sm-percent",
        default=DEFAULT_IDLE_SM_PERCENT,
        type=sm_percent,
        metavar="N",
        help="a process at or below this SM utilization (percent) is not running "
        f"(default: {DEFAULT_IDLE_SM_PERCENT:g})",
    )
    parser.add_argument(
        "--kernel-log",
        metavar="PATH",
        help="follow NVIDIA's XID messages in this kernel log (/dev/kmsg, or a file of plain "
        "lines) to name the process the driver blamed; needs read access to it, e.g. "
        "CAP_SYSLOG for /dev/kmsg (default: off)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log verbosity, in either case (default: INFO)",
    )


def build_source(args: argparse.Namespace) -> GpuSource:
    """The GPU source the flags ask for: the fake file, or NVML."""
    if args.nvml_fake:
        return FakeGpuSource(args.nvml_fake)
    # NVML keeps a rolling buffer of per-process samples; look back two scans.
    return NvmlGpuSource(utilization_window=max(1.0, 2 * args.interval))


def run_agent(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM or SIGINT; returns the exit status."""
    logging.basicConfig(
        level=getattr(logging, args.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.node_name:
        log.error("no node name: pass --node-name or set NODE_NAME")
        return 2
    if not os.path.isdir(args.proc_root):
        # A /host/proc mount missing from the DaemonSet: no PID would ever resolve.
        log.error("--proc-root %s is not a directory", args.proc_root)
        return 2
    token: Callable[[], str] | None = None
    if args.token_file:
        try:
            token = TokenFile(args.token_file).current
        except ValueError as exc:
            log.error("%s", exc)
            return 2
    elif args.expose_cmdline:
        log.warning(
            "--expose-cmdline without --token-file: anyone who can reach %s can read every GPU "
            "process's command line, secrets included",
            args.listen,
        )
    metrics_token: Callable[[], str] | None = None
    if args.metrics_token_file:
        if not args.metrics_listen:
            log.error("--metrics-token-file needs --metrics-listen")
            return 2
        try:
            metrics_token = TokenFile(args.metrics_token_file).current
        except ValueError as exc:
            log.error("%s", exc)
            return 2
    elif args.metrics_listen:
        log.warning(
            "/metrics on %s needs no token: anyone who can reach it reads this node's pod names "
            "and GPU use; pass --metrics-token-file or admit only Prometheus (NetworkPolicy)",
            args.metrics_listen,
        )
    try:
        source = build_source(args)
    except (NvmlUnavailableError, FakeNvmlError) as exc:
        log.error("%s", exc)
        return 1
    resolver = build_resolver(
        args.pid_resolver,
        proc_root=args.proc_root,
        containerd_socket=args.containerd_socket,
        containerd_namespace=args.containerd_namespace,
        expose_cmdline=args.expose_cmdline,
    )
    kubelet = PodResourcesClient(args.pod_resources_socket) if args.pod_resources_socket else None
    pod_names = PodNames()
    judge = (
        AllocationJudge(
            node_name=args.node_name,
            boot_id=read_boot_id(args.proc_root),
            policy=IdlePolicy(args.idle_after, args.idle_sm_percent),
            pod_names=pod_names,
            interval=args.interval,
        )
        if kubelet
        else None
    )
    history = build_history(args, pod_names, judge)
    events = build_events(args, pod_names, history)
    sampler = Sampler(
        source,
        resolver,
        node_name=args.node_name,
        interval=args.interval,
        on_scan=scan_hooks(history, events),
        pod_resources=(
            PodResourcesPoller(kubelet.list, interval=args.interval, list_replicas=kubelet.replicas)
            if kubelet
            else None
        ),
        judge=judge,
    )
    try:
        return asyncio.run(
            _serve(
                sampler,
                args.listen,
                token,
                history,
                metrics=(args.metrics_listen, metrics_token) if args.metrics_listen else None,
                events=events,
            )
        )
    finally:
        sampler.stop()
        source.close()
        resolver.close()
        if kubelet is not None:
            kubelet.close()


def build_events(
    args: argparse.Namespace, pod_names: PodNames, history: HistoryLog | None
) -> NodeGpuEvents:
    """GPU health events as the flags ask: NVML's unless the GPUs are fake, the kernel log's
    with --kernel-log, recorded in the occupancy log when there is one."""
    return NodeGpuEvents(
        node_name=args.node_name,
        pod_names=pod_names,
        nvml=None if args.nvml_fake else load_pynvml(),
        kernel_log=args.kernel_log,
        sink=history.add_events if history is not None else None,
        boot_id=read_boot_id(args.proc_root),
    )


def scan_hooks(
    history: HistoryLog | None, events: NodeGpuEvents | None
) -> Callable[[NodeSnapshot], None] | None:
    """What each scan is handed to: the occupancy log, then the GPU event recorder."""
    hooks = [hook.observe for hook in (history, events) if hook is not None]
    if not hooks:
        return None
    if len(hooks) == 1:
        return hooks[0]

    def both(snapshot: NodeSnapshot) -> None:
        # Each sees every scan whatever the other does; the sampler reports a failure.
        failed: Exception | None = None
        for hook in hooks:
            try:
                hook(snapshot)
            except Exception as exc:
                failed = exc
        if failed is not None:
            raise failed

    return both


def build_history(
    args: argparse.Namespace,
    pod_names: PodNames | None = None,
    judge: AllocationJudge | None = None,
) -> HistoryLog | None:
    """The occupancy log the flags ask for (keeping ``judge``'s allocations); None without
    --history-dir."""
    if not args.history_dir:
        return None
    settings = HistorySettings(
        directory=Path(args.history_dir),
        retention_seconds=args.history_retention,
        max_bytes=args.history_max_bytes,
    )
    return HistoryLog(
        settings,
        boot_id=read_boot_id(args.proc_root),
        pod_names=pod_names if pod_names is not None else PodNames(),
        allocations=judge,
    )


async def _serve(
    sampler: Sampler,
    listen: str,
    token: Callable[[], str] | None,
    history: HistoryLog | None = None,
    *,
    metrics: tuple[str, Callable[[], str] | None] | None = None,
    events: NodeGpuEvents | None = None,
) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        async with agent_running(
            sampler,
            listen,
            token=token,
            history=history,
            metrics_listen=metrics[0] if metrics else None,
            metrics_token=metrics[1] if metrics else None,
            events=events,
        ) as server:
            log.info(
                LISTENING + "%s (node %s, scanning every %gs%s; gpugraph %s)",
                server.address,
                sampler.node_name,
                sampler.interval,
                ", token required" if token else "",
                version(),
            )
            if server.metrics is not None:
                log.info(
                    METRICS_LISTENING + "%s%s",
                    server.metrics.address,
                    ", token required" if metrics and metrics[1] else "",
                )
            await stopping.wait()
            log.info("stopping")
    except OSError as exc:
        log.error("%s", exc)
        return 1
    log.info("agent stopped after %d scans and %d calls", sampler.scans, server.calls_served)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the agent."""
    parser = argparse.ArgumentParser(
        prog="python -m node_resolver",
        description="gpugraph node agent: this node's GPUs and their processes, over gRPC",
    )
    add_agent_arguments(parser)
    return run_agent(parser.parse_args(argv))
