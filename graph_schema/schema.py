"""Building the schema: types, federation, and every operation's policies (``pipeline.py``)."""

from __future__ import annotations

import logging
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext, ExecutionResult, Info

from .admission import SizeGauge
from .allocation_join import AllocationRules
from .compiled.documents import CompiledDocuments
from .errors import GraphUserError, forget_tracebacks, is_internal
from .internals import FederationAny, SchemaExtensionsRunner
from .limits import SchemaLimits
from .pipeline import OperationPolicies, Policies, PoliciesRunner, QueryReport
from .query import Query
from .representations import entity_keys, representation_problem
from .scalars import Bytes, BytesScalar
from .state import SharedState
from .subscriptions import Subscription

logger = logging.getLogger(__name__)

# Widely supported by gateways and routers; the schema needs nothing newer.
FEDERATION_VERSION = "2.5"


class GraphSchema(strawberry.federation.Schema):
    """The federation schema, carrying the server-wide state its resolvers share."""

    def __init__(
        self, limits: SchemaLimits, state: SharedState, gauge: SizeGauge, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.limits = limits
        self.state = state
        # The cluster's list sizes for the cost estimate, shared by every operation.
        self.gauge = gauge
        self._entity_keys = entity_keys(
            (name, getattr(definition.definition, "origin", None))
            for name, definition in self.schema_converter.type_map.items()
        )

    def create_extensions_runner(
        self, execution_context: ExecutionContext, extensions: list[SchemaExtension]
    ) -> SchemaExtensionsRunner:
        """strawberry's runner, or for the schema's one extension (its policies) one that
        looks its hooks up once rather than per operation (``pipeline.PoliciesRunner``)."""
        if len(extensions) == 1 and isinstance(extensions[0], OperationPolicies):
            return PoliciesRunner(execution_context, extensions)
        return super().create_extensions_runner(execution_context, extensions)

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
        ``OperationPolicies`` has ended it: its error is in no result until now.
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


def build_schema(
    limits: SchemaLimits = SchemaLimits(),  # noqa: B008
    *,
    state: SharedState | None = None,
    gauge: SizeGauge | None = None,
    allocation_rules: AllocationRules | None = None,
    compiled: CompiledDocuments | None = None,
    time_limit: float | None = None,
    report: QueryReport | None = None,
) -> GraphSchema:
    """The gpugraph schema with these limits, and every operation's policies, declared once.

    Every operation, over HTTP or a WebSocket, through strawberry's executor
    or the compiled plan (``compiled``: plans the schema runs where they
    cover the query), is held to the same policies (``pipeline.py``): among
    them the server's time limit (``time_limit`` seconds per query) and its
    metrics (``report``).
    ``state`` and ``gauge`` are the server's, built by its composition root
    (as httpx takes a transport); without them the schema has its own,
    ``allocation_rules`` giving the allocation join the cached claims and
    the GPU resource names.
    """
    if state is None:
        state = SharedState.for_limits(limits, allocation_rules)
    if gauge is None:
        gauge = SizeGauge(state.views)
    policies = Policies.of(limits, gauge, compiled=compiled, time_limit=time_limit, report=report)
    return GraphSchema(
        limits,
        state,
        gauge,
        query=Query,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map={Bytes: BytesScalar}),
        # A factory, not an instance: each operation gets its own extension object.
        extensions=[policies.extension],
        federation_version=FEDERATION_VERSION,
    )
