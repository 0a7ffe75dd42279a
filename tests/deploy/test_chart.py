"""The Helm chart, rendered and linted by Helm's engine, checked against Kubernetes schemas."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from tests.support.chart import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    container,
    flag,
    one,
    pod_spec,
    render,
)
from tests.support.chart import chart as chart

NON_DEFAULT: dict[str, Any] = {
    "image": {"repository": "registry.local/gpugraph", "tag": "1.2.3", "pullPolicy": "Always"},
    "agent": {
        "port": 6000,
        "pidResolver": "containerd",
        "interval": 2.5,
        "exposeCmdline": True,
        "migMonitoring": True,
        "containerd": {
            "enabled": True,
            "socketPath": "/run/k3s/containerd/containerd.sock",
            "namespace": "k8s.io",
        },
        "runtimeClassName": "nvidia",
        "nodeSelector": {"gpu": "yes"},
        "extraArgs": ["--log-level", "DEBUG"],
    },
    "server": {
        "replicas": 3,
        "listenHost": "::",
        "port": 9000,
        "agentTimeout": 0.5,
        "snapshotTtl": 0,
        "graphiql": False,
        "corsOrigins": ["https://dash.example.com", "https://ops.example.com"],
        "maxSubscriptions": 10,
        "service": {"type": "NodePort", "port": 8080},
        "limits": {"maxDepth": 8, "maxBodyBytes": 2097152},
        "extraArgs": ["--log-level", "debug"],
    },
}

# Integers past 1e6 reach Helm as float64, which would print as 1e+06 without `| int64`.
LARGE: dict[str, Any] = {
    "server": {
        "maxSubscriptions": 1_000_000,
        "limits": {
            "maxDepth": 1_000_000,
            "maxAliases": 2_000_000,
            "maxTokens": 10_000_000,
            "maxResultItems": 5_000_000,
            "maxBodyBytes": 1_073_741_824,
            "requestTimeout": 1_000_000,
        },
    },
}

# Every value set that changes which objects or fields the chart renders.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "non-default": NON_DEFAULT,
    "large-integers": LARGE,
    "node-ip": {"server": {"agentDiscovery": "node-ip"}},
    "auth-disabled": {"auth": {"enabled": False}, "networkPolicy": {"enabled": False}},
    "existing-secret": {"auth": {"existingSecret": "my-token"}},
    "containerd": {"agent": {"containerd": {"enabled": True}}},
    "no-containerd": {"agent": {"containerd": {"enabled": False}, "pidResolver": "cgroup"}},
    "metrics": {"metrics": {"dcgmNames": True, "dashboard": {"enabled": False}}},
}


def pod_labels(docs: list[dict[str, Any]], kind: str) -> dict[str, str]:
    labels: dict[str, str] = one(docs, kind)["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(match_labels: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in match_labels.items())


def mount_of(c: dict[str, Any], volume: str) -> dict[str, Any]:
    mounts = [m for m in c["volumeMounts"] if m["name"] == volume]
    assert len(mounts) == 1, f"volume {volume} should be mounted once"
    m: dict[str, Any] = mounts[0]
    return m


def volume(spec: dict[str, Any], name: str) -> dict[str, Any]:
    vols = [v for v in spec["volumes"] if v["name"] == name]
    assert len(vols) == 1
    v: dict[str, Any] = vols[0]
    return v


def test_default_install_renders_every_kind(chart: helm.Chart) -> None:
    kinds = sorted(d["kind"] for d in render(chart))
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRole",  # gpugraph-viewer, for people (bound by the operator)
            "ClusterRole",  # gpugraph-namespace-viewer, likewise
            "Role",  # gpugraph-top: kubectl gpugraph top through the API server's proxy
            "ClusterRoleBinding",
            "ClusterRoleBinding",  # system:auth-delegator, for TokenReview/SubjectAccessReview
            "ConfigMap",  # the Grafana dashboard
            "DaemonSet",
            "Deployment",
            "NetworkPolicy",
            "Secret",
            "Service",
            "ServiceAccount",
            "ServiceAccount",
        ]
    )


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_manifest_validates_against_kubernetes_schemas(
    chart: helm.Chart, values: dict[str, Any]
) -> None:
    docs = render(chart, values)
    for version in KUBE_VERSIONS:
        for doc in docs:
            # strict: unknown fields (typos in templates) fail too.
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_lint_is_clean(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.33.0")
    assert report["errors"] == []
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == []


def test_agent_daemonset_sees_the_host_and_asks_for_no_gpu(chart: helm.Chart) -> None:
    docs = render(chart)
    spec = pod_spec(docs, "DaemonSet")
    agent = container(docs, "DaemonSet")
    assert spec["hostPID"] is True
    assert agent["args"][0] == "agent"

    env = {e["name"]: e for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    resources = agent.get("resources", {})
    for section in ("requests", "limits"):
        assert "nvidia.com/gpu" not in resources.get(section, {})
    assert resources["requests"]["cpu"] and resources["limits"]["memory"]

    proc = mount_of(agent, "host-proc")
    assert proc["mountPath"] == "/host/proc" and proc["readOnly"] is True
    assert volume(spec, "host-proc")["hostPath"]["path"] == "/proc"
    assert flag(agent["args"], "--proc-root") == "/host/proc"
    assert flag(agent["args"], "--pid-resolver") == "auto"
    # The containerd socket is root on the node: mounted only on request.
    assert "containerd-socket" not in {v["name"] for v in spec["volumes"]}
    assert "containerd-socket" not in {m["name"] for m in agent["volumeMounts"]}
    assert "--containerd-socket" not in agent["args"]

    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = [e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]]
    assert keys == ["nvidia.com/gpu.present"]


def test_agent_runs_with_a_minimal_security_context(chart: helm.Chart) -> None:
    docs = render(chart)
    sc = container(docs, "DaemonSet")["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod_spec(docs, "DaemonSet")["automountServiceAccountToken"] is False


def test_mig_monitoring_is_off_by_default_and_asks_the_runtime_for_it_when_on(
    chart: helm.Chart,
) -> None:
    default = container(render(chart), "DaemonSet")
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in {e["name"] for e in default["env"]}
    assert "add" not in default["securityContext"]["capabilities"]

    agent = container(render(chart, {"agent": {"migMonitoring": True}}), "DaemonSet")
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    # The NVIDIA runtime grants MIG monitoring only with CAP_SYS_ADMIN; nothing else is added.
    sc = agent["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False

    # Capabilities the user adds are kept, and SYS_ADMIN is not listed twice.
    custom = {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN", "SYS_PTRACE"]}}
    values = {"agent": {"migMonitoring": True, "securityContext": custom}}
    agent = container(render(chart, values), "DaemonSet")
    assert agent["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN", "SYS_PTRACE"]


def test_server_runs_as_non_root_read_only(chart: helm.Chart) -> None:
    docs = render(chart)
    spec = pod_spec(docs, "Deployment")
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    sc = container(docs, "Deployment")["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_non_default_values_reach_the_agent(chart: helm.Chart) -> None:
    docs = render(chart, NON_DEFAULT)
    spec = pod_spec(docs, "DaemonSet")
    agent = container(docs, "DaemonSet")
    args = agent["args"]
    assert agent["image"] == "registry.local/gpugraph:1.2.3"
    assert agent["imagePullPolicy"] == "Always"
    assert flag(args, "--listen") == "[::]:6000"
    assert flag(args, "--pid-resolver") == "containerd"
    assert flag(args, "--interval") == "2.5"
    assert "--expose-cmdline" in args
    assert args[-2:] == ["--log-level", "DEBUG"]
    assert volume(spec, "containerd-socket")["hostPath"]["path"] == (
        "/run/k3s/containerd/containerd.sock"
    )
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"gpu": "yes"}
    assert agent["ports"] == [{"name": "grpc", "containerPort": 6000, "protocol": "TCP"}]
    assert agent["livenessProbe"]["grpc"]["port"] == 6000
    assert agent["readinessProbe"]["grpc"]["port"] == 6000


def test_containerd_socket_is_mounted_when_enabled(chart: helm.Chart) -> None:
    docs = render(chart, {"agent": {"containerd": {"enabled": True}}})
    spec = pod_spec(docs, "DaemonSet")
    agent = container(docs, "DaemonSet")
    sock = mount_of(agent, "containerd-socket")
    assert flag(agent["args"], "--containerd-socket") == sock["mountPath"]
    assert volume(spec, "containerd-socket")["hostPath"] == {
        "path": "/run/containerd/containerd.sock",
        "type": "Socket",
    }
    assert flag(agent["args"], "--containerd-namespace") == "k8s.io"
    assert flag(agent["args"], "--pid-resolver") == "auto"


def test_probes(chart: helm.Chart) -> None:
    docs = render(chart)
    agent = container(docs, "DaemonSet")
    port = agent["ports"][0]["containerPort"]
    assert agent["ports"][0]["name"] == "grpc"
    for probe in ("livenessProbe", "readinessProbe"):
        # The gRPC health service, which stays open without the token.
        assert agent[probe]["grpc"] == {"port": port}
        assert agent[probe]["periodSeconds"] >= 1

    server = container(docs, "Deployment")
    assert server["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert server["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert flag(server["args"], "--listen") == "0.0.0.0:8000"
    # gRPC's [::] is dual-stack, and falls back to IPv4 without IPv6.
    assert flag(agent["args"], "--listen") == "[::]:50051"


def test_rbac_is_exactly_read_only_pods_nodes_claims_and_slices(chart: helm.Chart) -> None:
    docs = render(chart)
    server = [
        d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "server"
    ]
    role = one(server, "ClusterRole")
    assert len(role["rules"]) == 2
    rule, dra = role["rules"]
    assert rule["apiGroups"] == [""]
    assert sorted(rule["resources"]) == ["nodes", "pods"]
    assert sorted(rule["verbs"]) == ["get", "list", "watch"]
    assert set(rule) == {"apiGroups", "resources", "verbs"}
    # DRA: list and watch only, on these two and nothing more.
    assert dra == {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceslices"],
        "verbs": ["list", "watch"],
    }

    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    binding = next(b for b in bindings if b["roleRef"]["name"] == role["metadata"]["name"])
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    server_sa = pod_spec(docs, "Deployment")["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": server_sa, "namespace": NAMESPACE}
    ]
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert server_sa in accounts
    # The agent has its own account, bound to nothing.
    agent_sa = pod_spec(docs, "DaemonSet")["serviceAccountName"]
    assert agent_sa in accounts and agent_sa != server_sa


def test_server_discovers_agents_by_the_daemonsets_labels(chart: helm.Chart) -> None:
    docs = render(chart)
    args = container(docs, "Deployment")["args"]
    assert args[0] == "serve"
    assert flag(args, "--agent-discovery") == "pod-ip"
    assert flag(args, "--agent-namespace") == NAMESPACE
    assert flag(args, "--agent-port") == "50051"
    selector = dict(pair.split("=", 1) for pair in flag(args, "--agent-selector").split(","))
    daemonset = one(docs, "DaemonSet")
    assert selector == daemonset["spec"]["selector"]["matchLabels"]
    assert selects(selector, pod_labels(docs, "DaemonSet"))
    assert not selects(selector, pod_labels(docs, "Deployment"))


def test_node_ip_discovery_publishes_a_host_port(chart: helm.Chart) -> None:
    docs = render(chart, {"server": {"agentDiscovery": "node-ip"}})
    args = container(docs, "Deployment")["args"]
    assert flag(args, "--agent-discovery") == "node-ip"
    assert "--agent-selector" not in args
    assert container(docs, "DaemonSet")["ports"][0]["hostPort"] == 50051


def test_non_default_values_reach_the_server(chart: helm.Chart) -> None:
    docs = render(chart, NON_DEFAULT)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    args = container(docs, "Deployment")["args"]
    assert flag(args, "--listen") == "[::]:9000"
    assert flag(args, "--agent-port") == "6000"
    assert flag(args, "--agent-timeout") == "0.5"
    assert flag(args, "--snapshot-ttl") == "0"
    assert flag(args, "--max-subscriptions") == "10"
    assert flag(args, "--max-depth") == "8"
    assert flag(args, "--max-aliases") == "30"
    assert flag(args, "--max-body-bytes") == "2097152"
    assert "--no-graphiql" in args and "--graphiql" not in args
    origins = [args[i + 1] for i, a in enumerate(args) if a == "--cors-origin"]
    assert origins == ["https://dash.example.com", "https://ops.example.com"]
    service = one(docs, "Service")
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"][0]["port"] == 8080
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert selects(service["spec"]["selector"], pod_labels(docs, "Deployment"))
    assert not selects(service["spec"]["selector"], pod_labels(docs, "DaemonSet"))


@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["default", "non-default"])
def test_network_policy_admits_only_the_server_to_the_agent_port(
    chart: helm.Chart, values: dict[str, Any]
) -> None:
    docs = render(chart, values)
    policy = one(docs, "NetworkPolicy")["spec"]
    agent_labels = pod_labels(docs, "DaemonSet")
    server_labels = pod_labels(docs, "Deployment")
    assert selects(policy["podSelector"]["matchLabels"], agent_labels)
    assert not selects(policy["podSelector"]["matchLabels"], server_labels)
    assert policy["policyTypes"] == ["Ingress"]
    assert len(policy["ingress"]) == 1
    rule = policy["ingress"][0]
    # One peer, a pod selector in the release's namespace: no namespaceSelector, no ipBlock.
    assert len(rule["from"]) == 1 and set(rule["from"][0]) == {"podSelector"}
    peer = rule["from"][0]["podSelector"]["matchLabels"]
    assert selects(peer, server_labels)
    assert not selects(peer, agent_labels)
    agent_port = container(docs, "DaemonSet")["ports"][0]["containerPort"]
    assert rule["ports"] == [{"protocol": "TCP", "port": agent_port}]


def test_server_checks_callers_with_the_auth_delegator_role_by_default(
    chart: helm.Chart,
) -> None:
    docs = render(chart)
    server_sa = pod_spec(docs, "Deployment")["serviceAccountName"]
    delegator = [
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "system:auth-delegator"
    ]
    assert len(delegator) == 1
    assert delegator[0]["subjects"] == [
        {"kind": "ServiceAccount", "name": server_sa, "namespace": NAMESPACE}
    ]
    args = container(docs, "Deployment")["args"]
    assert flag(args, "--auth") == "kubernetes"
    # The only other binding is the read-only pods/nodes role.
    assert len([d for d in docs if d["kind"] == "ClusterRoleBinding"]) == 2

    docs = render(chart, {"server": {"auth": {"mode": "none", "audiences": ["x"]}}})
    assert flag(container(docs, "Deployment")["args"], "--auth") == "none"
    assert not [
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "system:auth-delegator"
    ]
    docs = render(chart, {"server": {"auth": {"audiences": ["gpugraph"], "cacheTtl": 30}}})
    args = container(docs, "Deployment")["args"]
    assert (flag(args, "--auth-audience"), flag(args, "--auth-cache-ttl")) == ("gpugraph", "30")


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_rendered_args_are_accepted_by_the_real_command_line(
    chart: helm.Chart, values: dict[str, Any]
) -> None:
    from api.cli import build_parser, settings_from_args

    docs = render(chart, values)
    parser = build_parser()
    agent = parser.parse_args(container(docs, "DaemonSet")["args"])
    assert agent.command == "agent"
    assert agent.proc_root == "/host/proc"
    serve = parser.parse_args(container(docs, "Deployment")["args"])
    assert serve.command == "serve"
    settings = settings_from_args(serve)
    assert settings.agent_port == container(docs, "DaemonSet")["ports"][0]["containerPort"]
    server = {**chart.values["server"], **values.get("server", {})}
    limits = {**chart.values["server"]["limits"], **server.get("limits", {})}
    assert settings.max_body_bytes == limits["maxBodyBytes"]
    assert settings.max_depth == limits["maxDepth"]
    assert settings.max_aliases == limits["maxAliases"]
    assert settings.max_tokens == limits["maxTokens"]
    assert settings.max_result_items == limits["maxResultItems"]
    assert settings.max_variable_items == limits["maxVariableItems"]
    assert settings.request_timeout == limits["requestTimeout"]
    assert settings.max_subscriptions == server["maxSubscriptions"]
    assert (settings.listen_host, settings.listen_port) == (server["listenHost"], server["port"])
    if server["agentDiscovery"] == "pod-ip":
        assert settings.agent_namespace == NAMESPACE


def test_network_policy_can_be_disabled(chart: helm.Chart) -> None:
    docs = render(chart, {"networkPolicy": {"enabled": False}})
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]


def token_paths(docs: list[dict[str, Any]], kind: str, arg: str) -> tuple[str, str]:
    """(secret name, token file) as the pod of ``kind`` mounts and passes them."""
    spec = pod_spec(docs, kind)
    c = container(docs, kind)
    secret = volume(spec, "agent-token")["secret"]["secretName"]
    mount = mount_of(c, "agent-token")
    assert mount["readOnly"] is True
    token_file = flag(c["args"], arg)
    assert Path(token_file).parent == Path(mount["mountPath"])
    return secret, Path(token_file).name


def test_generated_token_secret_is_mounted_into_both(chart: helm.Chart) -> None:
    docs = render(chart)
    secret = one(docs, "Secret")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 48 and token.isalnum()
    agent = token_paths(docs, "DaemonSet", "--token-file")
    server = token_paths(docs, "Deployment", "--agent-token-file")
    assert agent == server == (secret["metadata"]["name"], "token")
    # Each install draws a fresh token (upgrades reuse the live Secret through lookup).
    again = base64.b64decode(one(render(chart), "Secret")["data"]["token"]).decode()
    assert again != token


def test_existing_secret_is_used_instead_of_a_generated_one(chart: helm.Chart) -> None:
    docs = render(chart, {"auth": {"existingSecret": "my-token"}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert token_paths(docs, "DaemonSet", "--token-file") == ("my-token", "token")
    assert token_paths(docs, "Deployment", "--agent-token-file") == ("my-token", "token")


def test_auth_can_be_disabled(chart: helm.Chart) -> None:
    docs = render(chart, {"auth": {"enabled": False}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert "--token-file" not in container(docs, "DaemonSet")["args"]
    assert "--agent-token-file" not in container(docs, "Deployment")["args"]


# (what is wrong, values, what the error must point at)
BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown discovery mode", {"server": {"agentDiscovery": "dns"}}, "/server/agentDiscovery"),
    ("unknown pid resolver", {"agent": {"pidResolver": "magic"}}, "/agent/pidResolver"),
    ("port zero", {"agent": {"port": 0}}, "/agent/port"),
    ("port too large", {"server": {"port": 70000}}, "/server/port"),
    ("service port as string", {"server": {"service": {"port": "http"}}}, "/server/service/port"),
    ("zero replicas", {"server": {"replicas": 0}}, "/server/replicas"),
    ("replicas as string", {"server": {"replicas": "2"}}, "/server/replicas"),
    ("fractional replicas", {"server": {"replicas": 1.5}}, "/server/replicas"),
    ("negative interval", {"agent": {"interval": -1}}, "/agent/interval"),
    ("zero agent timeout", {"server": {"agentTimeout": 0}}, "/server/agentTimeout"),
    ("typo at top level", {"agnet": {"port": 1}}, "'agnet'"),
    ("typo in agent", {"agent": {"prot": 50051}}, "'prot'"),
    ("typo in server", {"server": {"replica": 2}}, "'replica'"),
    ("bad pull policy", {"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ("bad service type", {"server": {"service": {"type": "Ingress"}}}, "/server/service/type"),
    (
        "relative socket path",
        {"agent": {"containerd": {"socketPath": "run/x.sock"}}},
        "/agent/containerd/socketPath",
    ),
    ("boolean as string", {"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled"),
    ("cors origins not a list", {"server": {"corsOrigins": "https://a"}}, "/server/corsOrigins"),
    ("zero max depth", {"server": {"limits": {"maxDepth": 0}}}, "/server/limits/maxDepth"),
    ("probe with a check of its own", {"agent": {"livenessProbe": {"exec": {}}}}, "'exec'"),
    (
        "containerd resolver without the socket",
        {"agent": {"pidResolver": "containerd", "containerd": {"enabled": False}}},
        "/agent/containerd/enabled",
    ),
    (
        "selector label in agent pod labels",
        {"agent": {"podLabels": {"app.kubernetes.io/component": "server"}}},
        "/agent/podLabels/app.kubernetes.io~1component",
    ),
    (
        "selector label in server pod labels",
        {"server": {"podLabels": {"app.kubernetes.io/instance": "other"}}},
        "/server/podLabels/app.kubernetes.io~1instance",
    ),
    (
        "chart label in common labels",
        {"commonLabels": {"app.kubernetes.io/name": "x"}},
        "/commonLabels/app.kubernetes.io~1name",
    ),
    ("agent block removed", {"agent": None}, "missing property 'agent'"),
    ("limits block removed", {"server": {"limits": None}}, "missing property 'limits'"),
    ("bracketed listen host", {"server": {"listenHost": "[::]"}}, "/server/listenHost"),
    # Each alert's threshold: a null one rendered an alert firing on every allocation (or
    # rules promtool refuses), so none may be left out.
    *(
        (
            f"alert {name} removed",
            {"metrics": {"prometheusRule": {name: None}}},
            f"missing property '{name}'",
        )
        for name in ("unallocatedFor", "allocationIdleMinutes", "gpuFaultWindow")
    ),
]


@pytest.mark.parametrize(
    ("values", "pointer"), [(v, p) for _, v, p in BAD_VALUES], ids=[n for n, _, _ in BAD_VALUES]
)
def test_schema_rejects_bad_values(chart: helm.Chart, values: dict[str, Any], pointer: str) -> None:
    with pytest.raises(helm.HelmValuesError) as failure:
        chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert pointer in str(failure.value)
    # helm lint reports the same values as an error rather than rendering them.
    report = helm.lint(CHART, values, namespace=NAMESPACE)
    assert any(pointer in e for e in report["errors"]) or any(
        pointer in m["error"] for m in report["messages"] if m["severity"] == 3
    )


def test_default_values_pass_the_schema(chart: helm.Chart) -> None:
    chart.validate_schema(chart.values)
    chart.validate_schema(NON_DEFAULT)


def test_labels_of_ones_own_are_allowed(chart: helm.Chart) -> None:
    docs = render(
        chart,
        {
            "commonLabels": {"team": "ml-platform"},
            "agent": {"podLabels": {"sidecar.istio.io/inject": "false"}},
        },
    )
    assert pod_labels(docs, "DaemonSet")["team"] == "ml-platform"
    assert pod_labels(docs, "DaemonSet")["sidecar.istio.io/inject"] == "false"
    assert one(docs, "Service")["metadata"]["labels"]["team"] == "ml-platform"


def test_notes_name_the_service(chart: helm.Chart) -> None:
    out = chart.render({}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
    service = one(render(chart), "Service")["metadata"]["name"]
    forward = next(line for line in notes.splitlines() if "port-forward" in line)
    assert f"svc/{service}" in shlex.split(forward)


def test_the_agent_keeps_its_occupancy_log_on_the_node(chart: helm.Chart) -> None:
    docs = render(chart)
    spec = pod_spec(docs, "DaemonSet")
    agent = container(docs, "DaemonSet")
    history = mount_of(agent, "history")
    assert flag(agent["args"], "--history-dir") == history["mountPath"] == "/var/lib/gpugraph"
    assert history.get("readOnly") is not True
    assert volume(spec, "history")["hostPath"] == {
        "path": "/var/lib/gpugraph",
        "type": "DirectoryOrCreate",
    }
    assert flag(agent["args"], "--history-retention") == "30d"
    assert flag(agent["args"], "--history-max-bytes") == "268435456"

    values = {"agent": {"history": {"retention": "12h", "maxBytes": 1 << 31}}}
    args = container(render(chart, values), "DaemonSet")["args"]
    assert flag(args, "--history-retention") == "12h"
    assert flag(args, "--history-max-bytes") == str(1 << 31)

    off = render(chart, {"agent": {"history": {"enabled": False}}})
    assert "--history-dir" not in container(off, "DaemonSet")["args"]
    assert "history" not in {v["name"] for v in pod_spec(off, "DaemonSet")["volumes"]}


def test_agent_reads_the_kubelets_pod_resources_socket_read_only(chart: helm.Chart) -> None:
    agent_pod = pod_spec(render(chart), "DaemonSet")
    (agent,) = agent_pod["containers"]
    assert (
        flag(agent["args"], "--pod-resources-socket") == "/run/gpugraph/pod-resources/kubelet.sock"
    )
    mount = next(m for m in agent["volumeMounts"] if m["name"] == "pod-resources")
    assert mount == {
        "name": "pod-resources",
        "mountPath": "/run/gpugraph/pod-resources",
        "readOnly": True,
    }
    volume = next(v for v in agent_pod["volumes"] if v["name"] == "pod-resources")
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    off = pod_spec(render(chart, {"agent": {"podResources": {"enabled": False}}}), "DaemonSet")
    assert flag(off["containers"][0]["args"], "--pod-resources-socket") == ""
    assert all(v["name"] != "pod-resources" for v in off["volumes"])


def test_keep_warm_is_adaptive_by_default_and_the_fixed_flag_stays_an_override(
    chart: helm.Chart,
) -> None:
    args = container(render(chart, {}), "Deployment")["args"]
    assert flag(args, "--snapshot-keep-warm") == "auto"
    assert flag(args, "--snapshot-refresh-budget") == "0.25"
    values = {"server": {"snapshotKeepWarm": 60, "snapshotRefreshBudget": 0.5}}
    args = container(render(chart, values), "Deployment")["args"]
    assert flag(args, "--snapshot-keep-warm") == "60"
    assert flag(args, "--snapshot-refresh-budget") == "0.5"
