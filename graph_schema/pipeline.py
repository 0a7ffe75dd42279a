"""Every operation's policies, declared once, for strawberry's executor and the compiled plan.

Each operation, over HTTP or graphql-transport-ws, passes strawberry's own
pipeline (parse, validate, execute) and these policies on it, whichever
executor answers:

- a ``GraphContext`` of its own, forked from the request's or socket's, so
  the operations of one WebSocket keep their loaders, errors and budgets
  apart; ended once every error is logged, so a failing query leaves no
  reference cycle behind;
- the token limit and the schema's validation rules (``validation_rules``);
- parsing through strawberry's parser cache, large documents in a thread
  (``parsing.py``);
- admission before validation (``admission.py``), then validation through
  strawberry's validation cache (``KnownDocuments``);
- the parts of aggregate lists that could not be fetched added as errors,
  every error in response order (``errors.in_response_order``), an
  exhausted result budget reported once;
- internal errors masked (strawberry's ``MaskErrors``);
- over HTTP, only the operation types the request's method may carry
  (``GraphContext.operation_types``);
- a query held to the server's time limit, the compiled plan included, and
  reported to the server's metrics (``QueryReport``); subscriptions are
  neither, meant to run for as long as the client listens.

The compiled plan answers in strawberry's executing step: ``on_execute``
sets the operation's result when the plan answers (strawberry then skips
graphql-core's executor) and yields without doing anything when it
declines (``compiled/documents.py``).

One extension rather than one per policy: strawberry builds every phase's
hooks from every extension on every operation, and for a dozen extensions
that cost more than the compiled plan's whole answer to a dashboard's query
(see ``bench/README.md``, section 13).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from graphql import ASTValidationRule, DocumentNode, GraphQLError, GraphQLSchema, specified_rules
from graphql import ExecutionResult as GraphQLExecutionResult
from strawberry.extensions import (
    AddValidationRules,
    DisableIntrospection,
    MaskErrors,
    MaxAliasesLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.types import ExecutionContext, ExecutionResult, StreamExecutionResult

from .admission import SizeGauge, admit_operation
from .context import GraphContext
from .errors import (
    RequestTimeoutError,
    ResultBudgetError,
    forget_tracebacks,
    in_response_order,
    is_internal,
)
from .internals import (
    OperationType,
    SchemaExtensionsRunner,
    answer_operation,
    cached_parse,
    cached_validate,
    graphql_schema,
)
from .limits import SchemaLimits
from .parsing import CACHED_DOCUMENTS, parse_cached

if TYPE_CHECKING:
    from .compiled.documents import CompiledDocuments

__all__ = ["OperationPolicies", "Policies", "PoliciesRunner", "QueryReport", "validation_rules"]

logger = logging.getLogger(__name__)


def validation_rules(limits: SchemaLimits) -> tuple[type[ASTValidationRule], ...]:
    """The schema's validation rules, graphql-core's and its own, made once per schema.

    strawberry's limiters make new rule classes for every instance, and the
    validation cache keys on the classes: the same ones every time, or it never hits.
    """
    limiters: list[AddValidationRules] = [
        # Introspection fields (__schema, __type) are not counted, so
        # GraphiQL's deep introspection query passes.
        QueryDepthLimiter(max_depth=limits.max_depth),
        MaxAliasesLimiter(max_alias_count=limits.max_aliases),
    ]
    if not limits.introspection:
        limiters.append(DisableIntrospection())
    return (*specified_rules, *(rule for limiter in limiters for rule in limiter.validation_rules))


class QueryReport(Protocol):
    """Where each query's time and outcome go (the server's metrics)."""

    def __call__(self, ec: ExecutionContext, seconds: float, timed_out: bool) -> None:
        """One query ended after ``seconds``; its result is ``ec.result`` (None if it failed)."""


class KnownDocuments:
    """strawberry's validation cache, looked up first by the document's identity.

    The validation cache hashes the whole document on every lookup
    (graphql-core's nodes hash their fields recursively: half of the calls
    the pipeline adds to a dashboard's query). The parser cache hands back one
    object per text, so a document seen before is found here by identity;
    each entry holds its document, so no other can take its id meanwhile.
    """

    def __init__(self, validate: Callable[..., Any], size: int) -> None:
        self.validate = validate
        self.size = size
        self._known: dict[int, tuple[DocumentNode, Any, list[GraphQLError]]] = {}

    def __call__(
        self, schema: GraphQLSchema, document: DocumentNode, rules: Any
    ) -> list[GraphQLError]:
        """The document's validation errors under ``rules`` (the same tuple every time)."""
        known = self._known.get(id(document))
        if known is not None and known[0] is document and known[1] is rules:
            return known[2]
        errors: list[GraphQLError] = self.validate(schema, document, rules)
        if len(self._known) >= self.size:
            del self._known[next(iter(self._known))]
        self._known[id(document)] = (document, rules, errors)
        return errors


@dataclass(frozen=True, slots=True)
class Policies:
    """What every operation of one schema is held to; built once per schema."""

    limits: SchemaLimits
    gauge: SizeGauge
    rules: tuple[type[ASTValidationRule], ...]
    parse: Callable[..., Any]
    validate: Callable[..., Any]
    masking: MaskErrors
    compiled: CompiledDocuments | None = None
    time_limit: float | None = None
    report: QueryReport | None = None

    @classmethod
    def of(
        cls,
        limits: SchemaLimits,
        gauge: SizeGauge,
        *,
        compiled: CompiledDocuments | None = None,
        time_limit: float | None = None,
        report: QueryReport | None = None,
    ) -> Policies:
        """The policies of a schema with these limits, measuring the cluster with ``gauge``;
        ``compiled`` answers the queries its plans cover."""
        return cls(
            limits,
            gauge,
            validation_rules(limits),
            cached_parse(CACHED_DOCUMENTS),
            KnownDocuments(cached_validate(CACHED_DOCUMENTS), CACHED_DOCUMENTS),
            MaskErrors(should_mask_error=is_internal),
            compiled,
            time_limit,
            report,
        )

    def extension(self) -> OperationPolicies:
        """A new operation's extension (the schema takes this as a factory)."""
        return OperationPolicies(self)


class OperationPolicies(SchemaExtension):
    """The schema's policies on one operation (see the module's docstring).

    The first of the schema's extensions: it makes the operation's context
    before the others run and ends it after they have.
    """

    def __init__(self, policies: Policies) -> None:
        super().__init__()
        self.policies = policies
        self._streamed = False
        self._deadline: float | None = None
        self._subscription = False
        self._timed_out = False

    async def on_operation(self) -> AsyncIterator[None]:
        started = time.perf_counter()
        ec = self.execution_context
        policies = self.policies
        if policies.time_limit is not None:
            self._deadline = asyncio.get_running_loop().time() + policies.time_limit
        ec.parse_options["max_tokens"] = policies.limits.max_tokens
        ec.validation_rules = policies.rules
        ctx = ec.context
        fork = None
        if isinstance(ctx, GraphContext):
            if ctx.operation_types is not None:
                ec.allowed_operations = ctx.operation_types
            fork = ec.context = ctx.fork()
        try:
            # Parsed, admitted and validated here, before strawberry's own steps (which
            # then find the work done): a hook of each phase would cost more.
            await parse_cached(ec, policies.parse)
            self._admit_and_validate()
            yield
            # A stream's results were masked one by one as they went out.
            if not self._streamed:
                self._mask(ec.result)
        finally:
            if fork is not None:
                fork.finish()
            # Those graphql-core raised, masked ones included, and those in the result.
            forget_tracebacks(ec.pre_execution_errors or ())
            forget_tracebacks(getattr(ec.result, "errors", None) or ())
            if policies.report is not None and not self._subscription:
                policies.report(ec, time.perf_counter() - started, self._timed_out)

    def _admit_and_validate(self) -> None:
        ec = self.execution_context
        policies = self.policies
        # Admission first: validation's overlap check is what a wide document makes slow.
        admit_operation(ec, policies.gauge, policies.limits)
        # Not over admission's refusal (strawberry's ValidationCache would be).
        if ec.pre_execution_errors is None and ec.graphql_document is not None:
            ec.pre_execution_errors = policies.validate(
                graphql_schema(ec.schema), ec.graphql_document, ec.validation_rules
            )

    async def on_execute(self) -> AsyncIterator[None]:
        ec = self.execution_context
        kind = ec.operation_type
        if kind is OperationType.SUBSCRIPTION:
            self._subscription = True
            yield
            return
        try:
            async with asyncio.timeout_at(self._deadline):
                compiled = self.policies.compiled
                if compiled is not None and kind is OperationType.QUERY:
                    answer = await compiled.answer(ec)
                    if answer is not None:
                        answer_operation(ec, answer)
                yield
        except TimeoutError:
            self._timed_out = True
            assert self.policies.time_limit is not None
            raise RequestTimeoutError(self.policies.time_limit) from None
        result = ec.result
        _keep_first_budget_error(result)
        self._attach_partial_errors(result)

    def on_stream_result(self, result: StreamExecutionResult) -> Iterator[None]:
        # Each subscription tick (and a query over a WebSocket): its errors go out
        # with its result, masked.
        self._streamed = True
        self._attach_partial_errors(result)
        _keep_first_budget_error(result)
        self._mask(result)
        yield

    async def _stream_result(self, result: StreamExecutionResult) -> AsyncIterator[None]:
        for _ in self.on_stream_result(result):
            yield

    # The hooks as context managers, wrapped once here rather than per operation (below).
    operation = contextlib.asynccontextmanager(on_operation)
    executing = contextlib.asynccontextmanager(on_execute)
    stream_result = contextlib.asynccontextmanager(_stream_result)

    def _attach_partial_errors(self, result: object) -> None:
        if not isinstance(result, ExecutionResult | GraphQLExecutionResult):
            return
        ctx = self.execution_context.context
        if isinstance(ctx, GraphContext) and ctx.partial_errors:
            for error in ctx.partial_errors:
                logger.info("partial result: %s", error.message)
            result.errors = [*(result.errors or []), *ctx.partial_errors]
            ctx.partial_errors = []
        if result.errors and len(result.errors) > 1:
            # Deterministic, whichever executor answered (see errors.py).
            result.errors = in_response_order(result.data, result.errors)

    def _mask(self, result: object) -> None:
        errors: list[GraphQLError] | None = getattr(result, "errors", None)
        if errors and any(is_internal(e) for e in errors):
            masking = self.policies.masking
            masked = [
                masking.anonymise_error(e) if masking.should_mask_error(e) else e for e in errors
            ]
            setattr(result, "errors", masked)  # noqa: B010 (any result type with errors)


class _NoHooks:
    """A phase the schema's policies have no hook in (parsing and validation: see
    ``OperationPolicies.on_operation``)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_HOOKS = _NoHooks()


class PoliciesRunner(SchemaExtensionsRunner):
    """strawberry's extension runner for a schema whose one extension is its policies.

    strawberry's own runner looks up every extension's hook for every phase
    of every operation, and wraps each anew (``ExtensionContextManagerBase``):
    about a third of strawberry's cost per operation, more than a small
    query's own. Here the one extension's hooks are wrapped once, in its
    class, and the phases it has no hook in cost nothing. The phases and what
    strawberry does around them are strawberry's own: this is the runner
    ``Schema.create_extensions_runner`` hands its pipeline. Asynchronous
    execution only (the server never executes synchronously).
    """

    def __init__(
        self, execution_context: ExecutionContext, extensions: list[SchemaExtension]
    ) -> None:
        super().__init__(execution_context, extensions)
        (policies,) = extensions
        assert isinstance(policies, OperationPolicies)
        self.policies = policies

    def operation(self) -> Any:
        """The operation's hook: its context, parsing, admission, validation, masking."""
        return self.policies.operation()

    def parsing(self) -> Any:
        """No hook: parsed in the operation's."""
        return _NO_HOOKS

    def validation(self) -> Any:
        """No hook: admitted and validated in the operation's."""
        return _NO_HOOKS

    def executing(self) -> Any:
        """The executing hook: the time limit, the plan, partial errors."""
        return self.policies.executing()

    def on_stream_result(self, result: StreamExecutionResult) -> Any:
        """A streamed result's hook: its partial errors, masked."""
        return self.policies.stream_result(result)

    async def get_extensions_results(self, ctx: ExecutionContext) -> dict[str, Any]:
        """The policies add nothing to a result's ``extensions``."""
        return dict(ctx.extensions_results)


def _keep_first_budget_error(result: object) -> None:
    """An exhausted result budget reported once, not once for every field refused after it.

    Past the budget every list field fails, and a query over many pods would
    otherwise carry thousands of copies of the same error.
    """
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
