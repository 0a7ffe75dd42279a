"""TokenReview and SubjectAccessReview over a small static table of users.

``POST /apis/authentication.k8s.io/v1/tokenreviews`` and
``POST /apis/authorization.k8s.io/v1/subjectaccessreviews`` answer in the
real wire format, so the ``kubernetes`` client's AuthenticationV1Api and
AuthorizationV1Api talk to them unchanged. Tokens are random per server, so
no credential is ever fixed in code.
"""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .status import status

__all__ = ["DEMO_USERS", "Rule", "StubUser", "TokenReviews", "new_token"]

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def new_token(make: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> str:
    """A random bearer token that, like a real service account's, does not begin with "-"."""
    while (token := make()).startswith("-"):
        pass
    return token


@dataclass(frozen=True, slots=True)
class Rule:
    """An RBAC-like rule: verbs on resources (``pods/exec`` for a subresource) or URLs."""

    verbs: frozenset[str]
    resources: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()  # empty: every namespace (a ClusterRoleBinding)
    urls: frozenset[str] = frozenset()

    def allows(self, attributes: Mapping[str, Any], non_resource: bool) -> bool:
        """Whether this rule allows the review's resource or non-resource attributes."""
        if attributes.get("verb") not in self.verbs and "*" not in self.verbs:
            return False
        if non_resource:
            return attributes.get("path") in self.urls
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource = f"{resource}/{attributes['subresource']}"
        if resource not in self.resources:
            return False
        if not self.namespaces:
            return True
        # A namespaced grant never answers a cluster-wide question.
        return attributes.get("namespace", "") in self.namespaces


@dataclass(frozen=True, slots=True)
class StubUser:
    """One user of the table: its identity and what it may do."""

    username: str
    uid: str
    groups: tuple[str, ...]
    rules: tuple[Rule, ...]
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


READ = frozenset({"get", "list", "watch"})
DEMO_USERS = (
    StubUser(
        "admin",
        "uid-admin",
        ("system:masters", "system:authenticated"),
        (
            Rule(
                frozenset({"*"}),
                frozenset({"pods", "nodes", "pods/exec", "services", "services/proxy"}),
            ),
            Rule(frozenset({"get"}), urls=frozenset({"/metrics"})),
        ),
    ),
    StubUser(
        "research-user",
        "uid-research",
        ("research", "system:authenticated"),
        (
            Rule(READ, frozenset({"pods"}), frozenset({"research"})),
            # What `gpugraph top` needs to reach the server through the API server.
            Rule(
                frozenset({"get", "list", "create"}),
                frozenset({"services", "services/proxy"}),
                frozenset({"gpugraph"}),
            ),
        ),
        extra={"scopes.example.com/team": ("research",)},
    ),
)


class TokenReviews:
    """The table of users, their tokens and the review endpoints' answers."""

    def __init__(self, users: Iterable[StubUser] = DEMO_USERS) -> None:
        self._lock = threading.Lock()
        self.users: dict[str, StubUser] = {u.username: u for u in users}
        self._tokens: dict[str, str] = {new_token(): u for u in self.users}
        self.counts: Counter[str] = Counter()
        # While set, both endpoints answer 503 (an API server that cannot decide).
        self.unavailable = False
        # Cleared by stall(): reviews are taken in and left unanswered until resume(),
        # as a stopped (SIGSTOPped) API server leaves them.
        self._answering = threading.Event()
        self._answering.set()

    def add_user(self, user: StubUser) -> str:
        """Add (or replace) a user; returns a token of it."""
        with self._lock:
            self.users[user.username] = user
        return self.token_of(user.username)

    def token_of(self, username: str) -> str:
        """A valid token of ``username`` (made if it has none)."""
        with self._lock:
            for token, name in self._tokens.items():
                if name == username:
                    return token
            token = new_token()
            self._tokens[token] = username
            return token

    def user_for(self, token: str) -> StubUser | None:
        """The user ``token`` belongs to, if it is valid."""
        with self._lock:
            name = self._tokens.get(token)
        return self.users.get(name) if name else None

    def revoke(self, username: str) -> None:
        """Every token of ``username`` stops passing TokenReview."""
        with self._lock:
            self._tokens = {t: n for t, n in self._tokens.items() if n != username}

    def stall(self) -> None:
        """Leave every review unanswered (counted as it arrives) until ``resume``."""
        self._answering.clear()

    def resume(self) -> None:
        """Answer reviews again, the stalled ones first."""
        self._answering.set()

    def answer(self, path: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """``(status, object)`` for a review POST; None for any other path."""
        if path not in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            return None
        kind = "tokenreviews" if path == TOKEN_REVIEWS else "subjectaccessreviews"
        with self._lock:
            self.counts[kind] += 1
        self._answering.wait()
        if self.unavailable:
            return 503, status(503, "ServiceUnavailable", "the stub is unavailable")
        spec = body.get("spec")
        if not isinstance(spec, dict):
            return 400, status(400, "BadRequest", "spec is required")
        if kind == "tokenreviews":
            return 201, self._token_review(body, spec)
        return 201, self._access_review(body, spec)

    def _token_review(self, body: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        user = self.user_for(str(spec.get("token", "")))
        result: dict[str, Any]
        if user is None:
            result = {"authenticated": False, "error": "invalid bearer token"}
        else:
            result = {
                "authenticated": True,
                "user": {
                    "username": user.username,
                    "uid": user.uid,
                    "groups": list(user.groups),
                    "extra": {k: list(v) for k, v in user.extra.items()},
                },
                "audiences": spec.get("audiences") or ["https://kubernetes.default.svc"],
            }
        return _review("authentication.k8s.io/v1", "TokenReview", spec, result)

    def _access_review(self, body: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(spec.get("user", "")))
        non_resource = isinstance(spec.get("nonResourceAttributes"), dict)
        attributes = spec.get("nonResourceAttributes" if non_resource else "resourceAttributes")
        allowed = bool(
            user is not None
            and isinstance(attributes, dict)
            # Groups must match the table: a review must carry the user's real groups.
            and tuple(spec.get("groups") or ()) == user.groups
            and any(r.allows(attributes, non_resource) for r in user.rules)
        )
        result = {"allowed": allowed, "reason": "stub RBAC" if allowed else ""}
        return _review("authorization.k8s.io/v1", "SubjectAccessReview", spec, result)


def _review(api_version: str, kind: str, spec: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": result,
    }
