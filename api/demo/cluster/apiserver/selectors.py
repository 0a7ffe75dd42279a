"""The list and watch ``labelSelector`` and ``fieldSelector`` parameters."""

from __future__ import annotations

from .store import Stored

__all__ = ["Selector"]

_FIELDS = ("spec.nodeName", "metadata.name", "metadata.namespace")


class Selector:
    """A parsed labelSelector plus fieldSelector."""

    def __init__(self, labels: str | None, fields: str | None) -> None:
        self.required: list[tuple[str, str, str]] = []  # (op, key, value)
        for term in _terms(labels):
            if "!=" in term:
                key, value = term.split("!=", 1)
                self.required.append(("!=", key.strip(), value.strip()))
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                self.required.append(("=", key.strip(), value.strip()))
            elif term.startswith("!"):
                self.required.append(("!", term[1:].strip(), ""))
            else:
                self.required.append(("exists", term, ""))
        self.fields: list[tuple[str, str, bool]] = []  # (field, value, equal)
        for term in _terms(fields):
            equal = "!=" not in term
            key, value = term.replace("!=", "=").replace("==", "=").split("=", 1)
            if key not in _FIELDS:
                raise ValueError(f"field selector {key!r} is not supported")
            self.fields.append((key, value, equal))

    def matches(self, item: Stored) -> bool:
        """Whether ``item`` passes every label and field term."""
        for op, key, value in self.required:
            present = key in item.labels
            if op == "=" and item.labels.get(key) != value:
                return False
            if op == "!=" and item.labels.get(key) == value:
                return False
            if op == "exists" and not present:
                return False
            if op == "!" and present:
                return False
        for key, value, equal in self.fields:
            actual = {
                "spec.nodeName": item.node_name,
                "metadata.name": item.name,
                "metadata.namespace": item.namespace,
            }[key]
            if (actual == value) != equal:
                return False
        return True


def _terms(selector: str | None) -> list[str]:
    return [t.strip() for t in (selector or "").split(",") if t.strip()]
