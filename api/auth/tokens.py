"""Authentication: a bearer token checked with a TokenReview (authentication.k8s.io/v1)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kubernetes.client import ApiClient, AuthenticationV1Api, V1TokenReview, V1TokenReviewSpec

from .review_cache import ReviewCache
from .review_pool import ReviewPool, ReviewUnavailableError, ThrottledWarning

__all__ = ["ReviewUnavailableError", "TokenReviewer", "UserInfo", "token_hash"]

log = logging.getLogger(__name__)
_failures = ThrottledWarning(log)

# How long a reviewed token's answer is trusted. Successes live longer than
# failures, so a token that starts to work (or a typo fixed) is not refused for long.
SUCCESS_TTL = 60.0
FAILURE_TTL = 10.0
# One review may take this long before the caller gets 503: short, since a
# review holds one of the few review threads (review_pool.py) until it ends.
REVIEW_TIMEOUT = 2.0
# Longer tokens are refused without a review: Kubernetes tokens (JWTs) are a
# few KiB, and a 64 MB one must not travel on to the API server.
MAX_TOKEN_LENGTH = 16 * 1024


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who a token belongs to, as the API server said: what SubjectAccessReviews are about."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


def token_hash(token: str) -> str:
    """The cache key of a token: its SHA-256, so the cache never holds a token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenReviewer:
    """Checks bearer tokens with TokenReviews through the ``kubernetes`` client, cached."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        audiences: Sequence[str] = (),
        success_ttl: float = SUCCESS_TTL,
        failure_ttl: float = FAILURE_TTL,
        cache: ReviewCache[UserInfo | None] | None = None,
        pool: ReviewPool | None = None,
    ) -> None:
        self.api = AuthenticationV1Api(api_client)
        self.pool = pool if pool is not None else ReviewPool()
        self.audiences = list(audiences)
        self.success_ttl = success_ttl
        self.failure_ttl = failure_ttl
        self.cache: ReviewCache[UserInfo | None] = cache if cache is not None else ReviewCache()

    async def review(self, token: str) -> UserInfo | None:
        """The token's user, or None when the API server rejects it.

        Raises ReviewUnavailableError when the API server cannot be asked.
        """
        key = token_hash(token)

        async def ask() -> tuple[UserInfo | None, float]:
            user = await self.pool.run(lambda: self._review(token, key))
            return user, (self.success_ttl if user is not None else self.failure_ttl)

        return await self.cache.get(key, ask)

    def _review(self, token: str, key: str) -> UserInfo | None:
        spec = V1TokenReviewSpec(token=token, audiences=self.audiences or None)
        try:
            answer = self.api.create_token_review(
                V1TokenReview(spec=spec), _request_timeout=REVIEW_TIMEOUT
            )
        except Exception as exc:
            # Only the hash's prefix is logged, never the token.
            _failures.warning("TokenReview for token sha256:%s… failed: %s", key[:8], _reason(exc))
            raise ReviewUnavailableError(_reason(exc)) from None
        status = answer.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        extra = tuple(sorted((k, tuple(v or ())) for k, v in (user.extra or {}).items()))
        return UserInfo(
            username=user.username or "",
            uid=user.uid or "",
            groups=tuple(user.groups or ()),
            extra=extra,
        )


def _reason(exc: Exception) -> str:
    """A one-line reason without response bodies (which could echo the request)."""
    status = getattr(exc, "status", None)
    if status:
        return f"the API server answered {status} {getattr(exc, 'reason', '')}".strip()
    return type(exc).__name__
