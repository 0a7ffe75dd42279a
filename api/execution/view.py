"""strawberry's ASGI view for gpugraph: per-request contexts, time limits, shared executions."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, ClassVar

import orjson
from cross_web import HTTPException
from graphql import ExecutionResult, GraphQLError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError, MissingQueryError
from strawberry.extensions import SchemaExtension
from strawberry.http import GraphQLRequestData
from strawberry.http.parse_content_type import parse_content_type
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult as StrawberryExecutionResult
from strawberry.types.graphql import OperationType

from graph_schema.compiled.documents import CompiledDocuments
from graph_schema.context import GraphContext
from graph_schema.errors import GraphUserError
from graph_schema.identity import asks_who, identity_of
from graph_schema.interfaces import Cluster, SnapshotSource
from graph_schema.schema import GraphSchema
from graph_schema.state import SharedState

from ..auth import (
    KubernetesAuth,
    RejectedTokenError,
    ReviewUnavailableError,
    authorization_param,
    bearer_token,
    caller_of,
    request_scope,
)
from ..http.graphiql import OfflineGraphiQL
from ..http.request_json import decode_json, parse_request_json
from ..http.response_media import GRAPHQL_RESPONSE_JSON, is_request_error, wants_graphql_response
from ..http.responses import graphql_error_response
from ..http.ws_messages import CheckedWebSocketAdapter
from ..metrics import Metrics
from .shared_results import SharedResults

# Operation types each HTTP method may carry; subscriptions only over the WebSocket.
HTTP_OPERATION_TYPES: dict[str, frozenset[OperationType]] = {
    "GET": frozenset({OperationType.QUERY}),
    "POST": frozenset({OperationType.QUERY, OperationType.MUTATION}),
}

__all__ = ["GraphQLApp", "QueryTimer", "RequestTimeoutError", "quiet_cut_off_executions"]


def quiet_cut_off_executions() -> None:
    """Keep the leftovers of executions cut off by the time limit out of the log.

    The time limit cancels an execution mid-flight. graphql-core creates each
    field's coroutine before the task that will await it starts; a task
    cancelled before its first step leaves that coroutine never awaited. It
    holds no resource and the cycle collector frees it, but Python reports a
    RuntimeWarning wherever that collection happens: noise for every timed-out
    query. Only graphql-core's executor coroutines and strawberry's resolver
    wrapper are ignored, and the compiled path's own (``PlanRun``); any other
    unawaited coroutine is still reported.
    """
    warnings.filterwarnings(
        "ignore",
        message=r"coroutine '(Executor\.|GraphQLCoreConverter\.from_resolver\.|PlanRun\.)[\w.<>]*' "
        r"was never awaited",
        category=RuntimeWarning,
    )


quiet_cut_off_executions()


class RequestTimeoutError(GraphUserError):
    """An operation ran past the server's time limit."""

    extensions: ClassVar[dict[str, str]] = {"code": "REQUEST_TIMEOUT"}

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request exceeded the server's {seconds:g} s time limit")


class QueryTimer(SchemaExtension):
    """Holds every query to the server's time limit and records it in the metrics.

    A schema extension rather than a wrapper around the HTTP handler, so that
    queries over a WebSocket are bounded and counted too. Subscriptions are
    neither: they are meant to run for as long as the client listens.
    """

    def __init__(self, metrics: Metrics, seconds: float) -> None:
        super().__init__()
        self.metrics = metrics
        self.seconds = seconds
        self._deadline = 0.0
        self._subscription = False
        self._timed_out = False

    def on_operation(self) -> Iterator[None]:
        started = time.perf_counter()
        self._deadline = asyncio.get_running_loop().time() + self.seconds
        try:
            yield
        finally:
            if not self._subscription:
                self.metrics.query_seconds.observe(time.perf_counter() - started)
                self._count_errors()

    async def on_execute(self) -> AsyncIterator[None]:
        self._subscription = self.execution_context.operation_type is OperationType.SUBSCRIPTION
        if self._subscription:
            yield
            return
        try:
            async with asyncio.timeout_at(self._deadline):
                yield
        except TimeoutError:
            self._timed_out = True
            raise RequestTimeoutError(self.seconds) from None

    def _count_errors(self) -> None:
        kind = "timeout" if self._timed_out else error_kind(self.execution_context.result)
        if kind is not None:
            self.metrics.query_errors.labels(kind=kind).inc()


def error_kind(result: object) -> str | None:
    """The query_errors label for a result: timeout, invalid (no data), partial, or None."""
    errors = getattr(result, "errors", None)
    if not errors:
        return None
    if any((error.extensions or {}).get("code") == "REQUEST_TIMEOUT" for error in errors):
        return "timeout"
    return "invalid" if getattr(result, "data", None) is None else "partial"


