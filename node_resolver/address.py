"""``HOST:PORT`` addresses as gRPC writes them: IPv6 hosts go in brackets."""

from __future__ import annotations

__all__ = ["join_host_port", "split_host_port"]


def split_host_port(listen: str) -> tuple[str, int]:
    """Split "HOST:PORT" (IPv6 as "[::1]:PORT"); ValueError on anything else."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, e.g. [::]:50051, got {listen!r}")
    return host, int(port)


def join_host_port(host: str, port: int) -> str:
    """``host:port``, bracketing IPv6 hosts (not already bracketed); inverse of split_host_port."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"
