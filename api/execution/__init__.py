"""GraphQL execution over HTTP and WebSocket: strawberry's view, query metrics, shared results."""

from .shared_results import SharedResults
from .view import GraphQLApp, QueryMetrics, RequestTimeoutError

__all__ = ["GraphQLApp", "QueryMetrics", "RequestTimeoutError", "SharedResults"]
