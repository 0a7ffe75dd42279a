"""Command-line value types shared by ``gpugraph serve`` and ``gpugraph demo``."""

from __future__ import annotations

import argparse

from node_resolver.address import split_host_port

__all__ = ["LOG_LEVELS", "listen_address", "parse_listen"]

# For ``--log-level`` with ``type=str.lower``, so DEBUG and debug both work.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (IPv6 hosts in brackets; ``:PORT`` means every IPv4 address)."""
    return split_host_port(f"0.0.0.0{value}" if value.startswith(":") else value)


def listen_address(text: str) -> tuple[str, int]:
    """argparse type for HOST:PORT."""
    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
