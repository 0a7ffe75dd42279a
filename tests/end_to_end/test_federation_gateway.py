"""gpugraph in an Apollo supergraph: the real @apollo/gateway composes it with a jobs subgraph.

The gateway (Node.js, from tests/federation/package-lock.json) introspects
both subgraphs over HTTP, composes them, and plans one query that starts at
the jobs subgraph, enters gpugraph's Pod entity by key, walks node -> GPUs ->
processes -> pods there, and comes back to the jobs subgraph for Pod.owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.responses import JSONResponse

from graph_schema.schema import build_schema
from tests.federation.cluster import (
    GPU_A0,
    GPU_A1,
    GPU_B0,
    HOST_PID,
    NODE_A,
    NODE_B,
    PODS,
    LiveCluster,
    live_cluster,
)
from tests.federation.gateway import GatewayError, gateway_missing, running_gateway
from tests.federation.jobs import JobRecord, JobsApp, conflicting_app
from tests.federation.serving import serving
from tests.support import require

pytestmark = pytest.mark.node

JOBS = (
    JobRecord("job-17", "alice", "ml", "trainer-0"),
    JobRecord("job-18", "bob", "ml", "trainer-1"),
    JobRecord("job-40", "carol", "serving", "infer-0"),
)
OWNER = {(job.namespace, job.pod_name): job.owner for job in JOBS}

JOBS_TO_PROCESSES = """
query JobsOnGpus {
  jobs {
    id
    owner
    pod {
      uid
      namespace
      name
      node {
        name
        gpus {
          uuid
          processes {
            pid
            usedMemoryBytes
            pod { namespace name owner }
          }
        }
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    missing = gateway_missing()
    require(missing is None, missing or "")
    with live_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def _process(pid: int, used: int, namespace: str | None, name: str | None) -> dict[str, Any]:
    pod = None
    if namespace is not None and name is not None:
        pod = {"namespace": namespace, "name": name, "owner": OWNER.get((namespace, name))}
    return {"pid": pid, "usedMemoryBytes": used, "pod": pod}


def _expected_gpus(node: str) -> list[dict[str, Any]]:
    def on(uuid: str) -> list[dict[str, Any]]:
        return [
            _process(p.pid, p.used_bytes, p.namespace, p.name) for p in PODS if p.gpu_uuid == uuid
        ]

    if node == NODE_A:
        return [{"uuid": GPU_A0, "processes": on(GPU_A0)}, {"uuid": GPU_A1, "processes": []}]
    # The host process on GPU_B0 belongs to no pod: it is there, with pod null.
    host = _process(HOST_PID, 1024**3, None, None)
    return [{"uuid": GPU_B0, "processes": [*on(GPU_B0), host]}]


def _by_pid(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**gpu, "processes": sorted(gpu["processes"], key=lambda p: p["pid"])} for gpu in gpus]


def test_query_from_jobs_walks_into_gpugraph_and_back(cluster: LiveCluster) -> None:
    with (
        serving(JobsApp(JOBS)) as jobs_url,
        running_gateway({"gpugraph": f"{cluster.url}/graphql", "jobs": f"{jobs_url}/"}) as gateway,
    ):
        response = httpx.post(gateway, json={"query": JOBS_TO_PROCESSES}, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert "errors" not in body, body["errors"]
    jobs = body["data"]["jobs"]
    assert [job["id"] for job in jobs] == [job.id for job in JOBS]
    by_pod = {(spec.namespace, spec.name): spec for spec in PODS}
    for job, record in zip(jobs, JOBS, strict=True):
        spec = by_pod[(record.namespace, record.pod_name)]
        assert job["owner"] == record.owner
        pod = job["pod"]
        # uid is only in gpugraph: the gateway got it through the namespace+name key.
        assert (pod["uid"], pod["namespace"], pod["name"]) == (spec.uid, spec.namespace, spec.name)
        assert pod["node"]["name"] == spec.node
        assert _by_pid(pod["node"]["gpus"]) == _by_pid(_expected_gpus(spec.node))
    # trainer-0 and trainer-1 share a GPU: each job sees the other's process and owner.
    alice_gpu = jobs[0]["pod"]["node"]["gpus"][0]
    owners = {p["pod"]["owner"] for p in alice_gpu["processes"]}
    assert owners == {"alice", "bob"}
    assert NODE_B in {job["pod"]["node"]["name"] for job in jobs}


def test_gateway_plans_through_every_entity_key(cluster: LiveCluster) -> None:
    # Node(name), Gpu(uuid) and Pod(uid) are entry points too: the jobs
    # subgraph only knows namespace+name, yet the supergraph can walk by all.
    query = f"""{{
      gpu(uuid: "{GPU_A0}") {{ uuid node {{ name }} pods {{ uid name owner }} }}
      node(name: "{NODE_B}") {{ name gpus {{ uuid }} }}
    }}"""
    with (
        serving(JobsApp(JOBS)) as jobs_url,
        running_gateway({"gpugraph": f"{cluster.url}/graphql", "jobs": f"{jobs_url}/"}) as gateway,
    ):
        body = httpx.post(gateway, json={"query": query}, timeout=30).json()
    assert "errors" not in body, body["errors"]
    gpu = body["data"]["gpu"]
    assert gpu["node"] == {"name": NODE_A}
    pods = sorted(gpu["pods"], key=lambda p: p["name"])
    assert pods == [
        {"uid": spec.uid, "name": spec.name, "owner": OWNER[(spec.namespace, spec.name)]}
        for spec in PODS
        if spec.gpu_uuid == GPU_A0
    ]
    assert body["data"]["node"] == {"name": NODE_B, "gpus": [{"uuid": GPU_B0}]}


def test_composition_error_is_reported_clearly(cluster: LiveCluster) -> None:
    # A subgraph whose Gpu.index is a String cannot compose with gpugraph's Int!:
    # the helper must surface the gateway's own composition errors, not a timeout.
    with (
        serving(conflicting_app()) as broken_url,
        pytest.raises(GatewayError) as failure,
        running_gateway({"gpugraph": f"{cluster.url}/graphql", "broken": f"{broken_url}/"}),
    ):
        pytest.fail("the gateway composed a supergraph with a conflicting Gpu.index")
    error = failure.value
    assert "composed" in error.message
    mismatch = [e for e in error.errors if "Gpu.index" in e and "incompatible" in e]
    assert mismatch, error.errors
    assert '"broken"' in mismatch[0] and '"gpugraph"' in mismatch[0]
    assert "Gpu.index" in str(error)


def test_unreachable_subgraph_is_reported(tmp_path: Path) -> None:
    missing = gateway_missing()
    require(missing is None, missing or "")
    with serving(JobsApp(JOBS)) as jobs_url:
        pass  # stopped: its port now refuses
    with pytest.raises(GatewayError) as failure, running_gateway({"jobs": f"{jobs_url}/"}):
        pytest.fail("the gateway started without its only subgraph")
    assert "jobs" in str(failure.value)


class SdlOnly:
    """A subgraph that answers only the gateway's ``_service { sdl }`` question."""

    def __init__(self, sdl: str) -> None:
        self.sdl = sdl

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = JSONResponse({"data": {"_service": {"sdl": self.sdl}}})
        await body(scope, receive, send)


def test_a_regressed_gpugraph_sdl_fails_composition_clearly(tmp_path: Path) -> None:
    missing = gateway_missing()
    require(missing is None, missing or "")
    # The schema's extensions include async hooks (large documents parse in a thread), so
    # it runs the way the server runs it: asynchronously.
    data: Any = asyncio.run(build_schema().execute("{ _service { sdl } }")).data
    sdl = data["_service"]["sdl"]
    # The regression: Pod loses the namespace+name key the jobs subgraph joins on.
    regressed = sdl.replace(' @key(fields: "namespace name")', "", 1)
    assert regressed != sdl
    with (
        serving(SdlOnly(regressed)) as gpugraph_url,
        serving(JobsApp(JOBS)) as jobs_url,
        pytest.raises(GatewayError) as failure,
        running_gateway({"gpugraph": f"{gpugraph_url}/", "jobs": f"{jobs_url}/"}),
    ):
        pytest.fail("the gateway composed jobs with a gpugraph Pod it cannot enter")
    # Without the key, jobs' Pod.namespace and Pod.name clash with gpugraph's.
    assert any('"Pod.namespace"' in e and '"gpugraph"' in e for e in failure.value.errors), (
        failure.value.errors
    )


def test_a_namespace_scoped_token_passes_through_the_gateway(tmp_path: Path) -> None:
    from api.demo.cluster.apiserver.reviews import Rule, StubUser

    missing = gateway_missing()
    require(missing is None, missing or "")
    query = "{ pods { namespace name owner node { name } } }"
    with live_cluster(tmp_path / "cluster", auth=True) as cluster:
        reviews = cluster.kube.stub.reviews
        admin = reviews.token_of("admin")
        ml = reviews.add_user(
            StubUser(
                "ml-user",
                "uid-ml",
                ("ml",),
                (Rule(frozenset({"list"}), frozenset({"pods"}), frozenset({"ml"})),),
            )
        )
        with (
            serving(JobsApp(JOBS)) as jobs_url,
            running_gateway(
                {"gpugraph": f"{cluster.url}/graphql", "jobs": f"{jobs_url}/"},
                introspection_token=admin,
            ) as gateway,
        ):

            def ask(token: str | None) -> dict[str, Any]:
                headers = {} if token is None else {"Authorization": f"Bearer {token}"}
                response = httpx.post(gateway, json={"query": query}, headers=headers, timeout=30)
                assert response.status_code == 200, response.text
                body: dict[str, Any] = response.json()
                return body

            scoped, everything, anonymous = ask(ml), ask(admin), ask(None)
    assert "errors" not in scoped, scoped
    assert [(p["namespace"], p["name"], p["owner"]) for p in scoped["data"]["pods"]] == [
        ("ml", "trainer-0", "alice"),
        ("ml", "trainer-1", "bob"),
    ]
    assert {p["node"]["name"] for p in scoped["data"]["pods"]} == {NODE_A}
    assert {p["namespace"] for p in everything["data"]["pods"]} == {"ml", "serving"}
    # Without the header the subgraph refuses: no data from gpugraph at all.
    assert anonymous.get("errors") and not (anonymous.get("data") or {}).get("pods")
