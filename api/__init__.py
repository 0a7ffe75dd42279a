"""gpugraph's GraphQL server: the HTTP app, Kubernetes cache and agent wiring."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agents import AgentPool
    from .app import create_app
    from .settings import Settings

__all__ = ["AgentPool", "Settings", "create_app"]

# Loaded on first use, so that `gpugraph agent` (which enters through this
# package) does not import the GraphQL stack it never uses.
_EXPORTS = {"AgentPool": ".agents", "Settings": ".settings", "create_app": ".app"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
