"""Malformed requests over HTTP and WebSocket: clean 4xx (in GraphQL's error shape) or 4400,
one-line reasons, no traceback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import httpx
import pytest
import websockets
from websockets.typing import Subprotocol

from tests.support.server import GraphQLSocket, GraphTestCluster, serving

TRANSPORT_WS = Subprotocol("graphql-transport-ws")


class Tracebacks(logging.Handler):
    """Collects records carrying a stack trace from the serving path's loggers."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.exc_text:
            self.records.append(record)


@pytest.fixture
def tracebacks() -> Iterator[Tracebacks]:
    handler = Tracebacks()
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "graph_schema.schema", "")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


BAD_BODIES = {
    "a JSON string": (b'"{ nodes { name } }"', "not a string"),
    "null": (b"null", "not null"),
    "a number": (b"12", "not a number"),
    "invalid UTF-8": (b'{"query": "\xff\xfe"}', "not valid JSON"),
    "100k-deep JSON": (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    "100k-deep variables": (
        b'{"query": "{ nodes { name } }", "variables": {"a": ' + b"[" * 100_000 + b"}",
        "not valid JSON",
    ),
}


@pytest.mark.parametrize("kind", list(BAD_BODIES))
async def test_a_malformed_body_is_a_400_with_a_one_line_reason(
    cluster: GraphTestCluster, tracebacks: Tracebacks, kind: str
) -> None:
    body, reason = BAD_BODIES[kind]
    async with serving(cluster.settings(max_body_bytes=1024 * 1024)) as server:
        response = await server.client.post(
            "/graphql", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400, response.text
        # GraphQL-over-HTTP's error shape, not a line of text.
        assert response.headers["content-type"] == "application/json; charset=utf-8"
        [error] = response.json()["errors"]
        assert list(error) == ["message"] and reason in error["message"]
        assert "\n" not in error["message"] and "Traceback" not in response.text
        # The server is fine afterwards.
        assert (await server.query("{ nodes { name } }"))["data"]["nodes"]
    assert tracebacks.records == []


@pytest.mark.parametrize(
    "content_type", ["Application/JSON", "APPLICATION/JSON; Charset=UTF-8", "application/Json"]
)
async def test_a_json_body_is_answered_whatever_the_case_of_its_media_type(
    cluster: GraphTestCluster, content_type: str
) -> None:
    # Media types are case-insensitive (RFC 9110, 8.3.1); strawberry compares them as sent.
    async with serving(cluster.settings()) as server:
        response = await server.client.post(
            "/graphql",
            content=b'{"query": "{ nodes { name } }"}',
            headers={"content-type": content_type},
        )
    assert response.status_code == 200, response.text
    assert response.json()["data"]["nodes"]


@pytest.mark.parametrize(
    ("content_type", "says"),
    [
        ("text/plain", "not text/plain"),
        ("application/x-www-form-urlencoded", "not application/x-www-form-urlencoded"),
        ("application/graphql", "not application/graphql"),
        (None, "this request names none"),
    ],
)
async def test_a_body_that_is_not_json_is_a_415_in_graphqls_error_shape(
    cluster: GraphTestCluster, tracebacks: Tracebacks, content_type: str | None, says: str
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    async with serving(cluster.settings()) as server:
        for accept, media_type in (
            ("application/json", "application/json"),
            ("application/graphql-response+json", "application/graphql-response+json"),
        ):
            response = await server.client.post(
                "/graphql", content=b"{ nodes { name } }", headers={**headers, "accept": accept}
            )
            assert response.status_code == 415, response.text
            assert response.headers["content-type"] == f"{media_type}; charset=utf-8"
            assert response.json() == {
                "errors": [
                    {
                        "message": "a GraphQL request is JSON, sent as Content-Type: "
                        f"application/json ({says})"
                    }
                ]
            }
        wrong_method = await server.client.put("/graphql", json={"query": "{ nodes { name } }"})
        assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "GET, POST"
        assert wrong_method.json()["errors"][0]["message"]
    assert tracebacks.records == []


async def test_a_subscription_over_http_is_a_400_naming_the_websocket(
    cluster: GraphTestCluster, tracebacks: Tracebacks
) -> None:
    query = "subscription { gpuUpdates { uuid } }"
    async with serving(cluster.settings()) as server:
        posted = await server.client.post("/graphql", json={"query": query})
        got = await server.client.get("/graphql", params={"query": query})
    for response in (posted, got):
        assert response.status_code == 400, response.text
        assert "subscriptions are not allowed" in response.text
        assert "graphql-transport-ws" in response.text
    assert tracebacks.records == []


BAD_MESSAGES = {
    "[]": "message must be a JSON object",
    "null": "message must be a JSON object",
    "12": "message must be a JSON object",
    '"connection_init"': "message must be a JSON object",
    '{"type": 7}': "message type must be a string",
    "[" * 100_000: "WebSocket message must be valid JSON",
}
BAD_SUBSCRIBES = {
    '{"type": "subscribe", "id": "1", "payload": "{ nodes { name } }"}': "payload must be",
    '{"type": "subscribe", "id": "1", "payload": []}': "payload must be",
    '{"type": "subscribe", "id": 1, "payload": {"query": "{ nodes { name } }"}}': "id must be",
    '{"type": "subscribe", "id": "1", "payload": {"query": 5}}': "query must be a string",
    '{"type": "subscribe", "id": "1", "payload": {"query": "{ nodes { name } }", '
    '"variables": []}}': "variables must be",
    '{"type": "complete", "id": null}': "id must be",
}


async def closed_with(ws: websockets.ClientConnection) -> tuple[int, str]:
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None, "closed without a close frame (1006)"
    return closed.value.rcvd.code, closed.value.rcvd.reason


async def test_websocket_garbage_closes_with_4400_and_the_reason(
    cluster: GraphTestCluster, tracebacks: Tracebacks
) -> None:
    async with serving(cluster.settings(max_body_bytes=1024 * 1024)) as server:
        for message, reason in BAD_MESSAGES.items():
            async with websockets.connect(server.ws_url, subprotocols=[TRANSPORT_WS]) as ws:
                await ws.send(message)
                assert await closed_with(ws) == (4400, reason), message[:40]
        for message, reason in BAD_SUBSCRIBES.items():
            async with GraphQLSocket.connect(server.ws_url) as socket:
                await socket.ws.send(message)
                code, why = await closed_with(socket.ws)
                assert code == 4400 and reason in why, (message, code, why)
        # A well-formed socket still works.
        async with GraphQLSocket.connect(server.ws_url) as socket:
            assert (await socket.query("{ nodes { name } }"))["data"]["nodes"]
    assert tracebacks.records == []


async def test_the_legacy_graphql_ws_protocol_is_refused(cluster: GraphTestCluster) -> None:
    async with (
        serving(cluster.settings()) as server,
        websockets.connect(server.ws_url, subprotocols=[Subprotocol("graphql-ws")]) as ws,
    ):
        assert ws.subprotocol is None
        assert await closed_with(ws) == (4406, "Subprotocol not acceptable")


TWO_OPERATIONS = "query Names { nodes { name } } query Ready { cacheStatus { ready } }"
NAME_REQUIRED = "Must provide operation name if query contains multiple operations."


async def test_several_operations_without_a_name_are_refused_not_the_first_run(
    cluster: GraphTestCluster, tracebacks: Tracebacks
) -> None:
    # As the GraphQL spec says: a client that forgot operationName gets no answer to a
    # question it may not have meant, over HTTP and over the WebSocket alike.
    async with serving(cluster.settings()) as server:
        posted = await server.client.post("/graphql", json={"query": TWO_OPERATIONS})
        got = await server.client.get("/graphql", params={"query": TWO_OPERATIONS})
        named = await server.client.post(
            "/graphql", json={"query": TWO_OPERATIONS, "operationName": "Ready"}
        )
        async with GraphQLSocket.connect(server.ws_url) as socket:
            streamed = await socket.query(TWO_OPERATIONS)
    for response in (posted, got):
        body = response.json()
        assert body.get("data") is None, body
        assert [e["message"] for e in body["errors"]] == [NAME_REQUIRED]
        assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert [e["message"] for e in streamed["errors"]] == [NAME_REQUIRED]
    assert named.json() == {"data": {"cacheStatus": {"ready": True}}}
    assert tracebacks.records == []


@pytest.mark.parametrize("name", ["query", "operationName", "variables"])
async def test_a_get_parameter_given_twice_is_a_400_not_the_last_one_run(
    cluster: GraphTestCluster, tracebacks: Tracebacks, name: str
) -> None:
    values = {"query": "{ nodes { name } }", "operationName": "A", "variables": "{}"}
    params = httpx.QueryParams([*values.items(), (name, values[name])])
    async with serving(cluster.settings()) as server:
        response = await server.client.get("/graphql", params=params)
    assert response.status_code == 400, response.text
    assert response.json() == {
        "errors": [{"message": f"the query parameter {name} is given twice"}]
    }
    assert tracebacks.records == []
