"""The allocation enums as GraphQL names them, registered once for every type that uses them.

The values are declared where they are decided (``node_resolver``'s verdicts,
``allocation_join``'s sources and rules); the descriptions are the graph's.
Types import the enums from here, so the registration runs before any type
names them, whichever module loads first.
"""

from __future__ import annotations

import strawberry

from node_resolver.models import AllocationMechanism, AllocationUse

from .allocation_join import AllocationRule, AllocationSource, AllocationVerdict

__all__ = [
    "AllocationMechanism",
    "AllocationRule",
    "AllocationSource",
    "AllocationUse",
    "AllocationVerdict",
]

strawberry.enum(
    AllocationVerdict,
    description="Whether the kubelet gave a process's container the GPU the process runs on "
    "(ALLOCATED, NOT_ALLOCATED), the process is in no pod (NO_POD), or that cannot be known "
    "(UNKNOWN: no allocation data for the node, or the pod is gone).",
)
strawberry.enum(
    AllocationSource,
    description="Where a node's allocation data comes from: the kubelet's PodResources API "
    "(POD_RESOURCES), the API server's ResourceClaims alone (API_ONLY), or nowhere (NONE).",
)
strawberry.enum(
    AllocationRule,
    description="Which rule decided a process's allocation verdict; SPEC: no allocation "
    "data, only the pod spec's GPU request is compared.",
)
strawberry.enum(
    AllocationMechanism,
    description="How the device was handed out: a device plugin, or Dynamic Resource Allocation.",
)
strawberry.enum(
    AllocationUse,
    description="How an allocation's holder uses its device, as the node's agent judged it: "
    "ACTIVE (a process of the holder's container ran above the idle threshold within the "
    "idle window), IDLE (its processes hold the device, none ran above the threshold for the "
    "whole window), UNUSED (no process of it was on the device for the whole window), "
    "UNKNOWN (no allocation data, or utilization could not be read). docs/allocation.md has "
    "the rule.",
)
