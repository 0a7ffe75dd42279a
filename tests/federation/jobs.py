"""A small ``jobs`` subgraph that extends gpugraph's ``Pod`` entity by key.

Each job names the pod it runs in; through the gateway a query starts at
``jobs`` and walks into gpugraph's pod, node, GPUs and processes. ``Pod.owner``
comes back from this subgraph, so the walk crosses subgraphs both ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import strawberry
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.types import Info


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One training job and the pod it runs in."""

    id: str
    owner: str
    namespace: str
    pod_name: str


@strawberry.federation.type(keys=["namespace name"])
class Pod:
    namespace: str
    name: str

    @strawberry.field
    def owner(self, info: Info) -> str | None:
        job = info.context["jobs_by_pod"].get((self.namespace, self.name))
        return job.owner if job else None

    @classmethod
    def resolve_reference(cls, namespace: str, name: str) -> Pod:
        return cls(namespace=namespace, name=name)


@strawberry.type
class Job:
    id: strawberry.ID
    owner: str
    pod: Pod


@strawberry.type
class Query:
    @strawberry.field
    def jobs(self, info: Info) -> list[Job]:
        return [
            Job(
                id=strawberry.ID(job.id),
                owner=job.owner,
                pod=Pod(namespace=job.namespace, name=job.pod_name),
            )
            for job in info.context["jobs"]
        ]


JOBS_SCHEMA = strawberry.federation.Schema(query=Query)


class JobsApp(GraphQL[dict[str, Any], None]):
    """The jobs subgraph over HTTP, serving the jobs it was built with."""

    def __init__(self, jobs: Sequence[JobRecord]) -> None:
        super().__init__(JOBS_SCHEMA, graphql_ide=None)
        self.jobs = list(jobs)

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket
    ) -> dict[str, Any]:
        by_pod = {(job.namespace, job.pod_name): job for job in self.jobs}
        return {"jobs": self.jobs, "jobs_by_pod": by_pod}


@strawberry.federation.type(keys=["uuid"])
class Gpu:
    uuid: str
    # gpugraph's Gpu.index is Int!; a String here cannot compose with it.
    index: str

    @classmethod
    def resolve_reference(cls, uuid: str) -> Gpu:
        return cls(uuid=uuid, index="0")


@strawberry.type
class ConflictingQuery:
    @strawberry.field
    def first_gpu(self) -> Gpu | None:
        return None


CONFLICTING_SCHEMA = strawberry.federation.Schema(query=ConflictingQuery)


def conflicting_app() -> GraphQL[None, None]:
    """A subgraph whose ``Gpu.index`` conflicts with gpugraph's, so composition must fail."""
    return GraphQL(CONFLICTING_SCHEMA, graphql_ide=None)
