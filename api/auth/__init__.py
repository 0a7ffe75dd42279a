"""Who may see what: Kubernetes TokenReview and SubjectAccessReview for every way in."""

from .access import AccessReviewer, Question
from .asgi import AuthMiddleware, authorization_param, bearer_token, caller_of
from .callers import Caller, KubernetesAuth, RejectedTokenError, kubernetes_auth
from .request_scope import request_scope
from .review_cache import ReviewCache
from .tokens import ReviewUnavailableError, TokenReviewer, UserInfo, token_hash

__all__ = [
    "AccessReviewer",
    "AuthMiddleware",
    "Caller",
    "KubernetesAuth",
    "Question",
    "RejectedTokenError",
    "ReviewCache",
    "ReviewUnavailableError",
    "TokenReviewer",
    "UserInfo",
    "authorization_param",
    "bearer_token",
    "caller_of",
    "kubernetes_auth",
    "request_scope",
    "token_hash",
]
