"""Errors a client is meant to see, and the rule for masking everything else."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from graphql import GraphQLError

from .interfaces import AgentUnavailableError


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


class NodeSampleError(GraphUserError):
    """The node's agent answered, but could not read its GPUs at all."""

    def __init__(self, node_name: str, reason: str) -> None:
        super().__init__(f"GPU sampling failed on node {node_name!r}: {reason}")


class GpuNotFoundError(GraphUserError):
    """A GPU UUID that no reachable agent reports, while some agents were unreachable."""

    def __init__(self, uuid: str, unreachable: Sequence[str]) -> None:
        names = ", ".join(sorted(unreachable))
        super().__init__(
            f"GPU {uuid!r} is not on any reachable node; agents unavailable on: {names}"
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
