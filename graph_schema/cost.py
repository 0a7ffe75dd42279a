"""Admission by cost: refuse, before validation and execution, what could return too much.

The estimate is the worst-case number of result objects an operation could
produce, from its document alone and the cluster's current sizes (as
GitHub's node limit and Apollo Router's demand control do): every object
field counts one object per parent, and every list field counts as many as
the list can hold at most, e.g. ``Node.gpus`` the most GPUs any node has.
Entity lookups count one per representation. Fragments are costed once and
reused, so the estimate is linear in the document's size.

The same pass bounds validation's cost: graphql-core's overlapping-fields
check compares the fields of one (fragment-flattened) selection set pairwise,
so a document of repeated fields costs seconds inside the token limit. A
selection set flattening to more than ``max_fields_per_selection`` fields is
refused before validation runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLSchema,
    InlineFragmentNode,
    ListValueNode,
    NullValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
    get_named_type,
    is_list_type,
    is_non_null_type,
)
from graphql.type import GraphQLNamedType, GraphQLOutputType, is_composite_type

from .errors import GraphUserError
from .occupancy.fan_out import HISTORY_LIST_LIMIT, MAX_FIRST

__all__ = [
    "LIST_SIZES",
    "ClusterSizes",
    "CostError",
    "QueryCost",
    "SelectionTooWideError",
    "TooDeepError",
    "estimate",
]

# Past this nesting the depth limit refuses the document anyway; the walk stops
# here rather than recurse as deep as an attacker's document goes.
MAX_WALK_DEPTH = 64
# Ceiling on intermediate figures: exponential fragments cannot make huge ints.
CEILING = 10**15
# MIG instances one GPU can be split into (NVIDIA's maximum).
MAX_MIG_DEVICES = 7


@dataclass(frozen=True, slots=True)
class ClusterSizes:
    """The cluster's list sizes the estimate multiplies by (each at least 1)."""

    nodes: int
    pods: int
    pods_per_node: int
    gpus_per_node: int
    processes_per_gpu: int
    containers_per_pod: int

    def describe(self) -> str:
        """The sizes, as the refusal names them."""
        return (
            f"{self.nodes} nodes, {self.pods} pods, at most {self.pods_per_node} pods and "
            f"{self.gpus_per_node} GPUs per node, {self.processes_per_gpu} processes per GPU, "
            f"{self.containers_per_pod} containers per pod"
        )


def _per_node(field: FieldNode, whole: int, one_node: int) -> int:
    """``one_node`` when the field names a node (nodeName given and not null), else ``whole``."""
    for argument in field.arguments or ():
        if argument.name.value == "nodeName" and not isinstance(argument.value, NullValueNode):
            return one_node
    return whole


SizeRule = Callable[[ClusterSizes, FieldNode], int]

