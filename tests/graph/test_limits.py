"""Query limits, introspection, and masking of internal errors."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from graphql import get_introspection_query

from graph_schema.context import GraphContext
from graph_schema.limits import SchemaLimits
from graph_schema.records import NodeRecord
from graph_schema.schema import build_schema
from tests.support.graph import MemoryCluster, MemorySnapshots, node_record

DEFAULT_LIMITS = SchemaLimits()


async def execute(query: str, limits: SchemaLimits = DEFAULT_LIMITS) -> tuple[object, list[str]]:
    cluster = MemoryCluster()
    cluster.add_node(node_record("n1"))
    schema = build_schema(limits)
    result = await schema.execute(
        query, context_value=GraphContext(cluster, MemorySnapshots(), schema.state)
    )
    return result.data, [e.message for e in result.errors or []]


def nested(depth: int) -> str:
    """A query ``depth`` fields deep: nodes { pods { node { pods { … } } } }."""
    fields = ["nodes"] + ["pods" if i % 2 else "node" for i in range(1, depth - 1)]
    query = "name"
    for field in reversed(fields):
        query = f"{field} {{ {query} }}"
    return "{ " + query + " }"


async def test_depth_30_is_refused_and_depth_12_allowed() -> None:
    data, errors = await execute(nested(30))
    assert data is None
    assert errors == ["'anonymous' exceeds maximum operation depth of 12"]
    data, errors = await execute(nested(12))
    assert errors == [] and data is not None


async def test_100_aliases_are_refused() -> None:
    query = "{ " + " ".join(f"a{i}: nodes {{ name }}" for i in range(100)) + " }"
    data, errors = await execute(query)
    assert data is None
    assert errors == ["100 aliases found. Allowed: 30"]
    data, errors = await execute(query, SchemaLimits(max_aliases=100))
    assert errors == []


async def test_token_limit() -> None:
    query = "{ " + " ".join("nodes { name }" for _ in range(1300)) + " }"
    data, errors = await execute(query)
    assert data is None
    assert errors == ["Syntax Error: Document contains more than 5000 tokens. Parsing aborted."]


@pytest.mark.parametrize(
    "query",
    [
        get_introspection_query(
            descriptions=True,
            specified_by_url=True,
            directive_is_repeatable=True,
            schema_description=True,
            input_value_deprecation=True,
        ),
        '{ __type(name: "Pod") { name fields { name type { name kind ofType { name } } } } }',
    ],
    ids=["graphiql-introspection", "type-lookup"],
)
async def test_introspection_passes_the_limits(query: str) -> None:
    data, errors = await execute(query)
    assert errors == []
    assert isinstance(data, dict)
    if "__schema" in data:
        names = {t["name"] for t in data["__schema"]["types"]}
        assert {"Node", "Pod", "Gpu", "GpuProcess", "Bytes", "Subscription"} <= names


async def test_validation_errors_are_not_masked() -> None:
    data, errors = await execute("{ nodes { bogus } }")
    assert data is None
    assert len(errors) == 1
    assert errors[0].startswith("Cannot query field 'bogus' on type 'Node'.")


class ExplodingCluster(MemoryCluster):
    def nodes(self) -> Sequence[NodeRecord]:
        raise RuntimeError("password=hunter2 in /etc/secret")


async def test_internal_errors_are_masked_and_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server started earlier in this process may have rate-limited this logger's
    # tracebacks (and spent the allowance); that limit has its own tests.
    monkeypatch.setattr(logging.getLogger("graph_schema.schema"), "filters", [])
    with caplog.at_level(logging.ERROR):
        schema = build_schema()
        result = await schema.execute(
            "{ nodes { name } }",
            context_value=GraphContext(ExplodingCluster(), MemorySnapshots(), schema.state),
        )
    assert result.data is None
    assert result.errors is not None
    (error,) = result.errors
    assert error.message == "Unexpected error."
    assert error.path == ["nodes"]
    assert "hunter2" not in str(error.formatted)
    # The server log keeps the real error with its stack trace.
    assert "hunter2" in caplog.text
    assert "Traceback" in caplog.text and "test_limits.py" in caplog.text


async def test_introspection_can_be_turned_off_without_breaking_typename_or_federation() -> None:
    limits = SchemaLimits(introspection=False)
    data, errors = await execute("{ __schema { types { name } } }", limits)
    assert data is None and errors and "introspection" in errors[0].lower()
    data, errors = await execute('{ __type(name: "Node") { name } }', limits)
    assert data is None and errors
    data, errors = await execute("{ __typename _service { sdl } }", limits)
    assert errors == [] and isinstance(data, dict) and "type Node" in data["_service"]["sdl"]
    # On by default.
    data, errors = await execute("{ __schema { queryType { name } } }")
    assert errors == [] and data == {"__schema": {"queryType": {"name": "Query"}}}


def test_each_identity_gets_its_share_of_the_subscription_slots() -> None:
    from contextlib import ExitStack

    from graph_schema.limits import SubscriptionLimiter, SubscriptionLimitError

    limiter = SubscriptionLimiter(limit=5, per_caller=2)
    with ExitStack() as held:
        for _ in range(2):
            held.enter_context(limiter.hold("research"))
        with pytest.raises(SubscriptionLimitError, match="2 per caller"):
            held.enter_context(limiter.hold("research"))
        held.enter_context(limiter.hold("admin"))
        # Unauthenticated operations count only toward the server-wide cap.
        held.enter_context(limiter.hold(None))
        held.enter_context(limiter.hold(None))
        with pytest.raises(SubscriptionLimitError, match="allows 5;"):
            held.enter_context(limiter.hold("admin"))
        assert limiter.by_caller == {"research": 2, "admin": 1}
    assert limiter.active == 0 and limiter.by_caller == {}
