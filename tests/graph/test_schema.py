"""The schema keeps the names, types and arguments the issue fixes, and builds cleanly."""

from __future__ import annotations

import warnings

import graphql

from graph_schema.schema import build_schema

# The issue's SDL, verbatim: fields may be added, but these must match exactly.
ISSUE_SDL = """
scalar JSON
scalar Bytes
type Query {
  node(name: String!): Node
  nodes: [Node!]!
  pod(namespace: String!, name: String!): Pod
  pods(namespace: String, nodeName: String, labelSelector: String): [Pod!]!
  gpu(uuid: String!): Gpu
  gpus(nodeName: String): [Gpu!]!
  gpuProcesses(namespace: String, nodeName: String): [GpuProcess!]!
}
type Node { name: String! internalIp: String labels: JSON gpuCapacity: Int gpuAllocatable: Int
            driverVersion: String cudaDriverVersion: String pods: [Pod!]! gpus: [Gpu!] agent: AgentStatus! }
type AgentStatus { address: String reachable: Boolean! error: String snapshotAgeSeconds: Float }
type Gpu { uuid: String! index: Int! name: String node: Node! memoryTotalBytes: Bytes memoryUsedBytes: Bytes
           utilizationGpu: Int utilizationMemory: Int temperatureC: Int powerUsageWatts: Float
           powerLimitWatts: Float migEnabled: Boolean error: String processes: [GpuProcess!]! pods: [Pod!]! }
type GpuProcess { pid: Int! name: String type: String usedMemoryBytes: Bytes smUtilization: Int
                  gpu: Gpu! containerId: String podUid: String pod: Pod container: Container }
type Pod { uid: ID! name: String! namespace: String! phase: String nodeName: String node: Node
           labels: JSON gpuRequest: Int containers: [Container!]! gpuProcesses: [GpuProcess!] gpus: [Gpu!] }
type Container { id: String name: String! image: String pod: Pod! gpuProcesses: [GpuProcess!] }
"""  # noqa: E501


def test_every_field_of_the_issue_has_its_type_and_arguments() -> None:
    expected = graphql.build_schema(ISSUE_SDL)
    ours = build_schema()._schema
    mismatches = []
    for type_name, expected_type in expected.type_map.items():
        if type_name.startswith("__") or not isinstance(expected_type, graphql.GraphQLObjectType):
            continue
        our_type = ours.type_map[type_name]
        assert isinstance(our_type, graphql.GraphQLObjectType)
        for field_name, field in expected_type.fields.items():
            our_field = our_type.fields.get(field_name)
            if our_field is None:
                mismatches.append(f"{type_name}.{field_name} is missing")
                continue
            if str(our_field.type) != str(field.type):
                mismatches.append(f"{type_name}.{field_name}: {our_field.type} != {field.type}")
            args = {name: str(arg.type) for name, arg in field.args.items()}
            our_args = {name: str(arg.type) for name, arg in our_field.args.items()}
            if our_args != args:
                mismatches.append(f"{type_name}.{field_name}({our_args}) != ({args})")
    assert mismatches == []


def test_the_root_types_and_pod_containers_are_described() -> None:
    ours = build_schema()._schema
    undocumented = [
        name for name in ("Query", "Subscription") if not ours.type_map[name].description
    ]
    pod = ours.type_map["Pod"]
    assert isinstance(pod, graphql.GraphQLObjectType)
    assert pod.fields["containers"].description
    assert undocumented == []


def test_building_the_schema_warns_about_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_schema()
