"""TokenReview and SubjectAccessReview through the real kubernetes client against the stub."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient

from api.auth import (
    AccessReviewer,
    KubernetesAuth,
    Question,
    RejectedTokenError,
    ReviewCache,
    ReviewUnavailableError,
    TokenReviewer,
    UserInfo,
)
from api.auth.access import LIST_NODES
from api.demo.cluster import StubApiServer
from api.demo.cluster.apiserver.kubeconfig import kubeconfig_for
from tests.support.clock import ManualClock
from tests.support.graph import MemoryCluster, pod_record


@pytest.fixture
def stub() -> Iterator[StubApiServer]:
    with StubApiServer() as server:
        yield server


def reviewer(stub: StubApiServer, clock: ManualClock) -> TokenReviewer:
    client = ApiClient(kubeconfig_for(stub.url))
    return TokenReviewer(client, success_ttl=60, failure_ttl=10, cache=ReviewCache(clock=clock))


async def test_a_token_review_names_the_user_with_groups_and_extra(stub: StubApiServer) -> None:
    user = await reviewer(stub, ManualClock()).review(stub.reviews.token_of("research-user"))
    assert user is not None
    assert (user.username, user.uid) == ("research-user", "uid-research")
    assert user.groups == ("research", "system:authenticated")
    assert user.extra == (("scopes.example.com/team", ("research",)),)


async def test_successes_are_trusted_longer_than_failures(stub: StubApiServer) -> None:
    clock = ManualClock()
    tokens = reviewer(stub, clock)
    good, bad = stub.reviews.token_of("admin"), "wrong"
    assert await tokens.review(good) is not None
    assert await tokens.review(bad) is None
    assert stub.reviews.counts["tokenreviews"] == 2
    clock.now += 11  # past the failure TTL, within the success TTL
    assert await tokens.review(good) is not None
    assert await tokens.review(bad) is None
    assert stub.reviews.counts["tokenreviews"] == 3
    clock.now += 50  # past the success TTL: a revoked token is noticed
    stub.reviews.revoke("admin")
    assert await tokens.review(good) is None


async def test_an_unreachable_api_server_raises_and_is_not_cached(
    stub: StubApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = reviewer(stub, ManualClock())
    token = stub.reviews.token_of("admin")
    stub.reviews.unavailable = True
    with caplog.at_level(logging.DEBUG), pytest.raises(ReviewUnavailableError):
        await tokens.review(token)
    stub.reviews.unavailable = False
    assert await tokens.review(token) is not None
    # The token itself is never logged, only a prefix of its hash.
    assert token not in caplog.text and "sha256:" in caplog.text


async def test_access_reviews_carry_the_users_groups_and_are_cached(stub: StubApiServer) -> None:
    client = ApiClient(kubeconfig_for(stub.url))
    cluster = MemoryCluster()
    for namespace in ("research", "ml"):
        cluster.add_pod(pod_record(namespace, "p", "node-a"))
    auth = KubernetesAuth(TokenReviewer(client), AccessReviewer(client), cluster)
    research = await auth.authenticate(stub.reviews.token_of("research-user"))
    scope = research.scope
    assert (scope.all_pods, scope.all_nodes, scope.exec_all) == (False, False, False)
    assert scope.pod_namespaces == frozenset({"research"})
    assert not await auth.may(research.user, Question.get_url("/metrics"))
    admin = await auth.authenticate(stub.reviews.token_of("admin"))
    assert admin.scope.unrestricted
    assert await auth.may(admin.user, Question.get_url("/metrics"))
    asked = stub.reviews.counts["subjectaccessreviews"]
    for _ in range(5):
        await auth.authenticate(stub.reviews.token_of("research-user"))
    assert stub.reviews.counts["subjectaccessreviews"] == asked
    with pytest.raises(RejectedTokenError):
        await auth.authenticate("")
    # A caller's repr never shows its token.
    assert stub.reviews.token_of("admin") not in repr(admin)


async def test_only_declared_questions_are_asked(stub: StubApiServer) -> None:
    # The chart's roles are built from QUESTIONS; a question outside it is a bug here,
    # not a denial the operator could fix with RBAC.
    access = AccessReviewer(ApiClient(kubeconfig_for(stub.url)))
    user = UserInfo("admin", "uid-admin", ("system:masters", "system:authenticated"), ())
    assert await access.allowed(user, Question.list_pods("research"))
    for undeclared in (Question("delete", "pods"), LIST_NODES.in_namespace("research")):
        with pytest.raises(ValueError, match="not declared"):
            await access.allowed(user, undeclared)
    assert stub.reviews.counts["subjectaccessreviews"] == 1
