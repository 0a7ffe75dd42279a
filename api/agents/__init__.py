"""Reaching node agents: discovery, the channel pool, backoff."""

from ..backoff import Backoff
from .discovery import (
    AddressUnknownError,
    Discovery,
    NodeIpDiscovery,
    PodIpDiscovery,
)
from .pool import CHANNEL_OPTIONS, AgentClientLike, AgentPool, ClientFactory

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
]
