"""Authorization: SubjectAccessReviews (authorization.k8s.io/v1) about a reviewed user."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from kubernetes.client import (
    ApiClient,
    AuthorizationV1Api,
    V1NonResourceAttributes,
    V1ResourceAttributes,
    V1SubjectAccessReview,
    V1SubjectAccessReviewSpec,
)

from .review_cache import ReviewCache
from .review_pool import ReviewPool, ThrottledWarning
from .tokens import FAILURE_TTL, REVIEW_TIMEOUT, SUCCESS_TTL, ReviewUnavailableError, UserInfo

__all__ = [
    "EXEC_PODS",
    "GET_METRICS",
    "LIST_NODES",
    "LIST_PODS",
    "NAMESPACED",
    "QUESTIONS",
    "AccessReviewer",
    "Question",
    "declared",
]

log = logging.getLogger(__name__)
_failures = ThrottledWarning(log)


@dataclass(frozen=True, slots=True)
class Question:
    """One thing a user may or may not do: a verb on a resource, or on a non-resource URL."""

    verb: str
    resource: str = ""
    subresource: str = ""
    namespace: str = ""  # "" asks cluster-wide
    path: str = ""  # a non-resource URL such as /metrics

    def in_namespace(self, namespace: str) -> Question:
        """This question about ``namespace`` ("" for every namespace)."""
        return replace(self, namespace=namespace)

    @classmethod
    def list_pods(cls, namespace: str = "") -> Question:
        """``list pods`` in ``namespace`` ("" for every namespace)."""
        return LIST_PODS.in_namespace(namespace)

    @classmethod
    def exec_pods(cls, namespace: str = "") -> Question:
        """``create pods/exec`` in ``namespace`` ("" for every namespace)."""
        return EXEC_PODS.in_namespace(namespace)

    @classmethod
    def get_url(cls, path: str) -> Question:
        """``get`` on a non-resource URL, as kube-rbac-proxy checks ``/metrics``."""
        return cls("get", path=path)


# Every question the server asks the API server about a caller, declared once:
# the chart's roles (gpugraph-viewer, gpugraph-namespace-viewer, the metrics
# reader) grant exactly these, and a chart test reads this table.
LIST_PODS = Question("list", "pods")
LIST_NODES = Question("list", "nodes")
EXEC_PODS = Question("create", "pods", "exec")
GET_METRICS = Question("get", path="/metrics")
QUESTIONS: Mapping[Question, str] = {
    LIST_PODS: "a namespace's pods and their GPU processes (cluster-wide: every namespace, "
    "and processes in no pod)",
    LIST_NODES: "every node and GPU (without it: those running one of the caller's pods)",
    EXEC_PODS: "command lines of the pods' processes (only sent by agents run with "
    "--expose-cmdline)",
    GET_METRICS: "the /metrics endpoint: every namespace's GPU series",
}
# The questions also asked about one namespace at a time.
NAMESPACED = frozenset({LIST_PODS, EXEC_PODS})


def declared(question: Question) -> bool:
    """Whether ``question`` is one of QUESTIONS, cluster-wide or in a namespace it may name."""
    general = question.in_namespace("")
    return general in QUESTIONS and (not question.namespace or general in NAMESPACED)


class AccessReviewer:
    """Asks SubjectAccessReviews through the ``kubernetes`` client, cached per user and question."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        allowed_ttl: float = SUCCESS_TTL,
        denied_ttl: float = FAILURE_TTL,
        cache: ReviewCache[bool] | None = None,
        pool: ReviewPool | None = None,
    ) -> None:
        self.api = AuthorizationV1Api(api_client)
        self.pool = pool if pool is not None else ReviewPool()
        self.allowed_ttl = allowed_ttl
        self.denied_ttl = denied_ttl
        self.cache: ReviewCache[bool] = cache if cache is not None else ReviewCache()

    async def allowed(self, user: UserInfo, question: Question) -> bool:
        """Whether ``user`` may do ``question``; ReviewUnavailableError if it cannot be asked."""
        if not declared(question):
            # The chart's roles are built from QUESTIONS: a question missing there
            # would be denied to every viewer, however the cluster grants it.
            raise ValueError(f"{question} is not declared in QUESTIONS")

        async def ask() -> tuple[bool, float]:
            allowed = await self.pool.run(lambda: self._review(user, question))
            return allowed, (self.allowed_ttl if allowed else self.denied_ttl)

        return await self.cache.get((user, question), ask)

    def _review(self, user: UserInfo, question: Question) -> bool:
        spec = V1SubjectAccessReviewSpec(
            user=user.username,
            uid=user.uid or None,
            groups=list(user.groups) or None,
            extra={k: list(v) for k, v in user.extra} or None,
        )
        if question.path:
            spec.non_resource_attributes = V1NonResourceAttributes(
                path=question.path, verb=question.verb
            )
        else:
            spec.resource_attributes = V1ResourceAttributes(
                verb=question.verb,
                resource=question.resource,
                subresource=question.subresource or None,
                namespace=question.namespace or None,
                group="",
            )
        try:
            answer = self.api.create_subject_access_review(
                V1SubjectAccessReview(spec=spec), _request_timeout=REVIEW_TIMEOUT
            )
        except Exception as exc:
            status = getattr(exc, "status", None)
            reason = f"the API server answered {status}" if status else type(exc).__name__
            _failures.warning("SubjectAccessReview for %r failed: %s", user.username, reason)
            raise ReviewUnavailableError(reason) from None
        return bool(answer.status is not None and answer.status.allowed)
