"""Errors a client is meant to see, and the rule for masking everything else."""

from __future__ import annotations

from graphql import GraphQLError

from .interfaces import AgentUnavailableError


class GraphUserError(Exception):
    """A problem with the request itself, reported to the client as is."""


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