# The most items each object-list field can hold. Declared once, here; a test
# checks that every object-list field of the schema has a rule.
LIST_SIZES: dict[tuple[str, str], SizeRule] = {
    ("Query", "nodes"): lambda s, f: s.nodes,
    ("Query", "pods"): lambda s, f: _per_node(f, s.pods, s.pods_per_node),
    ("Query", "gpus"): lambda s, f: _per_node(f, s.nodes, 1) * s.gpus_per_node,
    ("Query", "gpuProcesses"): lambda s, f: (
        _per_node(f, s.nodes, 1) * s.gpus_per_node * s.processes_per_gpu
    ),
    ("Subscription", "gpuUpdates"): lambda s, f: _per_node(f, s.nodes, 1) * s.gpus_per_node,
    ("Node", "pods"): lambda s, f: s.pods_per_node,
    ("Node", "gpus"): lambda s, f: s.gpus_per_node,
    ("Gpu", "pods"): lambda s, f: min(s.processes_per_gpu, s.pods_per_node),
    ("Gpu", "processes"): lambda s, f: s.processes_per_gpu,
    ("Gpu", "migDevices"): lambda s, f: MAX_MIG_DEVICES,
    ("Pod", "containers"): lambda s, f: s.containers_per_pod,
    ("Pod", "gpuProcesses"): lambda s, f: s.gpus_per_node * s.processes_per_gpu,
    ("Pod", "gpus"): lambda s, f: s.gpus_per_node,
    ("Container", "gpuProcesses"): lambda s, f: s.gpus_per_node * s.processes_per_gpu,
    # History: a plain list holds at most HISTORY_LIST_LIMIT records, a page MAX_FIRST.
    ("Gpu", "history"): lambda s, f: HISTORY_LIST_LIMIT,
    ("Node", "gpuHistory"): lambda s, f: HISTORY_LIST_LIMIT,
    ("Pod", "gpuHistory"): lambda s, f: HISTORY_LIST_LIMIT,
    ("GpuHistoryConnection", "edges"): lambda s, f: MAX_FIRST,
    # GPU health events: lists and pages as history's; an event's processes are one GPU's.
    ("Gpu", "events"): lambda s, f: HISTORY_LIST_LIMIT,
    ("Node", "gpuEvents"): lambda s, f: HISTORY_LIST_LIMIT,
    ("Pod", "gpuEvents"): lambda s, f: HISTORY_LIST_LIMIT,
    ("GpuEventConnection", "edges"): lambda s, f: MAX_FIRST,
    ("GpuEvent", "processes"): lambda s, f: s.processes_per_gpu,
    ("Query", "gpuUsage"): lambda s, f: max(s.pods, s.nodes * s.gpus_per_node),
    # One per container given the GPU (a MIG device or a time-sliced replica each).
    ("Gpu", "allocations"): lambda s, f: max(s.processes_per_gpu, MAX_MIG_DEVICES),
    ("Pod", "gpuAllocations"): lambda s, f: s.gpus_per_node * s.containers_per_pod,
    # At most every allocation of every GPU (of the namespace's nodes, or the one node).
    ("Query", "idleGpuAllocations"): lambda s, f: (
        _per_node(f, s.nodes, 1) * s.gpus_per_node * max(s.processes_per_gpu, MAX_MIG_DEVICES)
    ),
}


class CostError(GraphUserError):
    """The operation could return more result objects than the server allows."""

    # Per instance: the response carries this query's estimate.
    extensions: dict[str, Any]

    def __init__(self, estimate: int, limit: int, sizes: ClusterSizes | None) -> None:
        shown = f"{estimate:,}" if estimate < CEILING else f"more than {CEILING:,}"
        # None for a restricted caller: the sizes are of its view, and not named.
        named = f" (sizes: {sizes.describe()})" if sizes is not None else ""
        super().__init__(
            f"query refused before execution: it could return up to {shown} result objects, "
            f"over this server's limit of {limit:,}{named}; narrow it "
            "with arguments such as nodeName or namespace, or select fewer nested lists"
        )
        self.extensions = {"code": "QUERY_TOO_COSTLY", "estimate": estimate, "limit": limit}


class SelectionTooWideError(GraphUserError):
    """A selection set has more fields than the server validates."""

    extensions: ClassVar[dict[str, Any]] = {"code": "SELECTION_TOO_WIDE"}

    def __init__(self, fields: int, limit: int) -> None:
        super().__init__(
            f"a selection set has {fields:,} fields (fragments included), over this "
            f"server's limit of {limit:,} per selection set"
        )


class TooDeepError(GraphUserError):
    """The document nests deeper than any admissible query."""

    extensions: ClassVar[dict[str, Any]] = {"code": "QUERY_TOO_DEEP"}

    def __init__(self) -> None:
        super().__init__(f"the query nests more than {MAX_WALK_DEPTH} selection sets deep")


@dataclass(frozen=True, slots=True)
class QueryCost:
    """The estimate for one operation, its widest flattened selection set and its depth."""

    objects: int
    widest_selection: int
    # Fields deep, counted as the depth limit counts them (introspection left out).
    depth: int


