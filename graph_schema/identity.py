"""Who is asking, as the server authenticated the caller: the ``viewer`` root field.

Everything else in the graph depends only on what the caller may see (its
``Scope``), so callers of equal rights may share one execution's answer. The
fields declared here depend on who asks: a document selecting one is answered
for its caller alone.
"""

from __future__ import annotations

import re

import strawberry

from .scope import Viewer

__all__ = ["PER_CALLER_FIELDS", "Identity", "asks_who", "identity_of"]

# Root fields whose answer names the caller (graphql-core's names, as a document
# writes them). Answers to documents selecting one are never shared between callers.
PER_CALLER_FIELDS = frozenset({"viewer"})

# A GraphQL name is [_A-Za-z][_0-9A-Za-z]*: one of the names above, not part of a longer one.
_PER_CALLER_NAME = re.compile(
    r"(?<![_0-9A-Za-z])(?:" + "|".join(sorted(PER_CALLER_FIELDS)) + r")(?![_0-9A-Za-z])"
)


def asks_who(document: str) -> bool:
    """Whether ``document`` may select a field whose answer depends on who asks.

    GraphQL names have no escapes, so a field is selected only where its name is
    written out (in an aliased field or a fragment too). A document that merely
    mentions the name (in a comment or a string) counts as selecting it: that costs
    it only its sharing, and reading the text needs no parse.
    """
    return _PER_CALLER_NAME.search(document) is not None


def identity_of(viewer: Viewer | None) -> str | None:
    """Who the caller is, all that per-caller fields answer from; None without authentication."""
    return None if viewer is None else viewer.username


@strawberry.type(
    description="The caller of this operation, as the server authenticated it (a "
    "Kubernetes TokenReview). Says only who the caller is, never what others may see."
)
class Identity:
    username: str | None = strawberry.field(
        description="The caller's Kubernetes username, as the TokenReview named it; null "
        "when the server checks no tokens (started with --auth none)."
    )
