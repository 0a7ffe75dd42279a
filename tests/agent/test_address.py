"""``HOST:PORT`` as every ``--listen`` reads it, and the agent's one port."""

from __future__ import annotations

import argparse

import pytest

from node_resolver.address import AGENT_PORT, join_host_port, listen_address, split_host_port
from node_resolver.cli import DEFAULT_LISTEN


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:50051", ("::1", 50051)),
        ("[::]:1", ("::", 1)),
        ("node-a.agents:65535", ("node-a.agents", 65535)),
        (":9000", ("0.0.0.0", 9000)),  # every IPv4 address
    ],
)
def test_split_host_port(text: str, expected: tuple[str, int]) -> None:
    assert split_host_port(text) == expected
    assert listen_address(text) == expected


@pytest.mark.parametrize("text", ["nope", "host:", ":", "host:65536", "host:-1", "::1:80", "h:x"])
def test_what_is_not_host_port_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"HOST:PORT|brackets") as refused:
        split_host_port(text)
    # What was typed, not what ":PORT" is read as.
    assert str(refused.value).endswith(f"got {text!r}")
    with pytest.raises(argparse.ArgumentTypeError):
        listen_address(text)


@pytest.mark.parametrize("text", ["10.0.0.1:50051", "[fd00::1]:50051", "[::]:0"])
def test_join_is_the_inverse_of_split(text: str) -> None:
    assert join_host_port(*split_host_port(text)) == text


def test_the_agent_listens_on_the_port_the_server_looks_for() -> None:
    from api.agents.discovery import NodeIpDiscovery, PodIpDiscovery
    from api.settings import Settings
    from tests.support.graph import MemoryCluster

    assert split_host_port(DEFAULT_LISTEN) == ("0.0.0.0", AGENT_PORT)
    assert Settings().agent_port == AGENT_PORT
    assert NodeIpDiscovery(MemoryCluster()).port == AGENT_PORT
    assert PodIpDiscovery(MemoryCluster(), "ns", "app=agent").port == AGENT_PORT


def test_the_agent_reads_listen_as_the_server_does() -> None:
    from node_resolver.cli import add_agent_arguments

    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    # Written out in full for gRPC, which is handed the string.
    assert parser.parse_args(["--listen", ":0"]).listen == "0.0.0.0:0"
    assert parser.parse_args(["--listen", "[::]:7"]).listen == "[::]:7"
    assert parser.parse_args([]).listen == DEFAULT_LISTEN
