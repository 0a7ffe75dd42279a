"""``gpugraph demo``'s command line: its flags, whose defaults are ``DemoConfig``'s, and the run."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from node_resolver.address import join_host_port, listen_address
from node_resolver.cli import scan_interval

from ..agents.pool import AgentPool
from ..flags import LOG_LEVELS, add_defaulted
from ..lifecycle.event_loop import run
from .runner import DemoConfig, DemoError, run_demo_async
from .scenario import MAX_GPUS, MAX_NODES, MIN_GPUS, MIN_NODES, build_cluster

__all__ = ["add_demo_arguments", "run_demo"]


def _between(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be {minimum} to {maximum}, got {value}")
        return value

    return parse


class _QuietDownNode(logging.Filter):
    """Drops the agent pool's reports about the node whose agent is down on purpose."""

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        return f"node {self.node} " not in record.getMessage()


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``gpugraph demo`` flags to ``parser``."""
    d = DemoConfig()
    add_defaulted(
        parser,
        d,
        "--nodes",
        f"GPU nodes in the simulated cluster, {MIN_NODES} to {MAX_NODES}; the last one's agent "
        "is down",
        type=_between(MIN_NODES, MAX_NODES),
        metavar="N",
    )
    add_defaulted(
        parser,
        d,
        "--gpus-per-node",
        f"GPUs on each node, {MIN_GPUS} to {MAX_GPUS}",
        type=_between(MIN_GPUS, MAX_GPUS),
        metavar="G",
    )
    parser.add_argument(
        "--listen",
        type=listen_address,
        default=(d.listen_host, d.listen_port),
        metavar="HOST:PORT",
        help="where to serve HTTP; port 0 picks a free one "
        f"(default {join_host_port(d.listen_host, d.listen_port)})",
    )
    add_defaulted(
        parser,
        d,
        "--interval",
        "seconds between changes of the fake GPUs, and between the agents' scans",
        type=scan_interval,
        metavar="SECONDS",
    )
    add_defaulted(
        parser,
        d,
        "--log-level",
        "log verbosity of the server and agents",
        type=str.lower,
        choices=LOG_LEVELS,
    )
    parser.add_argument(
        "--auth",
        action="store_true",
        default=d.auth,
        help="check callers as gpugraph serve --auth kubernetes does, against the "
        "embedded API server; prints a token of an admin and of a user who sees only "
        "the research namespace (default: open)",
    )
    add_defaulted(
        parser,
        d,
        "--allocation-nodes",
        "add the MIG mixed, time-sliced and DRA nodes, each with its fake kubelet",
        action=argparse.BooleanOptionalAction,
    )


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo until Ctrl-C or SIGTERM; returns the exit status."""
    host, port = args.listen
    config = DemoConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        listen_host=host,
        listen_port=port,
        interval=args.interval,
        log_level=args.log_level,
        auth=args.auth,
        allocation_nodes=args.allocation_nodes,
    )
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The banner says which node is down on purpose; its failures are news only at info.
    if not logging.getLogger().isEnabledFor(logging.INFO):
        down = build_cluster(config.nodes, config.gpus_per_node).down_node
        logging.getLogger(AgentPool.__module__).addFilter(_QuietDownNode(down))
    try:
        return run(run_demo_async(config))
    except DemoError as exc:
        print(f"gpugraph demo: {exc}", file=sys.stderr)
        return 1
