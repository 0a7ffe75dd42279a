"""Where the Kubernetes API is: ``--kubeconfig``, else ``$KUBECONFIG``, else in-cluster, else
``~/.kube/config`` (kubectl's order, with the service account before the home directory)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import yaml
from kubernetes import config as kube_config
from kubernetes.client import Configuration
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)


class KubeConfigError(RuntimeError):
    """No way to reach the Kubernetes API could be configured."""


def default_kubeconfig_path(environ: Mapping[str, str] | None = None) -> str:
    """``$KUBECONFIG`` (its first entry) or ``~/.kube/config``."""
    env = os.environ if environ is None else environ
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return os.path.expanduser(paths[0] if paths else "~/.kube/config")


def load_kube_config(
    kubeconfig: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    token_file: str = SERVICE_TOKEN_FILENAME,
    cert_file: str = SERVICE_CERT_FILENAME,
) -> Configuration:
    """A client Configuration from ``kubeconfig`` if given, else ``$KUBECONFIG``, else
    in-cluster, else the default file.

    ``environ``, ``token_file`` and ``cert_file`` locate the in-cluster
    service account; they default to the real ones.
    """
    configuration = Configuration()
    env = os.environ if environ is None else environ
    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            raise KubeConfigError(f"--kubeconfig {kubeconfig}: no such file")
        _load(kubeconfig, configuration, f"--kubeconfig {kubeconfig}")
        return configuration
    # As kubectl: the first file $KUBECONFIG lists that exists (images set it to files
    # they may not have), else on.
    listed = [os.path.expanduser(p) for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    found = next((p for p in listed if os.path.isfile(p)), None)
    if found is not None:
        _load(found, configuration, f"$KUBECONFIG {found}")
        return configuration
    try:
        InClusterConfigLoader(
            token_filename=token_file, cert_filename=cert_file, environ=env
        ).load_and_set(configuration)
        return configuration
    except kube_config.ConfigException as exc:
        in_cluster_error = str(exc)

    default = default_kubeconfig_path({})
    if not os.path.isfile(default):
        raise KubeConfigError(
            "cannot reach the Kubernetes API: no --kubeconfig or $KUBECONFIG given, not running "
            "in a cluster "
            f"({in_cluster_error}), and no kubeconfig at {default}"
        )
    _load(default, configuration, f"kubeconfig {default}")
    return configuration


@contextlib.contextmanager
def logged_errors() -> Iterator[list[str]]:
    """The messages of errors logged while inside: the Kubernetes client logs a failed exec
    plugin or token refresh and goes on without credentials, where kubectl stops."""
    failures: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            failures.append(record.getMessage())

    root = logging.getLogger()
    handler = Collect(logging.ERROR)
    root.addHandler(handler)
    try:
        yield failures
    finally:
        root.removeHandler(handler)


def _load(path: str, configuration: Configuration, shown: str) -> None:
    """``configuration`` from the kubeconfig at ``path``; KubeConfigError naming ``shown``."""
    try:
        with open(path, encoding="utf-8") as file:
            document = yaml.safe_load(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        # YAML's errors point at the line over several lines: one is enough here.
        raise KubeConfigError(f"{shown}: {' '.join(str(exc).split())}") from exc
    if not isinstance(document, dict):
        # The client's own error for these is a TypeError about item assignment.
        raise KubeConfigError(
            f"{shown}: not a kubeconfig (a YAML mapping of clusters, users and contexts)"
        )
    with logged_errors() as failures:
        try:
            kube_config.load_kube_config(
                config_file=path, client_configuration=configuration, persist_config=False
            )
        except Exception as exc:
            raise KubeConfigError(f"{shown}: {exc}") from exc
    if failures:
        raise KubeConfigError(f"{shown}: the kubeconfig's user: {failures[0]}")
    parts = urlsplit(str(configuration.host))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The client would retry such a URL for ever without a word of why.
        raise KubeConfigError(
            f"{shown}: the cluster's server {configuration.host!r} is not an http(s) URL"
        )
