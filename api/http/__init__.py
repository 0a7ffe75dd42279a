"""HTTP plumbing around the graph: JSON responses, the body cap, ``/gpu-pods``, GraphiQL."""

from .body_limit import BodyLimits
from .gpu_pods import gpu_pods_endpoint
from .graphiql import OfflineGraphiQL, graphiql_routes
from .responses import json_response

__all__ = [
    "BodyLimits",
    "OfflineGraphiQL",
    "gpu_pods_endpoint",
    "graphiql_routes",
    "json_response",
]
