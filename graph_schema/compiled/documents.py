"""Plans cached by document hash, and the per-request choice: the plan or strawberry.

A document is parsed and validated once, with the same rules strawberry
applies (graphql-core's, the depth and alias limits, the token limit); one
that fails any of them is left to strawberry, which reports the failure its
own way. Each request then repeats what depends on it: the variables are
coerced, the operation is admitted against the cluster's current sizes by
the same ``admit`` the strawberry extension calls, and the plan runs. When
anything on the way says no (not covered, not ready, refused, a result too
large, an internal error), ``execute`` returns None and the caller runs
strawberry, so an answer never depends on what the plan covers.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphql import (
    DocumentNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    parse,
    specified_rules,
)
from graphql.execution.values import get_variable_values
from strawberry.extensions import DisableIntrospection, MaxAliasesLimiter, QueryDepthLimiter
from strawberry.schema.schema import validate_document
from strawberry.types import ExecutionResult

from ..admission import admit
from ..context import GraphContext
from ..errors import (
    GraphUserError,
    ResultBudgetError,
    forget_tracebacks,
    in_response_order,
    is_internal,
)
from .codegen import attach_generated_functions
from .plan import (
    Fallback,
    ObjectPlan,
    Unsupported,
    compile_operation,
    directive_variables,
    find_operation,
)
from .run import PlanRun

if TYPE_CHECKING:
    from ..schema import GraphSchema

__all__ = ["CompiledDocuments", "document_key"]

logger = logging.getLogger(__name__)

# Distinct documents whose plans are kept (dashboards send a handful each).
MAX_DOCUMENTS = 512


def document_key(query: str, operation_name: str | None) -> bytes:
    """The plan cache's key: the document's hash and the operation's name."""
    digest = hashlib.sha256(query.encode())
    digest.update(b"\0" + (operation_name or "").encode())
    return digest.digest()


@dataclass(slots=True)
class _Document:
    """One (document, operation name): its AST and its plans, or why strawberry runs it."""

    document: DocumentNode | None = None
    operation: OperationDefinitionNode | None = None
    unsupported: str | None = None
    directive_variables: tuple[str, ...] = ()
    plans: dict[tuple[Any, ...], ObjectPlan | str] = field(default_factory=dict)


class CompiledDocuments:
    """The compiled path of one schema: plans by document hash, and running them."""

    def __init__(self, schema: GraphSchema, *, max_documents: int = MAX_DOCUMENTS) -> None:
        self.schema = schema
        self.max_documents = max_documents
        limits = schema.limits
        self._max_tokens = limits.max_tokens
        rules = [
            *QueryDepthLimiter(max_depth=limits.max_depth).validation_rules,
            *MaxAliasesLimiter(max_alias_count=limits.max_aliases).validation_rules,
        ]
        if not limits.introspection:
            rules.extend(DisableIntrospection().validation_rules)
        self._rules = (*specified_rules, *rules)
        self._documents: OrderedDict[bytes, _Document] = OrderedDict()
        # How many operations each path answered; benchmarks and tests read them.
        self.counts = {"compiled": 0, "fallback": 0}

    def _document(self, query: str, operation_name: str | None) -> _Document:
        key = document_key(query, operation_name)
        entry = self._documents.get(key)
        if entry is not None:
            self._documents.move_to_end(key)
            return entry
        entry = self._prepare(query, operation_name)
        self._documents[key] = entry
        if len(self._documents) > self.max_documents:
            self._documents.popitem(last=False)
        return entry

    def _prepare(self, query: str, operation_name: str | None) -> _Document:
        try:
            document = parse(query, max_tokens=self._max_tokens)
        except GraphQLError:
            return _Document(unsupported="does not parse")
        if validate_document(self.schema._schema, document, self._rules):
            return _Document(unsupported="not valid")
        try:
            operation = find_operation(document, operation_name)
        except Unsupported as exc:
            return _Document(unsupported=str(exc))
        if operation.operation is not OperationType.QUERY:
            return _Document(unsupported=f"a {operation.operation.value}")
        return _Document(document, operation, directive_variables=directive_variables(document))

    def _plan(self, entry: _Document, variables: dict[str, Any], operation_name: str | None) -> Any:
        assert entry.document is not None
        values = tuple(variables.get(name) for name in entry.directive_variables)
        plan = entry.plans.get(values)
        if plan is None:
            try:
                plan = compile_operation(
                    self.schema._schema,
                    entry.document,
                    operation_name,
                    dict(zip(entry.directive_variables, values, strict=True)),
                )
                attach_generated_functions(plan)
            except Unsupported as exc:
                logger.debug("strawberry runs this document: %s", exc)
                plan = str(exc)
            entry.plans[values] = plan
        return plan

    async def execute(
        self,
        query: str,
        operation_name: str | None,
        variables: dict[str, Any] | None,
        context: GraphContext,
    ) -> ExecutionResult | None:
        """The operation's result through its plan; None when strawberry must answer."""
        result = await self._execute(query, operation_name, variables, context)
        self.counts["fallback" if result is None else "compiled"] += 1
        return result

    async def _execute(
        self,
        query: str,
        operation_name: str | None,
        variables: dict[str, Any] | None,
        context: GraphContext,
    ) -> ExecutionResult | None:
        entry = self._document(query, operation_name)
        if entry.unsupported is not None:
            return None
        assert entry.document is not None and entry.operation is not None
        ctx = context.fork()
        # The plan never cancels one field under another: no shields on shared loads.
        ctx.shield_loads = False
        try:
            return await self._run(entry, operation_name, variables, ctx)
        finally:
            # Over, its errors final: no reference cycle through them (errors.forget_tracebacks).
            ctx.finish()

    async def _run(
        self,
        entry: _Document,
        operation_name: str | None,
        variables: dict[str, Any] | None,
        ctx: GraphContext,
    ) -> ExecutionResult | None:
        assert entry.document is not None and entry.operation is not None
        if not ctx.cluster.ready:
            return None
        coerced = get_variable_values(
            self.schema._schema, entry.operation.variable_definitions or (), variables or {}
        )
        if isinstance(coerced, list):  # coercion errors: strawberry reports them
            return None
        try:
            admit(
                self.schema.gauge,
                self.schema.limits,
                self.schema._schema,
                entry.document,
                ctx.cluster,
                operation_name=operation_name,
                variables=variables,
            )
        except GraphUserError:
            return None
        plan = self._plan(entry, coerced.coerced, operation_name)
        if isinstance(plan, str):
            return None
        run = PlanRun(ctx, coerced)
        try:
            data = await run.execute(plan)
        except (Fallback, ResultBudgetError) as exc:
            logger.debug("strawberry answers instead of the plan: %s", exc)
            forget_tracebacks([exc])
            return None
        finally:
            forget_tracebacks([*run.errors, *ctx.partial_errors])
        errors = [*run.errors, *ctx.partial_errors]
        if any(is_internal(e) for e in errors):
            return None
        if len(errors) > 1:
            errors = in_response_order(data, errors)
        return ExecutionResult(data=data, errors=errors or None)
