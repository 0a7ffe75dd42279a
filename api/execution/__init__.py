"""GraphQL execution over HTTP and WebSocket: strawberry's view, time limits, shared results."""

from .shared_results import SharedResults
from .view import GraphQLApp, QueryTimer, RequestTimeoutError

__all__ = ["GraphQLApp", "QueryTimer", "RequestTimeoutError", "SharedResults"]
