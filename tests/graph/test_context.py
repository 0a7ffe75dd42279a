"""GraphContext: an operation reads history on its caller's budget, whoever the caller is now."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from graph_schema.context import GraphContext
from graph_schema.interfaces import HistorySource
from graph_schema.scope import EVERYTHING, Scope
from graph_schema.state import SharedState
from node_resolver.history.records import HistoryPage, HistoryQuery, UsageQuery, UsageRow
from tests.support.graph import MemoryCluster, MemorySnapshots


@dataclass(frozen=True)
class CallerView:
    """What a budgeted source hands one caller: its reads, named by that caller."""

    caller: Hashable

    async def history_page(
        self, node_name: str, query: HistoryQuery, page_token: str = ""
    ) -> HistoryPage:
        return HistoryPage(node_name, [], [], "", "ok")

    async def usage(self, node_name: str, query: UsageQuery) -> tuple[list[UsageRow], str]:
        return [], "ok"


class Budgeted:
    """A history source keeping a budget per caller, as the server's agent pool does."""

    async def history_page(
        self, node_name: str, query: HistoryQuery, page_token: str = ""
    ) -> HistoryPage:
        raise AssertionError("read through for_caller only")

    async def usage(self, node_name: str, query: UsageQuery) -> tuple[list[UsageRow], str]:
        raise AssertionError("read through for_caller only")

    def for_caller(self, caller: Hashable) -> HistorySource:
        return CallerView(caller)


@dataclass(frozen=True)
class Authenticated:
    """A caller as the server authenticated it."""

    username: str
    scope: Scope = EVERYTHING

    async def current_scope(self) -> Scope:
        return self.scope


def caller_of(ctx: GraphContext) -> Hashable:
    history = ctx.history
    assert isinstance(history, CallerView)
    return history.caller


def test_history_is_read_on_the_authenticated_callers_budget_and_follows_the_caller() -> None:
    research = Scope(pod_namespaces=frozenset({"research"}))
    ctx = GraphContext(
        MemoryCluster(),
        MemorySnapshots(),
        SharedState(),
        history=Budgeted(),
        scope=research,
        viewer=Authenticated("alice", research),
    )
    assert caller_of(ctx) == "alice"
    # Each operation of the request reads on the same caller's budget.
    assert caller_of(ctx.fork()) == "alice"
    # A WebSocket's init names another caller: its reads count against that one.
    ctx.admit(EVERYTHING, Authenticated("bob"))
    assert caller_of(ctx) == "bob"


def test_without_authentication_callers_of_one_scope_share_a_budget() -> None:
    ctx = GraphContext(MemoryCluster(), MemorySnapshots(), SharedState(), history=Budgeted())
    assert caller_of(ctx) == EVERYTHING


def test_a_source_without_budgets_is_read_as_it_is() -> None:
    plain = CallerView("anyone")
    ctx = GraphContext(MemoryCluster(), MemorySnapshots(), SharedState(), history=plain)
    assert ctx.history is plain
