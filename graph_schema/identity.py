"""Who is asking, as the server authenticated the caller: the ``viewer`` root field."""

from __future__ import annotations

import strawberry

__all__ = ["Identity"]


@strawberry.type(
    description="The caller of this operation, as the server authenticated it (a "
    "Kubernetes TokenReview). Says only who the caller is, never what others may see."
)
class Identity:
    username: str | None = strawberry.field(
        description="The caller's Kubernetes username, as the TokenReview named it; null "
        "when the server checks no tokens (started with --auth none)."
    )