class GraphQLApp(OfflineGraphiQL, GraphQL[Any, None]):
    """strawberry's ASGI view, with a GraphContext per request or socket.

    Only graphql-transport-ws is offered: the legacy ``graphql-ws`` protocol
    has no init timeout in strawberry and is not what the docs promise.
    """

    websocket_adapter_class = CheckedWebSocketAdapter

    def __init__(
        self,
        schema: GraphSchema,
        *,
        cluster: Cluster,
        snapshots: SnapshotSource,
        graphiql: bool,
        allowed_origins: Sequence[str] = (),
        shared: SharedResults | None = None,
        auth: KubernetesAuth | None = None,
        metrics: Metrics | None = None,
        compiled: CompiledDocuments | None = None,
        request_timeout: float | None = None,
    ) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql" if graphiql else None,
            allowed_origins=allowed_origins,
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
        )
        self.cluster = cluster
        self.snapshots = snapshots
        # Server-wide: subscription slots and GPU location hints outlive requests.
        self.state: SharedState = schema.state
        self.shared = shared if shared is not None else SharedResults(ttl=0.0)
        self.auth = auth
        # Counts answers served from another request's execution, which QueryTimer
        # (an extension of that execution) does not see.
        self.metrics = metrics
        # Queries the plan covers skip strawberry's executor; the rest fall back to it.
        self.compiled = compiled
        self.request_timeout = request_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """strawberry's entry point; a request it refuses gets GraphQL's error shape, not text."""
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        request = Request(scope, receive=receive)
        try:
            response = await self.run(request)
        except HTTPException as exc:
            response = graphql_error_response(exc.status_code, exc.reason, request.headers)
        await response(scope, receive, send)

    async def parse_http_body(self, request: Any) -> Any:
        """strawberry's, but a POST body of another media type than JSON is a 415 saying so."""
        # strawberry's own test of the media type, so it never refuses one this passes.
        media_type, _ = parse_content_type(request.content_type or "")
        if request.method == "POST" and "application/json" not in media_type:
            given = f"not {media_type}" if media_type else "this request names none"
            raise HTTPException(
                415, f"a GraphQL request is JSON, sent as Content-Type: application/json ({given})"
            )
        return await super().parse_http_body(request)

    def encode_json(self, data: object) -> str:
        """WebSocket messages from orjson (several times faster than the standard library's)."""
        return orjson.dumps(data).decode()

    def decode_json(self, data: str | bytes) -> object:
        """JSON with a nesting limit (HTTP bodies and WebSocket messages alike)."""
        return decode_json(data)

    def parse_json(self, data: str | bytes) -> Any:
        """A request's JSON: an object, or 400 with a one-line reason."""
        return parse_request_json(data)

    async def get_sub_response(self, request: Request | WebSocket) -> Response:
        """strawberry's sub-response, remembered on the request for ``process_result``."""
        sub_response = await super().get_sub_response(request)
        request.state.gpugraph_sub_response = sub_response
        return sub_response

    async def process_result(self, request: Request, result: StrawberryExecutionResult) -> Any:
        """The response body; with graphql-response+json, a request error is a 400 without data."""
        body = await super().process_result(request, result)
        sub_response = getattr(request.state, "gpugraph_sub_response", None)
        if sub_response is None or not wants_graphql_response(request.headers):
            return body
        sub_response.gpugraph_media_type = GRAPHQL_RESPONSE_JSON
        if is_request_error(result.data, result.errors):
            body.pop("data", None)
            sub_response.status_code = 400
        return body

    def create_response(self, response_data: Any, sub_response: Response) -> Response:
        """strawberry's JSON response, from orjson, in the media type ``process_result`` chose."""
        response = Response(orjson.dumps(response_data), media_type="application/json")
        response.headers.raw.extend(sub_response.headers.raw)
        if sub_response.background:
            response.background = sub_response.background
        if sub_response.status_code:
            response.status_code = sub_response.status_code
        media_type = getattr(sub_response, "gpugraph_media_type", None)
        if media_type is not None:
            response.headers["content-type"] = f"{media_type}; charset=utf-8"
        return response

    async def get_context(self, request: Request | WebSocket, response: Any) -> Any:
        """The request's (or socket's) context; the schema forks it for each operation.

        With auth on, the caller comes from the auth middleware. A socket without
        one sees nothing until its connection_init carries a token.
        """
        return GraphContext(
            self.cluster,
            self.snapshots,
            self.state,
            request=request,
            response=response,
            scope=request_scope(request, self.auth),
            viewer=caller_of(request),
        )

    async def on_ws_connect(self, context: Any) -> Any:
        """With auth on, a socket not authenticated at the upgrade needs a token in
        connection_init's payload: ``{"Authorization": "Bearer <token>"}`` (the key in any case)."""
        if self.auth is None or not isinstance(context, GraphContext):
            return await super().on_ws_connect(context)
        if context.viewer is not None:
            return await super().on_ws_connect(context)
        token = bearer_token(authorization_param(context.connection_params))
        try:
            caller = await self.auth.authenticate(token)
        except RejectedTokenError as exc:
            raise ConnectionRejectionError({"reason": str(exc)}) from None
        except ReviewUnavailableError:
            raise ConnectionRejectionError(
                {"reason": "the Kubernetes API server cannot check credentials right now"}
            ) from None
        context.admit(caller.scope, caller)
        return await super().on_ws_connect(context)

    async def execute_single(  # type: ignore[override]
        self,
        request: Request,
        request_adapter: Any,
        sub_response: Any,
        context: Any,
        root_value: Any,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        """Execute one operation, shared with identical operations within the snapshot TTL."""
        try:
            variables = orjson.dumps(request_data.variables, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not JSON-shaped (e.g. uploads): run it alone
            variables = None

        executed = False

        def execute() -> Any:
            nonlocal executed
            executed = True
            return self._execute_unshared(request_adapter, context, root_value, request_data)

        if variables is None or request_data.extensions:
            return await execute()
        # Keyed by scope too: callers with different rights never share an answer;
        # and by caller where the document asks who is asking.
        query = request_data.query
        key = (
            context.scope,
            request_adapter.method,
            query,
            request_data.operation_name,
            variables,
            identity_of(context.viewer) if query and asks_who(query) else None,
        )
        started = time.perf_counter()
        result = await self.shared.run(key, execute, lambda: context.freshness.oldest)
        if not executed and self.metrics is not None:
            self.metrics.query_seconds.observe(time.perf_counter() - started)
            kind = error_kind(result)
            if kind is not None:
                self.metrics.query_errors.labels(kind=kind).inc()
        return result

    async def _execute_unshared(
        self,
        request_adapter: Any,
        context: Any,
        root_value: Any,
        request_data: GraphQLRequestData,
    ) -> StrawberryExecutionResult:
        """strawberry's ``execute_single``, without subscriptions.

        strawberry would run a subscription over plain HTTP as if it were a
        query and fail inside it; here it is a 400 naming the WebSocket.
        """
        method = request_adapter.method
        allowed = HTTP_OPERATION_TYPES.get(method, frozenset())
        if (
            self.compiled is not None
            and OperationType.QUERY in allowed
            and request_data.query
            and not request_data.extensions
            and isinstance(context, GraphContext)
        ):
            compiled = await self._execute_compiled(context, request_data)
            if compiled is not None:
                return compiled
        try:
            return await self.schema.execute(
                request_data.query,
                root_value=root_value,
                variable_values=request_data.variables,
                context_value=context,
                operation_name=request_data.operation_name,
                allowed_operation_types=allowed,
                operation_extensions=request_data.extensions,
            )
        except CannotGetOperationTypeError as exc:
            raise HTTPException(400, exc.as_http_error_reason()) from None
        except InvalidOperationTypeError as exc:
            reason = exc.as_http_error_reason(method)
            if exc.operation_type is OperationType.SUBSCRIPTION:
                reason += "; subscribe over the graphql-transport-ws WebSocket at this URL"
            raise HTTPException(400, reason) from None
        except MissingQueryError:
            raise HTTPException(400, "No GraphQL query found in the request") from None

    async def _execute_compiled(
        self, context: GraphContext, request_data: GraphQLRequestData
    ) -> StrawberryExecutionResult | None:
        """The operation through its plan, held to the time limit and counted as QueryTimer
        counts strawberry's; None when strawberry must answer it."""
        assert self.compiled is not None and request_data.query is not None
        started = time.perf_counter()
        result: StrawberryExecutionResult | None
        try:
            async with asyncio.timeout(self.request_timeout):
                result = await self.compiled.execute(
                    request_data.query,
                    request_data.operation_name,
                    request_data.variables,
                    context,
                )
        except TimeoutError:
            assert self.request_timeout is not None
            error = RequestTimeoutError(self.request_timeout)
            result = StrawberryExecutionResult(
                data=None, errors=[GraphQLError(str(error), original_error=error)]
            )
        if result is None:
            return None
        if self.metrics is not None:
            self.metrics.query_seconds.observe(time.perf_counter() - started)
            kind = error_kind(result)
            if kind is not None:
                self.metrics.query_errors.labels(kind=kind).inc()
        return result
