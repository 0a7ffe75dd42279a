"""The list and watch ``labelSelector`` and ``fieldSelector`` parameters."""

from __future__ import annotations

from typing import Any

import orjson

from graph_schema.selectors import LabelSelectorError, parse_label_selector

from .store import Stored

__all__ = ["Selector"]

# The field labels the API server accepts for pods and nodes. The first three
# are kept beside each stored object; the rest are read from it when asked for.
_KEPT = ("spec.nodeName", "metadata.name", "metadata.namespace")
_READ = (
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "spec.unschedulable",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_FIELDS = _KEPT + _READ


class Selector:
    """A parsed labelSelector plus fieldSelector."""

    def __init__(self, labels: str | None, fields: str | None) -> None:
        # The API server's full grammar (set-based "in"/"notin" too), parsed as the graph does.
        try:
            self.labels = parse_label_selector(labels or "")
        except LabelSelectorError as exc:
            raise ValueError(str(exc)) from None
        self.fields: list[tuple[str, str, bool]] = []  # (field, value, equal)
        for term in _terms(fields):
            if "=" not in term:
                raise ValueError(f"invalid field selector: {term!r} has no operator")
            equal = "!=" not in term
            key, value = term.replace("!=", "=").replace("==", "=").split("=", 1)
            if key not in _FIELDS:  # worded as the API server words it
                raise ValueError(f"field label not supported: {key}")
            self.fields.append((key, value, equal))

    def matches(self, item: Stored) -> bool:
        """Whether ``item`` passes every label and field term."""
        if not self.labels.matches(item.labels):
            return False
        served: dict[str, Any] | None = None
        for key, value, equal in self.fields:
            if key in _KEPT:
                actual = {
                    "spec.nodeName": item.node_name,
                    "metadata.name": item.name,
                    "metadata.namespace": item.namespace,
                }[key]
            else:
                served = served if served is not None else orjson.loads(item.raw)
                actual = _field(served, key)
            if (actual == value) != equal:
                return False
        return True


def _field(obj: dict[str, Any], path: str) -> str:
    """A field as the API server compares it: missing is "", booleans are "true"/"false"."""
    section, name = path.split(".", 1)
    value = (obj.get(section) or {}).get(name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None and path in ("spec.hostNetwork", "spec.unschedulable"):
        return "false"
    return "" if value is None else str(value)


def _terms(selector: str | None) -> list[str]:
    return [t.strip() for t in (selector or "").split(",") if t.strip()]
