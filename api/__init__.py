"""gpugraph's GraphQL server: the HTTP app, Kubernetes cache and agent wiring."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .agents import AgentPool
    from .app import create_app
    from .settings import Settings

__all__ = ["AgentPool", "Settings", "create_app"]

# Loaded on first use, so that `gpugraph agent` (which enters through this
# package) does not import the GraphQL stack it never uses.
_EXPORTS = {"AgentPool": ".agents", "Settings": ".settings", "create_app": ".app"}


__getattr__ = lazy_exports(globals(), _EXPORTS)
