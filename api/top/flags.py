"""``gpugraph top``'s flags and their defaults, each declared once.

Only argparse is imported: ``gpugraph --help`` loads this module for every
subcommand's usage, and must not pay for httpx, rich or websockets.
"""

from __future__ import annotations

import argparse
import math

from .connection import DEFAULT_MAX_ANSWER_MIB, DEFAULT_NAMESPACE, DEFAULT_REQUEST_TIMEOUT
from .marks import EVENT_HOURS, legend

__all__ = [
    "DEFAULT_INTERVAL",
    "MIN_INTERVAL",
    "OUTPUTS",
    "SORT_KEYS",
    "VIEWS",
    "add_top_arguments",
    "interval",
    "positive",
]

VIEWS = ("gpus", "pods", "nodes", "namespaces")
DEFAULT_VIEW = VIEWS[0]
OUTPUTS = ("wide", "json", "yaml")  # and, without -o, the table
SORT_KEYS = ("name", "memory", "sm")
DEFAULT_SORT = SORT_KEYS[0]
DEFAULT_INTERVAL = 2.0
# The server's shortest subscription tick (graph_schema.limits.MIN_INTERVAL_SECONDS,
# pinned equal by a test): the server would raise a shorter one without a word.
MIN_INTERVAL = 0.5


def interval(text: str) -> float:
    """An ``--interval`` in seconds; shorter than the server's shortest tick is refused."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    if seconds < MIN_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"{text} is too short: the server ticks at most every {MIN_INTERVAL:g} s"
        )
    return seconds


def positive(text: str) -> float:
    """A number above zero (``--request-timeout`` seconds, ``--max-answer`` MiB), at most
    ``MAX_POSITIVE``: larger ones overflow where they become bytes or deadlines."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text} is not a number above zero")
    if value > MAX_POSITIVE:
        raise argparse.ArgumentTypeError(f"{text} is more than {MAX_POSITIVE:g}")
    return value


# A day of seconds, or 84 GiB of answer: more than either flag ever needs.
MAX_POSITIVE = 86_400.0


def add_top_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every ``gpugraph top`` flag to ``parser``, and the flags' legend to its help."""
    # The legend's lines are laid out already: argparse must not re-wrap them.
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = legend()
    parser.add_argument(
        "view",
        nargs="?",
        choices=VIEWS,
        default=DEFAULT_VIEW,
        help="a row per GPU (default), per pod, per node, or per namespace (its pods summed)",
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
        # None: not given, so the views that have one order can refuse another (--since).
        default=None,
        help="order by name (default), memory used or SM utilization, busiest first",
    )
    parser.add_argument("-o", "--output", choices=OUTPUTS, default=None, help="output format")
    parser.add_argument(
        "--since",
        metavar="DURATION",
        help="the past instead of now: pods (or, with top nodes or top namespaces, nodes or "
        "namespaces) by GPU-hours over the last DURATION, e.g. 24h or 7d, from the agents' "
        "occupancy logs; with --events, the events of the last DURATION",
    )
    parser.add_argument(
        "--events",
        action="store_true",
        help="list GPU health events (XIDs, ECC errors, GPUs lost), newest first, with the "
        "process the driver blamed and the pods on the GPU; of the last "
        f"{EVENT_HOURS}h unless --since says",
    )
    parser.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="follow the server's gpuUpdates subscription: redraw in place on a terminal, "
        "else print one frame per update",
    )
    parser.add_argument(
        "--interval",
        type=interval,
        default=DEFAULT_INTERVAL,
        metavar="S",
        help=f"seconds between --watch updates (default {DEFAULT_INTERVAL:g}, "
        f"at least {MIN_INTERVAL:g})",
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
    connection.add_argument(
        "--request-timeout",
        type=positive,
        default=DEFAULT_REQUEST_TIMEOUT,
        metavar="S",
        help="give up on a request, or on a WebSocket's handshake, after S seconds in all "
        f"(default {DEFAULT_REQUEST_TIMEOUT:g})",
    )
    connection.add_argument(
        "--max-answer",
        type=positive,
        default=DEFAULT_MAX_ANSWER_MIB,
        metavar="MIB",
        help="stop reading an answer (or a --watch update) larger than MIB mebibytes "
        f"(default {DEFAULT_MAX_ANSWER_MIB})",
    )
