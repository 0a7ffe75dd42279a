"""Building the schema: types, federation, validation limits and error masking."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import (
    MaskErrors,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext

from .context import GraphContext
from .errors import is_internal
from .limits import SchemaLimits, SubscriptionLimiter
from .query import Query
from .scalars import Bytes, BytesScalar
from .state import SharedState
from .subscriptions import Subscription

logger = logging.getLogger(__name__)

# Widely supported by gateways and routers; the schema needs nothing newer.
FEDERATION_VERSION = "2.5"


class PartialErrors(SchemaExtension):
    """Adds errors for the parts of aggregate lists that could not be fetched."""

    def on_execute(self) -> Iterator[None]:
        yield
        ctx = self.execution_context.context
        result = self.execution_context.result
        if not isinstance(ctx, GraphContext) or not ctx.partial_errors or result is None:
            return
        for error in ctx.partial_errors:
            logger.info("partial result: %s", error.message)
        result.errors = [*(result.errors or []), *ctx.partial_errors]
        ctx.partial_errors = []


class GraphSchema(strawberry.federation.Schema):
    """The federation schema, carrying the server-wide state its resolvers share."""

    def __init__(self, limits: SchemaLimits, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limits = limits
        self.state = SharedState(subscriptions=SubscriptionLimiter(limits.max_subscriptions))

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


def build_schema(limits: SchemaLimits = SchemaLimits()) -> GraphSchema:  # noqa: B008
    """The gpugraph schema with these limits; each call has its own server-wide state."""
    return GraphSchema(
        limits,
        query=Query,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map={Bytes: BytesScalar}),
        # Factories, not instances: each operation gets its own extension objects.
        extensions=[
            # Introspection fields (__schema, __type) are not counted, so
            # GraphiQL's deep introspection query passes.
            lambda: QueryDepthLimiter(max_depth=limits.max_depth),
            lambda: MaxAliasesLimiter(max_alias_count=limits.max_aliases),
            lambda: MaxTokensLimiter(max_token_count=limits.max_tokens),
            PartialErrors,
            lambda: MaskErrors(should_mask_error=is_internal),
        ],
        federation_version=FEDERATION_VERSION,
    )
