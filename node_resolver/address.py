"""``HOST:PORT`` addresses as gRPC writes them (IPv6 hosts in brackets), and the agent's port."""

from __future__ import annotations

import argparse

__all__ = ["AGENT_PORT", "METRICS_PORT", "join_host_port", "listen_address", "split_host_port"]

# The agent's gRPC port: its --listen default and the server's --agent-port default.
AGENT_PORT = 50051
# The port the chart serves each agent's /metrics on (--metrics-listen): beside
# dcgm-exporter's 9400 on the same nodes, not on it.
METRICS_PORT = 9402


def split_host_port(listen: str) -> tuple[str, int]:
    """Split "HOST:PORT" (IPv6 as "[::1]:PORT"; ":PORT" is every IPv4 address); else ValueError."""
    given = listen
    if listen.startswith(":"):
        listen = "0.0.0.0" + listen
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {given!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(
            f"write an IPv6 address in brackets, e.g. [::]:{AGENT_PORT}, got {given!r}"
        )
    return host, int(port)


def join_host_port(host: str, port: int) -> str:
    """``host:port``, bracketing IPv6 hosts (not already bracketed); inverse of split_host_port."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def listen_address(text: str) -> tuple[str, int]:
    """argparse type for a ``--listen`` HOST:PORT (as split_host_port reads it)."""
    try:
        return split_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
