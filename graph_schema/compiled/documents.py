"""The compiled path behind strawberry's own execution step: plans by document hash.

The schema's policies (``pipeline.py``) ask ``CompiledDocuments.answer``
in strawberry's executing step, inside the time limit, after strawberry has
parsed the document (its parser cache), admitted it and validated it (its
validation cache) with the schema's one list of rules, for HTTP and
graphql-transport-ws alike. When the plan answers, its result is the
operation's and strawberry skips graphql-core's executor; what follows
(errors logged, partial errors added and ordered, the one budget error,
masking, metrics) is the same for both. When anything on the way says no
(not covered, not ready, variables strawberry must report, a result too
large, an internal error), ``answer`` returns None and strawberry executes
the operation, so an answer never depends on what the plan covers.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from graphql import DocumentNode, GraphQLSchema, OperationDefinitionNode
from graphql import ExecutionResult as GraphQLExecutionResult
from graphql.execution import get_variable_values
from strawberry.types import ExecutionContext

from ..context import GraphContext
from ..errors import ResultBudgetError, forget_tracebacks, is_internal
from ..internals import graphql_schema
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
    """One (document, operation name): its operation and its plans, or why strawberry runs it."""

    document: DocumentNode | None = None
    operation: OperationDefinitionNode | None = None
    unsupported: str | None = None
    directive_variables: tuple[str, ...] = ()
    plans: dict[tuple[Any, ...], ObjectPlan | str] = field(default_factory=dict)


class CompiledDocuments:
    """The compiled path of one schema: plans by document hash, and how often each path ran.

    ``encoded``: the schema's answers only ever leave as orjson's bytes (the
    server's views), so the plan may hand back parts of ``data`` already
    encoded, as ``orjson.Fragment`` (``codegen.encoded``); otherwise ``data``
    is plain dicts and lists, for callers that read it.
    """

    def __init__(self, *, max_documents: int = MAX_DOCUMENTS, encoded: bool = False) -> None:
        self.max_documents = max_documents
        self.encoded = encoded
        self._documents: OrderedDict[bytes, _Document] = OrderedDict()
        # How many queries each path answered; benchmarks and tests read them.
        self.counts = {"compiled": 0, "fallback": 0}

    async def answer(self, ec: ExecutionContext) -> GraphQLExecutionResult | None:
        """A query's result through its plan; None when strawberry must answer it."""
        try:
            result = await self._answer(ec)
        except Exception:
            logger.exception("the compiled plan failed; strawberry answers instead")
            result = None
        self.counts["fallback" if result is None else "compiled"] += 1
        return result

    def _document(
        self, query: str, operation_name: str | None, document: DocumentNode
    ) -> _Document:
        key = document_key(query, operation_name)
        entry = self._documents.get(key)
        if entry is not None:
            self._documents.move_to_end(key)
            return entry
        try:
            operation = find_operation(document, operation_name)
        except Unsupported as exc:
            entry = _Document(unsupported=str(exc))
        else:
            entry = _Document(
                document, operation, directive_variables=directive_variables(document)
            )
        self._documents[key] = entry
        if len(self._documents) > self.max_documents:
            self._documents.popitem(last=False)
        return entry

    def _plan(
        self,
        schema: GraphQLSchema,
        entry: _Document,
        variables: dict[str, Any],
        operation_name: str | None,
    ) -> ObjectPlan | str:
        assert entry.document is not None
        values = tuple(variables.get(name) for name in entry.directive_variables)
        plan = entry.plans.get(values)
        if plan is None:
            try:
                plan = compile_operation(
                    schema,
                    entry.document,
                    operation_name,
                    dict(zip(entry.directive_variables, values, strict=True)),
                )
                attach_generated_functions(plan, encode=self.encoded)
            except Unsupported as exc:
                logger.debug("strawberry runs this document: %s", exc)
                plan = str(exc)
            entry.plans[values] = plan
        return plan

    async def _answer(self, ec: ExecutionContext) -> GraphQLExecutionResult | None:
        ctx = ec.context
        document = ec.graphql_document
        if not isinstance(ctx, GraphContext) or not ec.query or document is None:
            return None
        if not ctx.cluster.ready:
            return None
        operation_name = ec.operation_name
        entry = self._document(ec.query, operation_name, document)
        if entry.unsupported is not None:
            return None
        assert entry.operation is not None
        schema = graphql_schema(ec.schema)
        coerced = get_variable_values(
            schema, entry.operation.variable_definitions or (), ec.variables or {}
        )
        if isinstance(coerced, list):  # coercion errors: strawberry reports them
            return None
        plan = self._plan(schema, entry, coerced.coerced, operation_name)
        if isinstance(plan, str):
            return None
        # A context of its own, which a decline drops whole; its loads unshielded,
        # since the plan never cancels one field under another.
        run_ctx = ctx.fork(shielded=False)
        run = PlanRun(run_ctx, coerced)
        try:
            data = await run.execute(plan)
        except (Fallback, ResultBudgetError) as exc:
            logger.debug("strawberry answers instead of the plan: %s", exc)
            forget_tracebacks([exc, *run.errors, *run_ctx.partial_errors])
            return None
        finally:
            run_ctx.finish()
        partial = run_ctx.partial_errors
        if any(is_internal(e) for e in (*run.errors, *partial)):
            forget_tracebacks([*run.errors, *partial])
            return None
        # The schema's partial-results extension adds them to the answer and orders
        # every error, as it does strawberry's.
        ctx.partial_errors.extend(partial)
        return GraphQLExecutionResult(data=data, errors=run.errors or None)
