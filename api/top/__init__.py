"""``gpugraph top``: the cluster's GPUs, pods and nodes in a terminal, from the GraphQL API.

Only argparse is imported here (the flags live in ``flags``); httpx, rich and
websockets load when the command runs, so ``gpugraph --help`` and the other
subcommands stay fast.
"""

from __future__ import annotations

import argparse

from .flags import add_top_arguments

__all__ = ["add_top_arguments", "run_top"]


def run_top(args: argparse.Namespace) -> int:
    """Run ``gpugraph top``; 0 on success, 1 with one line on stderr otherwise."""
    from .command import run

    return run(args)
