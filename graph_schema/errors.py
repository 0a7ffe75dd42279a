"""Errors a client is meant to see, and the rule for masking everything else."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from graphql import GraphQLError

from .interfaces import AgentUnavailableError, ClusterView


class GraphUserError(Exception):
    """A problem with the request itself, reported to the client as is."""


class NotReadyError(GraphUserError):
    """The Kubernetes cache has not filled yet, so no answer would be complete."""

    # graphql-core copies an original error's ``extensions`` into the response.
    extensions: ClassVar[dict[str, str]] = {"code": "NOT_READY"}

    def __init__(self) -> None:
        super().__init__(
            "the server is still loading the cluster's pods and nodes; try again shortly"
        )


class ResultBudgetError(GraphUserError):
    """The operation asked for more result objects than the server allows."""

    extensions: ClassVar[dict[str, str]] = {"code": "RESULT_TOO_LARGE"}

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the query asks for more than {limit} result objects, the server's limit; "
            "narrow it with arguments such as namespace or nodeName, or use fewer aliases"
        )


class RequestTimeoutError(GraphUserError):
    """An operation ran past the server's time limit."""

    extensions: ClassVar[dict[str, str]] = {"code": "REQUEST_TIMEOUT"}

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request exceeded the server's {seconds:g} s time limit")


class BadUserInputError(GraphUserError):
    """An argument's value that is not one the field takes (e.g. a forged cursor)."""

    extensions: ClassVar[dict[str, str]] = {"code": "BAD_USER_INPUT"}


class NodeSampleError(GraphUserError):
    """The node's agent answered, but could not read its GPUs at all."""

    def __init__(self, node_name: str, reason: str) -> None:
        super().__init__(f"GPU sampling failed on node {node_name!r}: {reason}")


class NodeNotFoundError(GraphUserError):
    """A node name the caller asked for that is not in the cluster, or not one it may see.

    Both answer the same, so the error tells a caller nothing about nodes it may
    not see; an empty list instead would make a typo look like an idle node.
    """

    extensions: ClassVar[dict[str, str]] = {"code": "NOT_FOUND"}

    def __init__(self, node_name: str) -> None:
        super().__init__(f"no node named {node_name!r} among the nodes you may see")


# The most of a client's own value an error message repeats.
QUOTED_CHARACTERS = 100


def quoted(value: str) -> str:
    """``value`` quoted for an error message, cut short: echoed whole, a client's long input
    would make its error as large as its request."""
    if len(value) > QUOTED_CHARACTERS:
        return repr(value[:QUOTED_CHARACTERS]) + f" (cut from {len(value)} characters)"
    return repr(value)


# A longer or empty filter names nothing, and is refused rather than answered empty (or
# sent to every agent, which refuse an empty one, and whose message limit refuses a long
# one, as if each agent had failed).
NAME_LIMITS = {"namespace": 63, "podName": 253, "name": 253}


def check_name(argument: str, value: str | None) -> None:
    """BadUserInputError when the filter argument ``argument``'s ``value`` is empty or past
    its limit."""
    limit = NAME_LIMITS[argument]
    if value is not None and not 0 < len(value) <= limit:
        raise BadUserInputError(f"{argument} is 1 to {limit} characters, as in Kubernetes")


def named_nodes(cluster: ClusterView, node_name: str | None) -> list[str]:
    """Every node the caller may see, or just ``node_name``: NodeNotFoundError where the
    caller may not see it or no node has it (both answer alike)."""
    if node_name is None:
        return [n.name for n in cluster.nodes()]
    if cluster.node(node_name) is None:
        raise NodeNotFoundError(node_name)
    return [node_name]


def history_nodes(cluster: ClusterView, node_name: str | None) -> list[str]:
    """The nodes a history read asks: just ``node_name``, checked as ``named_nodes`` checks
    it, or every node whose log may hold the caller's records (those it no longer sees too)."""
    if node_name is None:
        return cluster.history_nodes()
    return named_nodes(cluster, node_name)


def require_ready(cluster: ClusterView) -> None:
    """NotReadyError until the cache has filled: an entry point's first check."""
    if not cluster.ready:
        raise NotReadyError


class GpuNotFoundError(GraphUserError):
    """A GPU UUID that no reachable agent reports, while some agents were unreachable."""

    def __init__(self, uuid: str, unreachable: Sequence[str]) -> None:
        names = ", ".join(sorted(unreachable))
        super().__init__(
            f"GPU {quoted(uuid)} is not on any reachable node; agents unavailable on: {names}"
        )


# Exceptions whose message is written for clients; anything else raised by a
# resolver is a bug or an internal failure and is masked.
USER_FACING: tuple[type[BaseException], ...] = (
    GraphUserError,
    AgentUnavailableError,
    GraphQLError,
)


def is_internal(error: GraphQLError) -> bool:
    """True for errors whose message must not reach the client."""
    original = error.original_error
    # Parse and validation errors carry no original exception.
    if original is None:
        return False
    return not isinstance(original, USER_FACING)


def in_response_order(data: Any, errors: Sequence[GraphQLError]) -> list[GraphQLError]:
    """``errors`` sorted by where their path points in ``data``: the order of the response.

    graphql-core records errors as they happen, so concurrent fields (one per
    node's agent) report in whatever order their awaits finish. Sorting by the
    response's own order makes the list deterministic, and the same however the
    operation was executed. Errors without a path (none in practice) go last;
    the sort is stable, so errors at one path keep their order.
    """

    def position(error: GraphQLError) -> tuple[int, ...]:
        path = error.path
        if not path:
            return (1,)
        positions = [0]
        node: Any = data
        for key in path:
            if isinstance(key, int):
                positions.append(key)
                node = node[key] if isinstance(node, list) and 0 <= key < len(node) else None
            elif isinstance(node, dict):
                keys = list(node)
                positions.append(keys.index(key) if key in node else len(keys))
                node = node.get(key)
            else:
                positions.append(0)
                node = None
        return tuple(positions)

    return sorted(errors, key=position)


def forget_tracebacks(errors: Iterable[BaseException]) -> None:
    """Drop the tracebacks of ``errors`` and of the exceptions behind them, once logged.

    A traceback holds every frame its exception passed through, and those hold
    the operation (its context, loaders and errors list) that holds the
    exception: a reference cycle that only the cyclic collector frees, and the
    server runs it rarely (``api/lifecycle/gc_tuning.py``), so every failing
    query would leave its frames behind until then. Responses never show a
    traceback; the log has written it by the time an operation ends.
    """
    pending = list(errors)
    seen: set[int] = set()
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        error.__traceback__ = None
        original = getattr(error, "original_error", None)
        for behind in (original, error.__cause__, error.__context__):
            if isinstance(behind, BaseException):
                pending.append(behind)
