"""The auth middleware's paths: a path the server has is behind a token, one it lacks is a 404."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from node_resolver.address import AGENT_PORT
from tests.support.server import GraphTestCluster, serving

# Paths no route answers, by GET and POST; near misses of real ones among them.
NOWHERE = ("/nope", "/graphql/x", "/metricsx", "/gpu-pods/job-a", "/admin", "/healthz/deep")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[GraphTestCluster]:
    """The stub API server alone (its TokenReviews); no node is needed to route a path."""
    cluster = GraphTestCluster(tmp_path)
    cluster.port = AGENT_PORT  # no agent runs to pick one
    await cluster.start()
    yield cluster
    await cluster.stop()


def comparable(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Status, body and headers, less the one that changes every second."""
    headers = sorted((k, v) for k, v in response.headers.items() if k != "date")
    return response.status_code, response.content, headers


async def test_a_path_the_server_lacks_is_the_same_404_with_any_token_or_none(
    cluster: GraphTestCluster,
) -> None:
    admin = {"Authorization": f"Bearer {cluster.stub.reviews.token_of('admin')}"}
    forged = {"Authorization": "Bearer not-a-token"}
    async with serving(cluster.settings(auth_mode="kubernetes")) as server:
        client = server.client
        for path in NOWHERE:
            for method in ("GET", "POST"):
                answers = [
                    await client.request(method, path, headers=headers)
                    for headers in ({}, forged, admin)
                ]
                assert answers[0].status_code == 404, (method, path, answers[0].text)
                assert "www-authenticate" not in answers[0].headers
                # Nothing in the answer depends on who asks.
                assert {comparable(a) == comparable(answers[0]) for a in answers} == {True}
        # The paths it has still want a token.
        for path in ("/graphql", "/gpu-pods", "/metrics"):
            refused = await client.get(path, params={"query": "{ nodes { name } }"})
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Bearer")
        wrong_method = await client.delete("/metrics")
        assert wrong_method.status_code == 401


async def test_two_different_authorization_headers_are_refused_not_the_first_taken(
    cluster: GraphTestCluster,
) -> None:
    # A proxy that adds its own header beside the client's: which one is meant is unknown.
    admin = f"Bearer {cluster.stub.reviews.token_of('admin')}"
    query = {"query": "{ nodes { name } }"}
    async with serving(cluster.settings(auth_mode="kubernetes")) as server:
        client = server.client
        both = [("Authorization", admin), ("Authorization", "Bearer not-a-token")]
        for headers in (both, both[::-1]):
            refused = await client.post("/graphql", json=query, headers=headers)
            assert refused.status_code == 401, refused.text
            assert refused.json() == {"error": "two different Authorization headers"}
        # The same header twice is one token.
        twice = [("Authorization", admin), ("Authorization", admin)]
        assert (await client.post("/graphql", json=query, headers=twice)).status_code == 200
