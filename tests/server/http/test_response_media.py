"""application/graphql-response+json: request errors are 400 without data; legacy JSON unchanged."""

from __future__ import annotations

import httpx

from api.app import create_app
from api.http.response_media import wants_graphql_response
from api.settings import Settings
from tests.support.graph import SmallWorld

GQL_RESPONSE = "application/graphql-response+json"


def test_the_accept_header_is_read_per_the_spec() -> None:
    assert wants_graphql_response({"accept": GQL_RESPONSE})
    assert wants_graphql_response({"accept": f"application/json, {GQL_RESPONSE};q=0.9"})
    assert not wants_graphql_response({"accept": "application/json"})
    assert not wants_graphql_response({"accept": f"{GQL_RESPONSE};q=0"})
    assert not wants_graphql_response({"accept": f"{GQL_RESPONSE};q=0.000"})
    assert not wants_graphql_response({"accept": f"{GQL_RESPONSE}; Q=0.000, application/json"})
    assert wants_graphql_response({"accept": f"{GQL_RESPONSE.upper()};q=0.001"})
    # Only naming it counts: curl's */* keeps the legacy answer.
    assert not wants_graphql_response({"accept": "*/*"})
    assert not wants_graphql_response({})


async def test_request_errors_are_400_without_data_and_executed_ones_200() -> None:
    world = SmallWorld()
    app = create_app(Settings(), world.cluster, world.agents)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

        async def post(body: dict[str, object], accept: str = GQL_RESPONSE) -> httpx.Response:
            return await client.post("/graphql", json=body, headers={"accept": accept})

        parse_error = await post({"query": "{ nodes {"})
        invalid = await post({"query": "{ bogus }"})
        coercion = await post(
            {"query": "query($n: String!) { node(name: $n) { name } }", "variables": {"n": 5}}
        )
        for response in (parse_error, invalid, coercion):
            assert response.status_code == 400, response.text
            assert response.headers["content-type"].startswith(GQL_RESPONSE)
            body = response.json()
            assert "data" not in body and body["errors"]
        ok = await post({"query": "{ nodes { name } }"})
        assert ok.status_code == 200
        assert ok.headers["content-type"].startswith(GQL_RESPONSE)
        assert ok.json()["data"]["nodes"]
        # A field error is not a request error: 200, with data.
        world.agents.kill("node-b")
        partial = await post({"query": '{ node(name: "node-b") { gpus { uuid } } }'})
        assert partial.status_code == 200 and "data" in partial.json()
        # Legacy clients keep 200 and "data": null.
        legacy = await post({"query": "{ bogus }"}, accept="application/json")
        assert legacy.status_code == 200
        assert legacy.headers["content-type"].startswith("application/json")
        assert legacy.json()["data"] is None