class _Walker:
    """One pass over a document: unit costs, flattened widths and field depths.

    Each step returns (objects per parent object, flattened field count, field
    depth); named fragments are measured once and reused.
    """

    def __init__(
        self,
        schema: GraphQLSchema,
        sizes: ClusterSizes,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: Mapping[str, Any],
    ) -> None:
        self.schema = schema
        self.sizes = sizes
        self.fragments = fragments
        self.variables = variables
        self._fragment_cost: dict[str, tuple[int, int, int]] = {}
        self._in_progress: set[str] = set()
        self.widest = 0

    def selection(
        self, selection_set: SelectionSetNode, parent: GraphQLNamedType, nesting: int
    ) -> tuple[int, int, int]:
        """(objects per parent object, flattened field count, depth) of ``selection_set``."""
        if nesting > MAX_WALK_DEPTH:
            raise TooDeepError()
        objects = fields = depth = 0
        for node in selection_set.selections:
            if isinstance(node, FieldNode):
                cost, below = self.field(node, parent, nesting)
                fields += 1
                objects += cost
                depth = max(depth, below)
                continue
            if isinstance(node, InlineFragmentNode):
                condition = parent
                if node.type_condition is not None:
                    named = self.schema.get_type(node.type_condition.name.value)
                    condition = named if named is not None else parent
                cost, width, below = self.selection(node.selection_set, condition, nesting + 1)
            elif isinstance(node, FragmentSpreadNode):
                cost, width, below = self.spread(node.name.value, nesting)
            else:
                continue
            objects, fields, depth = objects + cost, fields + width, max(depth, below)
        self.widest = max(self.widest, fields)
        return min(objects, CEILING), min(fields, CEILING), depth

    def spread(self, name: str, nesting: int) -> tuple[int, int, int]:
        if name in self._fragment_cost:
            return self._fragment_cost[name]
        fragment = self.fragments.get(name)
        if fragment is None or name in self._in_progress:
            return 0, 0, 0  # unknown or cyclic: validation refuses it
        named = self.schema.get_type(fragment.type_condition.name.value)
        if named is None:
            return 0, 0, 0
        self._in_progress.add(name)
        try:
            result = self.selection(fragment.selection_set, named, nesting + 1)
        finally:
            self._in_progress.discard(name)
        self._fragment_cost[name] = result
        return result

    def field(self, node: FieldNode, parent: GraphQLNamedType, nesting: int) -> tuple[int, int]:
        """(objects, depth) of one field per parent object."""
        name = node.name.value
        if name.startswith("__"):
            return 0, 0  # introspection: neither costed nor counted for depth
        fields = getattr(parent, "fields", None)
        if not fields or name not in fields:
            return 0, 1  # a field validation will refuse
        field_type: GraphQLOutputType = fields[name].type
        child = get_named_type(field_type)
        if not is_composite_type(child):
            return 0, 1
        count = self.list_size(node, parent.name, field_type)
        below = depth = 0
        if node.selection_set is not None:
            below, _, depth = self.selection(node.selection_set, child, nesting + 1)
        return min(count * (1 + below), CEILING), 1 + depth

    def list_size(self, node: FieldNode, parent: str, field_type: GraphQLOutputType) -> int:
        inner = field_type.of_type if is_non_null_type(field_type) else field_type
        if not is_list_type(inner):
            return 1
        if node.name.value == "_entities":
            return max(1, self.representations(node))
        rule = LIST_SIZES.get((parent, node.name.value))
        # A list without a rule counts as the largest list the cluster has.
        return rule(self.sizes, node) if rule else max(self.sizes.pods, self.sizes.nodes)

    def representations(self, node: FieldNode) -> int:
        for argument in node.arguments or ():
            if argument.name.value != "representations":
                continue
            value = argument.value
            if isinstance(value, ListValueNode):
                return len(value.values)
            if isinstance(value, VariableNode):
                given = self.variables.get(value.name.value)
                return len(given) if isinstance(given, list) else 1
        return 1


def estimate(
    schema: GraphQLSchema,
    document: DocumentNode,
    sizes: ClusterSizes,
    *,
    operation_name: str | None = None,
    variables: Mapping[str, Any] | None = None,
) -> QueryCost:
    """The worst-case result objects of the operation to run (the costliest, if unnamed)."""
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    walker = _Walker(schema, sizes, fragments, variables or {})
    objects = depth = 0
    for definition in document.definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        if operation_name is not None and (
            definition.name is None or definition.name.value != operation_name
        ):
            continue
        root = schema.get_root_type(definition.operation)
        if root is None:
            continue
        cost, _, deepest = walker.selection(definition.selection_set, root, 1)
        objects, depth = max(objects, cost), max(depth, deepest)
    # Fragments no operation spreads are validated too: measure their width as well.
    for name in fragments:
        walker.spread(name, 1)
    return QueryCost(objects, walker.widest, depth)
