"""API discovery for the stub API server, in the real server's (unaggregated) format.

client-go starts every kubectl command by asking ``/api`` and ``/apis`` which
groups, versions and resources exist, then ``/api/v1`` and
``/apis/{group}/{version}`` for each. It asks for the aggregated
``apidiscovery.k8s.io/v2`` format first and falls back to these documents
when the answer is plain ``application/json``, as against any older server.

Only what the stub serves is listed, with the verbs it answers, so kubectl
refuses the rest itself instead of sending requests that would fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["RESOURCES", "ApiResource", "discovery_document", "version_document"]

# The Kubernetes release the stub's behaviour follows, as /version reports it.
SERVED_VERSION = ("1", "31")


@dataclass(frozen=True, slots=True)
class ApiResource:
    """One resource as discovery lists it."""

    group: str  # "" for the core group under /api
    version: str
    name: str  # plural, as in the URL
    singular: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def entry(self) -> dict[str, Any]:
        """The ``APIResource`` object in an ``APIResourceList``."""
        entry: dict[str, Any] = {
            "name": self.name,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        return entry


_READ = ("get", "list", "watch")

RESOURCES: tuple[ApiResource, ...] = (
    ApiResource("", "v1", "pods", "pod", "Pod", True, _READ, ("po",), ("all",)),
    ApiResource("", "v1", "nodes", "node", "Node", False, _READ, ("no",)),
    ApiResource("", "v1", "namespaces", "namespace", "Namespace", False, ("get", "list"), ("ns",)),
    ApiResource(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        False,
        ("create",),
    ),
    ApiResource(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
        False,
        ("create",),
    ),
)


def dra_resources(version: str | None) -> tuple[ApiResource, ...]:
    """ResourceClaims and ResourceSlices at ``version`` of resource.k8s.io; none for None."""
    if version is None:
        return ()
    return (
        ApiResource(
            "resource.k8s.io",
            version,
            "resourceclaims",
            "resourceclaim",
            "ResourceClaim",
            True,
            _READ,
        ),
        ApiResource(
            "resource.k8s.io",
            version,
            "resourceslices",
            "resourceslice",
            "ResourceSlice",
            False,
            _READ,
        ),
    )


def _groups(resources: tuple[ApiResource, ...]) -> Iterator[str]:
    seen: list[str] = []
    for resource in resources:
        if resource.group and resource.group not in seen:
            seen.append(resource.group)
            yield resource.group


def _versions(group: str, resources: tuple[ApiResource, ...]) -> list[dict[str, str]]:
    versions: list[str] = []
    for resource in resources:
        if resource.group == group and resource.version not in versions:
            versions.append(resource.version)
    return [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]


def _api_group(group: str, resources: tuple[ApiResource, ...]) -> dict[str, Any]:
    versions = _versions(group, resources)
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def _resource_list(group_version: str, resources: tuple[ApiResource, ...]) -> dict[str, Any] | None:
    entries = [r.entry() for r in resources if r.group_version == group_version]
    if not entries:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }


def discovery_document(path: str, dra_version: str | None = None) -> dict[str, Any] | None:
    """The discovery document served at ``path``, or None when ``path`` is not one.

    ``dra_version`` is the one version of resource.k8s.io served, if any.
    """
    resources = RESOURCES + dra_resources(dra_version)
    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [],
        }
    if len(parts) == 2 and parts[0] == "api":
        return _resource_list(parts[1], resources)
    if parts == ["apis"]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_api_group(g, resources) for g in _groups(resources)],
        }
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in _groups(resources):
        return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(parts[1], resources)}
    if len(parts) == 3 and parts[0] == "apis":
        return _resource_list(f"{parts[1]}/{parts[2]}", resources)
    return None


def version_document() -> dict[str, str]:
    """What ``/version`` answers (``kubectl version`` shows it as the server version)."""
    major, minor = SERVED_VERSION
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{major}.{minor}.0-stub",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
