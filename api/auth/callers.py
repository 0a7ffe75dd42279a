"""From a bearer token to a Caller: who it is and the Scope of what it may see."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kubernetes.client import ApiClient, Configuration

from graph_schema.errors import GraphUserError
from graph_schema.interfaces import Cluster
from graph_schema.scope import AccessEndedError, Scope

from .access import LIST_NODES, AccessReviewer, Question
from .review_cache import ReviewCache
from .review_pool import REVIEW_WORKERS, ReviewPool
from .tokens import MAX_TOKEN_LENGTH, SUCCESS_TTL, ReviewUnavailableError, TokenReviewer, UserInfo

# Half the review pool's workers: room is left for other callers' reviews.
NAMESPACE_REVIEWS_AT_ONCE = REVIEW_WORKERS // 2

__all__ = [
    "AuthUnavailableError",
    "Caller",
    "KubernetesAuth",
    "RejectedTokenError",
    "kubernetes_auth",
]


class RejectedTokenError(Exception):
    """No token, or one the API server does not accept: 401."""


class AuthUnavailableError(GraphUserError):
    """The caller could not be re-checked because the API server cannot be asked."""

    def __init__(self) -> None:
        super().__init__("the Kubernetes API server cannot check credentials right now")


class KubernetesAuth:
    """Authenticates tokens and works out scopes by asking the Kubernetes API server."""

    def __init__(
        self,
        tokens: TokenReviewer,
        access: AccessReviewer,
        cluster: Cluster,
        *,
        scope_ttl: float = SUCCESS_TTL,
    ) -> None:
        self.tokens = tokens
        self.access = access
        self.cluster = cluster
        self.scope_ttl = scope_ttl
        self._scopes: ReviewCache[Scope] = ReviewCache()

    async def authenticate(self, token: str) -> Caller:
        """The token's caller; RejectedTokenError (401) or ReviewUnavailableError (503)."""
        if not token:
            raise RejectedTokenError("no bearer token")
        if len(token) > MAX_TOKEN_LENGTH:
            raise RejectedTokenError(f"the token is longer than {MAX_TOKEN_LENGTH} characters")
        user = await self.tokens.review(token)
        if user is None:
            raise RejectedTokenError("the token was not accepted")
        return Caller(user, await self.scope(user), self, token)

    async def scope(self, user: UserInfo) -> Scope:
        """What ``user`` may see, from cached SubjectAccessReviews."""
        return await self._scopes.get(user, lambda: self._work_out_scope(user))

    async def may(self, user: UserInfo, question: Question) -> bool:
        """One question about ``user`` (e.g. ``get /metrics``)."""
        return await self.access.allowed(user, question)

    async def _work_out_scope(self, user: UserInfo) -> tuple[Scope, float]:
        ask = self.access.allowed
        all_pods, all_nodes, exec_all = await asyncio.gather(
            ask(user, Question.list_pods()), ask(user, LIST_NODES), ask(user, Question.exec_pods())
        )
        # The namespaces that have pods now; one that gains its first pod is
        # asked about when this scope expires.
        known = {p.namespace for p in self.cluster.pods()} if not (all_pods and exec_all) else set()
        namespaces = (
            frozenset() if all_pods else await self._allowed_in(user, Question.list_pods, known)
        )
        # Command lines matter only where the caller sees pods.
        exec_in = known if all_pods else namespaces
        exec_namespaces = (
            frozenset() if exec_all else await self._allowed_in(user, Question.exec_pods, exec_in)
        )
        scope = Scope(
            all_pods=all_pods,
            pod_namespaces=namespaces,
            all_nodes=all_nodes,
            exec_all=exec_all,
            exec_namespaces=exec_namespaces,
        )
        return scope, self.scope_ttl

    async def _allowed_in(
        self, user: UserInfo, question: Callable[[str], Question], namespaces: Iterable[str]
    ) -> frozenset[str]:
        """The namespaces among ``namespaces`` where ``user`` may do ``question(namespace)``."""
        ordered = sorted(namespaces)
        # One caller's per-namespace questions must not fill the bounded review pool by
        # themselves (it answers 503 when full), however many namespaces the cluster has.
        gate = asyncio.Semaphore(NAMESPACE_REVIEWS_AT_ONCE)

        async def ask(namespace: str) -> bool:
            async with gate:
                return await self.access.allowed(user, question(namespace))

        answers = await asyncio.gather(*(ask(n) for n in ordered))
        return frozenset(n for n, ok in zip(ordered, answers, strict=True) if ok)


@dataclass(slots=True)
class Caller:
    """An authenticated caller: a Viewer for the graph, re-checked as its reviews expire."""

    user: UserInfo
    scope: Scope
    auth: KubernetesAuth = field(repr=False)
    # Kept to re-review it; never logged or shown (repr=False).
    token: str = field(repr=False)

    @property
    def username(self) -> str:
        """The Kubernetes username the TokenReview gave the token; per-caller caps count by it."""
        return self.user.username

    async def current_scope(self) -> Scope:
        """The scope now; AccessEndedError once the token no longer passes."""
        try:
            user = await self.auth.tokens.review(self.token)
            if user is None:
                raise AccessEndedError("the token is no longer accepted")
            self.user = user
            self.scope = await self.auth.scope(user)
        except ReviewUnavailableError:
            raise AuthUnavailableError from None
        return self.scope


def kubernetes_auth(
    configuration: Configuration,
    cluster: Cluster,
    *,
    audiences: tuple[str, ...] = (),
    ttl: float = SUCCESS_TTL,
) -> KubernetesAuth:
    """Token and access reviews against the API server ``configuration`` points at.

    Passed reviews are trusted for ``ttl`` seconds, failed ones for a sixth of it.
    Both kinds share one bounded ReviewPool, without retries.
    """
    # Reviews are not retried: the caller gets 503 and asks again, instead of
    # holding a review thread through the retries.
    reviews = copy.copy(configuration)
    reviews.retries = False
    client = ApiClient(reviews)
    pool = ReviewPool()
    return KubernetesAuth(
        TokenReviewer(client, audiences=audiences, success_ttl=ttl, failure_ttl=ttl / 6, pool=pool),
        AccessReviewer(client, allowed_ttl=ttl, denied_ttl=ttl / 6, pool=pool),
        cluster,
        scope_ttl=ttl,
    )
