"""Who is asking: what one caller may see, and how a long-lived operation re-checks it.

A ``Scope`` is plain data, decided elsewhere (the server asks the Kubernetes
API server); the graph only reads it. Two callers with equal scopes see the
same answers but for the fields that name the caller (``identity``), so shared
results are keyed by scope, and by caller where a document asks who it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from .errors import GraphUserError

__all__ = ["EVERYTHING", "AccessEndedError", "Scope", "Viewer"]


@dataclass(frozen=True, slots=True)
class Scope:
    """What a caller may see: pods by namespace, nodes, and command lines by namespace."""

    # ``list pods`` cluster-wide: every namespace, and processes in no pod.
    all_pods: bool = False
    pod_namespaces: frozenset[str] = frozenset()
    # ``list nodes``: every node and GPU, even those without the caller's pods.
    all_nodes: bool = False
    # ``create pods/exec`` cluster-wide, or in these namespaces: command lines.
    exec_all: bool = False
    exec_namespaces: frozenset[str] = frozenset()

    @property
    def unrestricted(self) -> bool:
        """Whether this scope sees everything (the graph's objects need no filtering)."""
        return self.all_pods and self.all_nodes and self.exec_all

    def sees_namespace(self, namespace: str) -> bool:
        """Whether pods of ``namespace`` are visible."""
        return self.all_pods or namespace in self.pod_namespaces

    def sees_cmdline(self, namespace: str | None) -> bool:
        """Whether command lines of processes in ``namespace`` (None: in no pod) are visible."""
        if self.exec_all:
            return True
        return namespace is not None and namespace in self.exec_namespaces


EVERYTHING = Scope(all_pods=True, all_nodes=True, exec_all=True)


class AccessEndedError(GraphUserError):
    """The caller's credentials no longer pass (e.g. a revoked token mid-subscription)."""

    extensions: ClassVar[dict[str, str]] = {"code": "UNAUTHENTICATED"}


class Viewer(Protocol):
    """The caller behind an operation, as the server authenticated it."""

    @property
    def username(self) -> str:
        """The caller's Kubernetes username, from its TokenReview: what per-caller caps count by."""
        ...

    async def current_scope(self) -> Scope:
        """The caller's scope now: re-checked once its reviews expire.

        Raises AccessEndedError when the caller no longer passes, and
        GraphUserError when the check cannot be made (never fail open).
        """
        ...
