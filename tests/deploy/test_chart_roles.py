"""The chart's roles for people grant exactly the questions the server asks: no more, no fewer.

The questions are the server's own declaration (``api.auth.access.QUESTIONS``),
and each role is checked twice: its rules as written, and by what the real
``KubernetesAuth`` decides for a user holding them, through SubjectAccessReviews
answered by the stub API server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from kubernetes.client import ApiClient

from api.auth import AccessReviewer, KubernetesAuth, TokenReviewer
from api.auth.access import EXEC_PODS, GET_METRICS, NAMESPACED, QUESTIONS, Question
from api.demo.cluster import StubApiServer
from api.demo.cluster.apiserver.kubeconfig import kubeconfig_for
from api.demo.cluster.apiserver.reviews import Rule, StubUser
from api.top.connection import API_SERVER_RIGHTS
from graph_schema.scope import Scope
from tests.support.chart import NAMESPACE, RELEASE, render
from tests.support.chart import chart as chart
from tests.support.graph import MemoryCluster, pod_record

VIEWER = f"{RELEASE}-gpugraph-viewer"
NAMESPACE_VIEWER = f"{RELEASE}-gpugraph-namespace-viewer"
TOP = f"{RELEASE}-gpugraph-top"
SERVICE = f"{RELEASE}-gpugraph"
TENANT = "research"
ROOT = Path(__file__).resolve().parents[2]

# With and without command lines: the agents send them only with exposeCmdline,
# and pods/exec is kubectl exec itself, so the roles grant it only then.
CMDLINES = {"command lines": True, "no command lines": False}


def roles(chart: helm.Chart, cmdlines: bool) -> dict[str, dict[str, Any]]:
    """The chart's Roles and ClusterRoles by name (with the Prometheus Operator's API)."""
    docs = render(chart, {"agent": {"exposeCmdline": cmdlines}}, operator=True)
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Role", "ClusterRole")}


def granted(role: dict[str, Any]) -> set[Question]:
    """The questions a role's rules answer yes to, cluster-wide; only plain core rules."""
    questions: set[Question] = set()
    for rule in role["rules"]:
        assert "*" not in rule["verbs"], rule
        if "nonResourceURLs" in rule:
            assert set(rule) == {"nonResourceURLs", "verbs"}, rule
            questions |= {
                Question(v, path=u) for v in rule["verbs"] for u in rule["nonResourceURLs"]
            }
            continue
        assert rule["apiGroups"] == [""] and "resourceNames" not in rule, rule
        for resource in rule["resources"]:
            name, _, sub = resource.partition("/")
            questions |= {Question(verb, name, sub) for verb in rule["verbs"]}
    return questions


