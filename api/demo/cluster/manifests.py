"""Realistic pod and node JSON, as the Kubernetes API server sends them.

The stub API server, the tests, the demo and the benchmarks build their
clusters from these. With ``managed_fields=True`` (the default) a pod carries
the ``managedFields`` and annotations a real one does, about 5 KB of JSON, so
parse and memory figures measured on them carry over to real clusters.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

_CREATED = "2025-01-15T08:30:00Z"
_STARTED = "2025-01-15T08:30:04Z"


def container_id_for(pod_uid: str, container: str, runtime: str = "containerd") -> str:
    """A stable ``<runtime>://<64 hex>`` container ID for a pod's container."""
    digest = hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()
    return f"{runtime}://{digest}"


def pod_uid_for(namespace: str, name: str) -> str:
    """A stable UID for ``namespace/name`` (real UIDs are random; stable ones ease tests)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{namespace}/{name}"))


def _fields_v1(names: Sequence[str]) -> dict[str, Any]:
    per_container: dict[str, Any] = {
        f'k:{{"name":"{name}"}}': {
            ".": {},
            "f:env": {'k:{"name":"NVIDIA_VISIBLE_DEVICES"}': {".": {}, "f:name": {}}},
            "f:image": {},
            "f:imagePullPolicy": {},
            "f:name": {},
            "f:resources": {".": {}, "f:limits": {".": {}, "f:nvidia.com/gpu": {}}},
            "f:terminationMessagePath": {},
            "f:terminationMessagePolicy": {},
            "f:volumeMounts": {
                ".": {},
                'k:{"mountPath":"/dev/shm"}': {".": {}, "f:mountPath": {}, "f:name": {}},
            },
        }
        for name in names
    }
    return {
        "f:metadata": {
            "f:generateName": {},
            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
            "f:ownerReferences": {".": {}, 'k:{"uid":"owner"}': {}},
        },
        "f:spec": {
            "f:containers": per_container,
            "f:dnsPolicy": {},
            "f:enableServiceLinks": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
            "f:securityContext": {},
            "f:terminationGracePeriodSeconds": {},
            "f:tolerations": {},
            "f:volumes": {".": {}, 'k:{"name":"dshm"}': {".": {}, "f:emptyDir": {}}},
        },
    }


def _status_fields(names: Sequence[str]) -> dict[str, Any]:
    return {
        "f:status": {
            "f:conditions": {
                f'k:{{"type":"{kind}"}}': {
                    ".": {},
                    "f:lastProbeTime": {},
                    "f:lastTransitionTime": {},
                    "f:status": {},
                    "f:type": {},
                }
                for kind in ("ContainersReady", "Initialized", "PodScheduled", "Ready")
            },
            "f:containerStatuses": {},
            "f:hostIP": {},
            "f:phase": {},
            "f:podIP": {},
            "f:podIPs": {".": {}, 'k:{"ip":"10.0.0.1"}': {".": {}, "f:ip": {}}},
            "f:startTime": {},
            "f:containers": {f'k:{{"name":"{name}"}}': {} for name in names},
        }
    }


def _container_spec(
    name: str, image: str, gpus: int | None, gpu_resource: str = "nvidia.com/gpu"
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    if gpus is not None:
        resources["limits"] = {gpu_resource: str(gpus)}
        resources["requests"][gpu_resource] = str(gpus)
    return {
        "name": name,
        "image": image,
        "command": ["python", "-m", "train"],
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        "resources": resources,
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {
                "name": "kube-api-access",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            },
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _container_status(name: str, image: str, container_id: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
        "ready": container_id is not None,
        "restartCount": 0,
        "started": container_id is not None,
    }
    if container_id is None:
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}
    else:
        status["containerID"] = container_id
        status["state"] = {"running": {"startedAt": _STARTED}}
    return status


def make_pod(
    name: str,
    namespace: str = "default",
    node: str | None = "node-0",
    *,
    uid: str | None = None,
    containers: Sequence[str] = ("main",),
    images: Sequence[str] | None = None,
    gpu_limit: int | Sequence[int | None] | None = None,
    container_ids: Sequence[str | None] | None = None,
    runtime: str = "containerd",
    init_containers: Sequence[str] = (),
    phase: str = "Running",
    labels: Mapping[str, str] | None = None,
    pod_ip: str | None = None,
    managed_fields: bool = True,
    gpu_resource: str = "nvidia.com/gpu",
    claims: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod object as the API server returns it.

    ``gpu_limit`` is either one count for the first container or one entry per
    container, of ``gpu_resource``. Container IDs default to stable
    ``<runtime>://<64 hex>`` values for a scheduled, running pod and are absent
    otherwise. ``claims`` maps each DRA claim's name in the pod to the
    ResourceClaim made from its template (``<pod>-<name>-<suffix>``), listed by
    the first container.
    """
    uid = uid or pod_uid_for(namespace, name)
    names = list(containers)
    image_names = (
        list(images)
        if images is not None
        else [f"nvcr.io/nvidia/pytorch:24.{i + 1:02d}-py3" for i in range(len(names))]
    )
    if isinstance(gpu_limit, Sequence):
        gpus: list[int | None] = list(gpu_limit) + [None] * (len(names) - len(gpu_limit))
    else:
        gpus = [gpu_limit] + [None] * (len(names) - 1)
    running = node is not None and phase == "Running"
    if container_ids is not None:
        ids: list[str | None] = list(container_ids) + [None] * (len(names) - len(container_ids))
    elif running:
        ids = [container_id_for(uid, c, runtime) for c in names]
    else:
        ids = [None] * len(names)
    pod_labels = dict(labels) if labels is not None else {"app": name.rsplit("-", 1)[0]}
    template_hash = hashlib.sha256(namespace.encode()).hexdigest()[:10]
    metadata: dict[str, Any] = {
        "name": name,
        "generateName": f"{name.rsplit('-', 1)[0]}-",
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": "1",
        "creationTimestamp": _CREATED,
        "labels": pod_labels,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{name.rsplit('-', 1)[0]}-{template_hash}",
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"rs/{namespace}/{name}")),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if managed_fields:
        metadata["annotations"] = {
            "kubectl.kubernetes.io/default-container": names[0] if names else "",
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9400",
        }
        metadata["managedFields"] = [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": _CREATED,
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields_v1(names),
            },
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": _STARTED,
                "fieldsType": "FieldsV1",
                "fieldsV1": _status_fields(names),
                "subresource": "status",
            },
        ]
    spec: dict[str, Any] = {
        "containers": [
            _container_spec(c, img, g, gpu_resource)
            for c, img, g in zip(names, image_names, gpus, strict=True)
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": []}},
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if init_containers:
        spec["initContainers"] = [_container_spec(c, "busybox:1.36", None) for c in init_containers]
    if claims:
        spec["resourceClaims"] = [
            {"name": claim, "resourceClaimTemplateName": f"{claim}-template"} for claim in claims
        ]
        if spec["containers"]:
            spec["containers"][0]["resources"]["claims"] = [{"name": claim} for claim in claims]
    if node is not None:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if node is not None:
        ip = pod_ip or _ip_for(f"{namespace}/{name}")
        status.update(
            {
                "hostIP": "192.168.0.10",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": _CREATED,
                "conditions": [
                    {
                        "type": kind,
                        "status": "True" if running else "False",
                        "lastProbeTime": None,
                        "lastTransitionTime": _STARTED,
                    }
                    for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "containerStatuses": [
                    _container_status(c, img, cid)
                    for c, img, cid in zip(names, image_names, ids, strict=True)
                ],
            }
        )
        if claims:
            status["resourceClaimStatuses"] = [
                {"name": claim, "resourceClaimName": generated}
                for claim, generated in claims.items()
            ]
        if init_containers:
            status["initContainerStatuses"] = [
                _container_status(
                    c, "busybox:1.36", container_id_for(uid, c, runtime) if running else None
                )
                for c in init_containers
            ]
    else:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec, "status": status}


def _ip_for(key: str) -> str:
    digest = hashlib.sha256(key.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{digest[2] or 1}"


def make_node(
    name: str,
    internal_ip: str | None = "10.0.0.1",
    *,
    gpus: int | None = 8,
    allocatable: int | None = None,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A node object as the API server returns it, with ``gpus`` of ``nvidia.com/gpu``."""
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
    }
    if gpus:
        node_labels["nvidia.com/gpu.present"] = "true"
        node_labels["nvidia.com/gpu.product"] = "NVIDIA-H200"
    node_labels.update(labels or {})
    capacity: dict[str, str] = {"cpu": "192", "memory": "2097152Mi", "pods": "110"}
    alloc: dict[str, str] = {"cpu": "191500m", "memory": "2090000Mi", "pods": "110"}
    if gpus is not None:
        capacity["nvidia.com/gpu"] = str(gpus)
        alloc["nvidia.com/gpu"] = str(gpus if allocatable is None else allocatable)
    addresses = [{"type": "Hostname", "address": name}]
    if internal_ip is not None:
        addresses.insert(0, {"type": "InternalIP", "address": internal_ip})
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"node/{name}")),
            "resourceVersion": "1",
            "creationTimestamp": _CREATED,
            "labels": node_labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.244.0.0/24", "providerID": f"aws:///us-east-1a/{name}"},
        "status": {
            "capacity": capacity,
            "allocatable": alloc,
            "addresses": addresses,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": _STARTED,
                    "lastTransitionTime": _CREATED,
                }
            ],
            "nodeInfo": {
                "machineID": hashlib.md5(name.encode(), usedforsecurity=False).hexdigest(),
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"system/{name}")),
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"boot/{name}")),
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.31.2",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.8.0-1015-aws",
                "osImage": "Ubuntu 22.04.5 LTS",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
