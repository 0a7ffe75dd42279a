"""How clients find a stub API server: a client Configuration or a kubeconfig file."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client import Configuration

__all__ = ["kubeconfig_for", "write_kubeconfig"]


def kubeconfig_for(url: str, token: str | None = None) -> Configuration:
    """A client Configuration for the API server at ``url``."""
    configuration = Configuration()
    configuration.host = url
    if token:
        configuration.api_key = {"BearerToken": f"Bearer {token}"}
    return configuration


def write_kubeconfig(path: str, url: str, token: str | None = None) -> str:
    """Write a kubeconfig file for ``url`` (JSON, which is valid YAML); returns ``path``."""
    user: dict[str, Any] = {"token": token} if token else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stub", "cluster": {"server": url}}],
        "users": [{"name": "stub", "user": user}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
        "current-context": "stub",
    }
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return path
