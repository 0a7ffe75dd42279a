"""``gpugraph top``: the cluster's GPUs, pods and nodes in a terminal, from the GraphQL API.

Only argparse is imported here; httpx, rich and websockets load when the command runs,
so ``gpugraph --help`` and the other subcommands stay fast.
"""

from __future__ import annotations

import argparse

from .connection import DEFAULT_NAMESPACE

__all__ = ["add_top_arguments", "run_top"]

VIEWS = ("gpus", "pods", "nodes")
OUTPUTS = ("wide", "json", "yaml")  # and, without -o, the table
SORT_KEYS = ("name", "memory", "sm")


def add_top_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every ``gpugraph top`` flag to ``parser``."""
    parser.add_argument(
        "view",
        nargs="?",
        choices=VIEWS,
        default="gpus",
        help="a row per GPU (default), per pod, or per node",
    )
    filters = parser.add_argument_group("filters")
    filters.add_argument("-n", "--namespace", metavar="NS", help="only pods of this namespace")
    filters.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="pods of every namespace (the default without -n)",
    )
    filters.add_argument("--node", metavar="NAME", help="only this node")
    filters.add_argument(
        "-l", "--selector", metavar="LABELS", help="only pods matching this label selector"
    )
    filters.add_argument(
        "--sort-by",
        choices=SORT_KEYS,
        default="name",
        help="order by name (default), memory used or SM utilization, busiest first",
    )
    parser.add_argument("-o", "--output", choices=OUTPUTS, default=None, help="output format")
    parser.add_argument(
        "--since",
        metavar="DURATION",
        help="the past instead of now: pods (or, with top nodes, nodes) by GPU-hours over "
        "the last DURATION, e.g. 24h or 7d, from the agents' occupancy logs",
    )
    parser.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="follow the server's gpuUpdates subscription and redraw in place",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between --watch updates (default 2, at least 0.5)",
    )
    connection = parser.add_argument_group("connection")
    connection.add_argument(
        "--server", metavar="URL", help="the gpugraph server (default $GPUGRAPH_SERVER)"
    )
    connection.add_argument(
        "--token", metavar="TOKEN", help="bearer token (default $GPUGRAPH_TOKEN)"
    )
    connection.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="without --server: reach gpugraph through this kubeconfig's API server",
    )
    connection.add_argument(
        "--gpugraph-namespace",
        default=DEFAULT_NAMESPACE,
        metavar="NS",
        help=f"namespace of the gpugraph Service (default {DEFAULT_NAMESPACE})",
    )
    connection.add_argument(
        "--service",
        default=None,
        metavar="NAME",
        help="name of the gpugraph Service (default: the one with the chart's labels)",
    )
    parser.set_defaults(parser=parser)


def run_top(args: argparse.Namespace) -> int:
    """Run ``gpugraph top``; 0 on success, 1 with one line on stderr otherwise."""
    from .command import run

    return run(args)
