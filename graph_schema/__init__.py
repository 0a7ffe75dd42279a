"""gpugraph's GraphQL schema: types, resolvers and dataloaders."""

from .context import GraphContext, make_context
from .errors import GraphUserError
from .interfaces import AgentUnavailableError, Cluster, Received, SnapshotSource
from .limits import SchemaLimits, SubscriptionLimiter, SubscriptionLimitError
from .records import ContainerRecord, NodeRecord, PodRecord
from .schema import GraphSchema, build_schema
from .selectors import LabelSelector, LabelSelectorError, parse_label_selector
from .state import SharedState

__all__ = [
    "AgentUnavailableError",
    "Cluster",
    "ContainerRecord",
    "GraphContext",
    "GraphSchema",
    "GraphUserError",
    "LabelSelector",
    "LabelSelectorError",
    "NodeRecord",
    "PodRecord",
    "Received",
    "SchemaLimits",
    "SharedState",
    "SnapshotSource",
    "SubscriptionLimitError",
    "SubscriptionLimiter",
    "build_schema",
    "make_context",
    "parse_label_selector",
]
