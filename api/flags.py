"""Command-line value types shared by ``gpugraph serve`` and ``gpugraph demo``."""

from __future__ import annotations

import argparse

from .settings import parse_listen

__all__ = ["LOG_LEVELS", "listen_address"]

# For ``--log-level`` with ``type=str.lower``, so DEBUG and debug both work.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def listen_address(text: str) -> tuple[str, int]:
    """argparse type for HOST:PORT."""
    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
