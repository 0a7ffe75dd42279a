"""Building the schema: types, federation, validation limits and error masking."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import strawberry
from graphql import ExecutionResult as GraphQLExecutionResult
from graphql import GraphQLError
from strawberry.extensions import (
    DisableIntrospection,
    MaskErrors,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.federation.schema import FederationAny
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext, ExecutionResult, Info, StreamExecutionResult

from .admission import CostAdmission, SizeGauge
from .allocation_join import AllocationRules
from .context import GraphContext
from .errors import (
    GraphUserError,
    ResultBudgetError,
    forget_tracebacks,
    in_response_order,
    is_internal,
)
from .limits import SchemaLimits, SubscriptionLimiter
from .parsing import ThreadedParse
from .query import Query
from .representations import entity_keys, representation_problem
from .scalars import Bytes, BytesScalar
from .state import SharedState
from .subscriptions import Subscription
from .views import ViewCache

logger = logging.getLogger(__name__)

# Widely supported by gateways and routers; the schema needs nothing newer.
FEDERATION_VERSION = "2.5"


class ContextPerOperation(SchemaExtension):
    """Gives every operation a GraphContext of its own, forked from the request's, and ends it.

    strawberry makes one context per WebSocket, shared by all its operations;
    a fork per operation keeps their loaders, errors and budgets apart, so a
    query on a long-lived socket reads fresh snapshots like one over HTTP.
    The last extension to finish (the first listed): by then every error is
    logged, so the operation's errors forget their tracebacks and the fork its
    loaders, and a failing query leaves no reference cycle behind.
    """

    def on_operation(self) -> Iterator[None]:
        ctx = self.execution_context.context
        fork = ctx.fork() if isinstance(ctx, GraphContext) else None
        if fork is not None:
            self.execution_context.context = fork
        try:
            yield
        finally:
            if fork is not None:
                fork.finish()
            # Those graphql-core raised, masked ones included, and those in the result.
            forget_tracebacks(self.execution_context.pre_execution_errors or ())
            forget_tracebacks(getattr(self.execution_context.result, "errors", None) or ())


class PartialErrors(SchemaExtension):
    """Adds errors for the parts of aggregate lists that could not be fetched; orders errors."""

    def on_execute(self) -> Iterator[None]:
        yield
        self._attach(self.execution_context.result)

    def on_stream_result(self, result: StreamExecutionResult) -> Iterator[None]:
        # Each subscription tick: that tick's errors go out with its result.
        self._attach(result)
        yield

    def _attach(self, result: object) -> None:
        if not isinstance(result, ExecutionResult | GraphQLExecutionResult):
            return
        ctx = self.execution_context.context
        if isinstance(ctx, GraphContext) and ctx.partial_errors:
            for error in ctx.partial_errors:
                logger.info("partial result: %s", error.message)
            result.errors = [*(result.errors or []), *ctx.partial_errors]
            ctx.partial_errors = []
        if result.errors and len(result.errors) > 1:
            # Deterministic, and the same as the compiled path's (see errors.py).
            result.errors = in_response_order(result.data, result.errors)


class OneBudgetError(SchemaExtension):
    """Reports an exhausted result budget once, not once for every field refused after it.

    Past the budget every list field fails, and a query over many pods would
    otherwise carry thousands of copies of the same error.
    """

    def on_execute(self) -> Iterator[None]:
        yield
        _keep_first_budget_error(self.execution_context.result)

    def on_stream_result(self, result: StreamExecutionResult) -> Iterator[None]:
        _keep_first_budget_error(result)
        yield


def _keep_first_budget_error(result: object) -> None:
    if not isinstance(result, ExecutionResult | GraphQLExecutionResult) or not result.errors:
        return
    seen = False
    kept = []
    for error in result.errors:
        if isinstance(error.original_error, ResultBudgetError):
            if seen:
                continue
            seen = True
        kept.append(error)
    result.errors = kept


class GraphSchema(strawberry.federation.Schema):
    """The federation schema, carrying the server-wide state its resolvers share."""

    def __init__(
        self, limits: SchemaLimits, allocation_rules: AllocationRules | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.limits = limits
        self.state = SharedState(
            subscriptions=SubscriptionLimiter(
                limits.max_subscriptions, limits.max_subscriptions_per_caller
            ),
            views=ViewCache(allocation_rules),
            max_result_items=limits.max_result_items,
        )
        # The cluster's list sizes for the cost estimate, shared by every operation.
        self.gauge = SizeGauge(self.state.views)
        self._entity_keys = entity_keys(
            (name, getattr(definition.definition, "origin", None))
            for name, definition in self.schema_converter.type_map.items()
        )

    def entities_resolver(
        self, info: Info, representations: list[FederationAny]
    ) -> list[FederationAny]:
        """strawberry's entity lookup, with a one-line error for each unusable representation."""
        problems = [
            representation_problem(i, r, self._entity_keys) for i, r in enumerate(representations)
        ]
        usable = [r for r, problem in zip(representations, problems, strict=True) if not problem]
        resolved = iter(super().entities_resolver(info, usable))
        results: list[Any] = [
            next(resolved) if problem is None else GraphUserError(problem) for problem in problems
        ]
        return results

    async def execute(self, *args: Any, **kwargs: Any) -> ExecutionResult:
        """strawberry's execution; its errors, logged, without their tracebacks.

        An extension that raises (the time limit) fails the operation after
        ``ContextPerOperation`` has ended it: its error is in no result until now.
        """
        result = await super().execute(*args, **kwargs)
        forget_tracebacks(result.errors or ())
        return result

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Log internal errors with their stack trace; expected ones briefly."""
        for error in errors:
            if is_internal(error):
                logger.error(
                    "internal error at %s: %s",
                    error.path,
                    error.message,
                    exc_info=error.original_error,
                )
            else:
                logger.debug("GraphQL error at %s: %s", error.path, error.message)


ExtensionFactory = Callable[[], SchemaExtension]


def build_schema(
    limits: SchemaLimits = SchemaLimits(),  # noqa: B008
    *,
    extensions: Sequence[type[SchemaExtension] | ExtensionFactory] = (),
    allocation_rules: AllocationRules | None = None,
) -> GraphSchema:
    """The gpugraph schema with these limits; each call has its own server-wide state.

    ``extensions`` (classes or factories) run after the per-operation context
    is made and around the schema's own limits. ``allocation_rules`` give the
    allocation join the cached claims and the GPU resource names.
    """
    schema: GraphSchema

    def admission() -> CostAdmission:
        return CostAdmission(schema.gauge, limits)

    schema = GraphSchema(
        limits,
        allocation_rules,
        query=Query,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map={Bytes: BytesScalar}),
        # Factories, not instances: each operation gets its own extension objects.
        extensions=[
            ContextPerOperation,
            *extensions,
            # Introspection fields (__schema, __type) are not counted, so
            # GraphiQL's deep introspection query passes.
            lambda: QueryDepthLimiter(max_depth=limits.max_depth),
            lambda: MaxAliasesLimiter(max_alias_count=limits.max_aliases),
            lambda: MaxTokensLimiter(max_token_count=limits.max_tokens),
            ThreadedParse,
            # Before validation, whose overlap check is what a wide document makes slow.
            admission,
            PartialErrors,
            OneBudgetError,
            lambda: MaskErrors(should_mask_error=is_internal),
            *([] if limits.introspection else [DisableIntrospection]),
        ],
        federation_version=FEDERATION_VERSION,
    )
    return schema
