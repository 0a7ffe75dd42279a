"""Reaching node agents: discovery, the channel pool, backoff."""

from .backoff import Backoff
from .discovery import (
    AddressUnknownError,
    Discovery,
    NodeIpDiscovery,
    PodIpDiscovery,
    join_host_port,
)
from .pool import CHANNEL_OPTIONS, AgentClientLike, AgentPool, ClientFactory
from .token import TokenFile

__all__ = [
    "CHANNEL_OPTIONS",
    "AddressUnknownError",
    "AgentClientLike",
    "AgentPool",
    "Backoff",
    "ClientFactory",
    "Discovery",
    "NodeIpDiscovery",
    "PodIpDiscovery",
    "TokenFile",
    "join_host_port",
]