def metrics_reader(named: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (reader,) = [
        r
        for r in named.values()
        if r["metadata"]["labels"].get("app.kubernetes.io/component") == "metrics"
    ]
    return reader


def expected(questions: set[Question], cmdlines: bool) -> set[Question]:
    return questions if cmdlines else questions - {EXEC_PODS}


@pytest.mark.parametrize("cmdlines", CMDLINES.values(), ids=CMDLINES.keys())
def test_the_roles_grant_exactly_the_declared_questions(chart: helm.Chart, cmdlines: bool) -> None:
    named = roles(chart, cmdlines)
    about_resources = {q for q in QUESTIONS if not q.path}
    assert granted(named[VIEWER]) == expected(about_resources, cmdlines)
    assert named[VIEWER]["kind"] == named[NAMESPACE_VIEWER]["kind"] == "ClusterRole"
    assert granted(named[NAMESPACE_VIEWER]) == expected(set(NAMESPACED), cmdlines)
    # /metrics is Prometheus's: the chart's metrics reader, not the people's roles.
    assert granted(metrics_reader(named)) == {q for q in QUESTIONS if q.path} == {GET_METRICS}
    # Together they leave no question the server asks ungranted.
    together = granted(named[VIEWER]) | granted(metrics_reader(named))
    assert together == expected(set(QUESTIONS), cmdlines)


def test_the_top_role_grants_what_top_asks_of_the_api_server(chart: helm.Chart) -> None:
    top = roles(chart, False)[TOP]
    assert top["kind"] == "Role" and top["metadata"]["namespace"] == NAMESPACE
    rights = {(verb, resource) for rule in top["rules"] for verb in rule["verbs"]
              for resource in rule["resources"]}  # fmt: skip
    assert rights == set(API_SERVER_RIGHTS)
    proxy = next(r for r in top["rules"] if r["resources"] == ["services/proxy"])
    # Only the server's Service, by the names kube-apiserver authorizes a proxy under.
    assert sorted(proxy["resourceNames"]) == [SERVICE, f"{SERVICE}:http"]


def test_the_roles_can_be_left_out(chart: helm.Chart) -> None:
    docs = render(chart, {"viewerRoles": {"enabled": False}})
    names = {d["metadata"]["name"] for d in docs}
    assert not names & {VIEWER, NAMESPACE_VIEWER, TOP}


# What the server decides for a user holding a role, through real reviews.


@pytest.fixture(scope="module")
def stub() -> Iterator[StubApiServer]:
    with StubApiServer() as server:
        yield server


def stub_rules(role: dict[str, Any], namespace: str = "") -> tuple[Rule, ...]:
    """A role's rules as the stub's RBAC, bound cluster-wide or (RoleBinding) in ``namespace``."""
    where = frozenset({namespace}) if namespace else frozenset()
    return tuple(
        Rule(
            frozenset(r["verbs"]),
            frozenset(r.get("resources", ())),
            where,
            frozenset(r.get("nonResourceURLs", ())),
        )
        for r in role["rules"]
    )


class Decide:
    """The server's auth against the stub: a fresh user per set of rules, and its decisions."""

    def __init__(self, stub: StubApiServer) -> None:
        self.stub = stub
        client = ApiClient(kubeconfig_for(stub.url))
        cluster = MemoryCluster()
        for namespace in (TENANT, "ml", "inference"):
            cluster.add_pod(pod_record(namespace, "p", "node-a"))
        self.auth = KubernetesAuth(TokenReviewer(client), AccessReviewer(client), cluster)
        self.users = 0

    async def user(self, rules: tuple[Rule, ...]) -> tuple[Scope, bool]:
        """What a user holding ``rules`` sees, and whether it may read /metrics."""
        self.users += 1
        name = f"user-{self.users}"
        token = self.stub.reviews.add_user(StubUser(name, f"uid-{name}", ("people",), rules))
        caller = await self.auth.authenticate(token)
        return caller.scope, await self.auth.may(caller.user, GET_METRICS)


@pytest.mark.parametrize("cmdlines", CMDLINES.values(), ids=CMDLINES.keys())
async def test_the_roles_show_everything_they_are_for_and_every_rule_counts(
    chart: helm.Chart, stub: StubApiServer, cmdlines: bool
) -> None:
    named = roles(chart, cmdlines)
    decide = Decide(stub)
    nothing = await decide.user(())
    assert nothing == (Scope(), False)

    viewer, _ = await decide.user(stub_rules(named[VIEWER]))
    assert (viewer.all_pods, viewer.all_nodes, viewer.exec_all) == (True, True, cmdlines)
    tenant, _ = await decide.user(stub_rules(named[NAMESPACE_VIEWER], TENANT))
    assert (tenant.all_pods, tenant.all_nodes, tenant.exec_all) == (False, False, False)
    assert tenant.pod_namespaces == {TENANT}
    assert tenant.exec_namespaces == ({TENANT} if cmdlines else frozenset())
    _, metrics = await decide.user(stub_rules(metrics_reader(named)))
    assert metrics

    # No more: without any one of its rules, a role shows less.
    for role, namespace in ((named[VIEWER], ""), (named[NAMESPACE_VIEWER], TENANT)):
        rules = stub_rules(role, namespace)
        whole = await decide.user(rules)
        for rule in rules:
            assert await decide.user(tuple(r for r in rules if r != rule)) != whole, rule


@pytest.mark.parametrize("document", ["README.md", "docs/auth.md"])
def test_the_documented_bindings_name_roles_a_gpugraph_release_renders(
    chart: helm.Chart, document: str
) -> None:
    # The docs install the chart as release gpugraph in namespace gpugraph.
    out = chart.render({}, name="gpugraph", namespace="gpugraph", is_install=True)
    docs = [
        d
        for path, text in out.items()
        if path.endswith(".yaml")
        for d in yaml.safe_load_all(text)
        if d
    ]
    kinds = {d["metadata"]["name"]: d["kind"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    text = (ROOT / document).read_text()
    bound = re.findall(r"--(clusterrole|role)=(\S+)", text)
    assert {name for _, name in bound} >= {
        "gpugraph-viewer",
        "gpugraph-namespace-viewer",
        "gpugraph-top",
    }
    for flag, name in bound:
        assert kinds.get(name) == ("ClusterRole" if flag == "clusterrole" else "Role"), name
