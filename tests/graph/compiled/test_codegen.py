"""Generated selections: resolvers called in line, remembered per object only when they read
nothing but their object (or, from the context, only what every caller shares, while it holds),
and strawberry's answer when a resolver wants the path."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest
import strawberry
from graphql import parse
from graphql.execution.values import get_variable_values

from graph_schema.compiled.codegen import attach_generated_functions
from graph_schema.compiled.plan import Fallback, ObjectCompleter, ObjectPlan, compile_operation
from graph_schema.compiled.run import PlanRun
from graph_schema.operation import remember_while

calls: Counter[str] = Counter()


@strawberry.type
class Item:
    n: int

    @strawberry.field
    def double(self) -> int:
        calls["double"] += 1
        return self.n * 2

    @strawberry.field
    def caller(self, info: strawberry.Info) -> str:
        calls["caller"] += 1
        return f"{info.context['caller']}:{self.n}"

    @strawberry.field
    def where(self, info: strawberry.Info) -> str:
        return str(info.path.as_list())

    @strawberry.field(metadata=remember_while(lambda info: info.context["version"]))
    def shared(self, info: strawberry.Info) -> str:
        calls["shared"] += 1
        return f"v{info.context['version']}:{self.n}"


ITEMS = [Item(n=1), Item(n=2)]


@strawberry.type
class Query:
    @strawberry.field
    async def items(self) -> list[Item]:
        return ITEMS

    @strawberry.field
    def first(self) -> Item:
        return ITEMS[0]


SCHEMA = strawberry.Schema(query=Query)


def planned(document: str) -> ObjectPlan:
    plan = compile_operation(SCHEMA._schema, parse(document), None, {})
    attach_generated_functions(plan)
    return plan


def item_plan(root: ObjectPlan) -> ObjectPlan:
    complete = root.fields[0].complete
    while not isinstance(complete, ObjectCompleter):
        complete = complete.item  # type: ignore[union-attr]
    return complete.plan


async def run(plan: ObjectPlan, caller: str = "alice", version: int = 1) -> Any:
    variables = get_variable_values(SCHEMA._schema, (), {})
    assert not isinstance(variables, list)
    return await PlanRun({"caller": caller, "version": version}, variables).execute(plan)


@pytest.fixture(autouse=True)
def no_calls() -> None:
    calls.clear()


async def test_a_resolver_over_its_object_alone_is_generated_and_remembered_per_object() -> None:
    plan = planned("{ items { n double } }")
    assert item_plan(plan).generated is not None
    for _ in range(3):
        assert await run(plan) == {"items": [{"n": 1, "double": 2}, {"n": 2, "double": 4}]}
    # Once per object: the objects live on, and their dicts are kept with them.
    assert calls["double"] == 2


async def test_a_resolver_reading_the_context_is_generated_but_answered_per_run() -> None:
    plan = planned("{ items { n caller } }")
    assert item_plan(plan).generated is not None
    assert await run(plan, "alice") == {
        "items": [{"n": 1, "caller": "alice:1"}, {"n": 2, "caller": "alice:2"}]
    }
    # Another caller's run is never answered from the first one's dicts.
    assert await run(plan, "bob") == {
        "items": [{"n": 1, "caller": "bob:1"}, {"n": 2, "caller": "bob:2"}]
    }
    assert calls["caller"] == 4


async def test_a_resolver_reading_what_every_caller_shares_is_remembered_while_it_holds() -> None:
    plan = planned("{ items { n shared } }")
    for caller in ("alice", "bob", "alice"):
        assert await run(plan, caller) == {
            "items": [{"n": 1, "shared": "v1:1"}, {"n": 2, "shared": "v1:2"}]
        }
    assert calls["shared"] == 2  # once per object, whoever asks
    assert await run(plan, "bob", version=2) == {
        "items": [{"n": 1, "shared": "v2:1"}, {"n": 2, "shared": "v2:2"}]
    }
    assert calls["shared"] == 4
    # Beside a resolver reading the caller, it is answered per run like the rest.
    both = planned("{ items { shared caller } }")
    await run(both, "alice")
    await run(both, "alice")
    assert calls["shared"] == 8


async def test_a_resolver_reading_the_path_makes_the_plan_give_up_to_strawberry() -> None:
    plan = planned("{ items { n where } }")
    assert item_plan(plan).generated is not None
    with pytest.raises(Fallback):
        await run(plan)
    answer = await SCHEMA.execute("{ items { n where } }")
    assert answer.data == {
        "items": [
            {"n": 1, "where": "['items', 0, 'where']"},
            {"n": 2, "where": "['items', 1, 'where']"},
        ]
    }


def encoded_plan(document: str) -> ObjectPlan:
    plan = compile_operation(SCHEMA._schema, parse(document), None, {})
    attach_generated_functions(plan, encode=True)
    return plan


async def test_an_encoded_selection_is_its_json_remembered_per_object() -> None:
    plan = encoded_plan("{ items { n double } }")
    answers = [await run(plan) for _ in range(3)]
    # Each item is held as the bytes orjson writes for its dict, not as the dict, and the
    # answer's bytes are the same.
    assert all(type(item) is orjson.Fragment for item in answers[0]["items"])
    assert orjson.dumps(answers[0]) == orjson.dumps(
        {"items": [{"n": 1, "double": 2}, {"n": 2, "double": 4}]}
    )
    # Remembered per object: the same fragment again, the resolver not called again.
    assert answers[2]["items"][0] is answers[0]["items"][0]
    assert calls["double"] == 2


async def test_an_encoded_selection_reading_the_context_is_encoded_per_run() -> None:
    plan = encoded_plan("{ items { n caller } }")
    alice = orjson.dumps(await run(plan, "alice"))
    bob = orjson.dumps(await run(plan, "bob"))
    assert orjson.loads(alice)["items"][1] == {"n": 2, "caller": "alice:2"}
    assert orjson.loads(bob)["items"][1] == {"n": 2, "caller": "bob:2"}
    assert calls["caller"] == 4


async def test_the_root_stays_a_dict_its_fields_encoded_where_all_could_be_generated() -> None:
    plan = encoded_plan("{ first { n double } }")
    # The root's dict is the result's data (the server reads it); what is below it is encoded.
    assert plan.generated is None
    answer = await run(plan)
    assert type(answer) is dict
    assert type(answer["first"]) is orjson.Fragment
    assert orjson.loads(orjson.dumps(answer)) == {"first": {"n": 1, "double": 2}}
