"""strawberry's ASGI view for gpugraph: per-request contexts, query metrics, shared executions."""

from __future__ import annotations

import asyncio
import functools
import time
import warnings
from collections.abc import Sequence
from typing import Any

import orjson
from cross_web import HTTPException
from graphql import ExecutionResult
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLRequestData
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionContext
from strawberry.types import ExecutionResult as StrawberryExecutionResult

from graph_schema.context import GraphContext
from graph_schema.errors import RequestTimeoutError
from graph_schema.identity import asks_who, identity_of
from graph_schema.interfaces import Cluster, SnapshotSource
from graph_schema.internals import InvalidOperationTypeError, OperationType, parse_content_type
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
from ..http.request_json import CaseBlindContentType, decode_json, parse_request_json
from ..http.response_media import GRAPHQL_RESPONSE_JSON, is_request_error, wants_graphql_response
from ..http.responses import graphql_error_response
from ..http.ws_messages import CheckedWebSocketAdapter
from ..metrics import Metrics
from ..shared_calls import CallCancelledError, being_cancelled
from .shared_results import SharedResults

# Operation types each HTTP method may carry; subscriptions only over the WebSocket.
HTTP_OPERATION_TYPES: dict[str, frozenset[OperationType]] = {
    "GET": frozenset({OperationType.QUERY}),
    "POST": frozenset({OperationType.QUERY, OperationType.MUTATION}),
}

__all__ = [
    "GraphQLApp",
    "QueryMetrics",
    "RequestTimeoutError",
    "quiet_cut_off_executions",
]


@functools.lru_cache(maxsize=16)
def media_type_of(content_type: str) -> str:
    """A Content-Type header's media type, as strawberry reads it.

    Remembered: clients send a handful of headers, and strawberry's parser
    (the standard library's e-mail header code) costs more than a small
    query's own answer. Sixteen, each within uvicorn's header limit: what a
    client sending a new header each time can hold is small.
    """
    media_type, _ = parse_content_type(content_type)
    return media_type


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


# GraphQL over HTTP's GET parameters.
_GET_PARAMETERS = ("query", "variables", "operationName", "extensions")


class QueryMetrics:
    """The schema's report of each query (its time, and what went wrong) to the server's metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def __call__(self, ec: ExecutionContext, seconds: float, timed_out: bool) -> None:
        """Record one query that ended after ``seconds``."""
        self.metrics.query_seconds.observe(seconds)
        kind = "timeout" if timed_out else error_kind(ec.result)
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

    request_adapter_class = CaseBlindContentType
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
        # Counts answers served from another request's execution, which the schema's
        # report (a policy of that execution) does not see.
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """strawberry's entry point; a request it refuses gets GraphQL's error shape, not text."""
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        request = Request(scope, receive=receive)
        try:
            response = await self.run(request)
        except HTTPException as exc:
            response = graphql_error_response(exc.status_code, exc.reason, request.headers)
        except (asyncio.CancelledError, CallCancelledError):
            if being_cancelled():
                raise
            # Work the request waited on was cancelled under it, not the request: an
            # answer saying so, where a CancelledError would reach uvicorn as a 500.
            reason = "the server cancelled work this request waited on; try again"
            response = graphql_error_response(503, reason, request.headers)
        await response(scope, receive, send)

    async def parse_http_body(self, request: Any) -> Any:
        """strawberry's, but a POST body of another media type than JSON is a 415 saying so."""
        # strawberry's own test of the media type, so it never refuses one this passes.
        media_type = media_type_of(request.content_type or "")
        if request.method == "POST" and "application/json" not in media_type:
            given = f"not {media_type}" if media_type else "this request names none"
            raise HTTPException(
                415, f"a GraphQL request is JSON, sent as Content-Type: application/json ({given})"
            )
        if request.method == "GET":
            params = request.query_params
            repeated = [n for n in _GET_PARAMETERS if len(params.getlist(n)) > 1]
            if repeated:
                # Which one the client meant is not ours to guess (strawberry takes the last).
                raise HTTPException(400, f"the query parameter {repeated[0]} is given twice")
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
            # strawberry would let a subscription in over GET and POST, to fail inside
            # as if it were a query; refused, the view's 400 names the WebSocket.
            operation_types=(
                HTTP_OPERATION_TYPES.get(request.method, frozenset())
                if isinstance(request, Request)
                else None
            ),
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
        """strawberry's, shared with identical operations within the snapshot TTL; a
        subscription over HTTP is a 400 naming the WebSocket."""
        try:
            variables = orjson.dumps(request_data.variables, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not JSON-shaped (e.g. uploads): run it alone
            variables = None

        executed = False

        async def execute() -> Any:
            nonlocal executed
            executed = True
            try:
                return await super(GraphQLApp, self).execute_single(
                    request=request,
                    request_adapter=request_adapter,
                    sub_response=sub_response,
                    context=context,
                    root_value=root_value,
                    request_data=request_data,
                )
            except HTTPException as exc:
                refused = exc.__cause__
                if (
                    isinstance(refused, InvalidOperationTypeError)
                    and refused.operation_type is OperationType.SUBSCRIPTION
                ):
                    reason = f"{exc.reason}; subscribe over the graphql-transport-ws WebSocket"
                    raise HTTPException(400, f"{reason} at this URL") from None
                raise

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
            # Answered from another request's execution, which the schema's report counted once.
            self.metrics.query_seconds.observe(time.perf_counter() - started)
            kind = error_kind(result)
            if kind is not None:
                self.metrics.query_errors.labels(kind=kind).inc()
        return result
