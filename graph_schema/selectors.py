"""Kubernetes label selectors: ``a=b,c!=d,e in (x,y),f notin (z),g,!h``."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import BadUserInputError, quoted

__all__ = ["LabelSelector", "LabelSelectorError", "Requirement", "parse_label_selector"]

# A label key is an optional DNS-subdomain prefix and a name; values are names
# (possibly empty). See the Kubernetes "Labels and Selectors" reference.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.\-]{0,61}[A-Za-z0-9])?"
_KEY_RE = re.compile(rf"(?:[a-z0-9](?:[a-z0-9.\-]{{0,251}}[a-z0-9])?/)?{_NAME}")
_VALUE_RE = re.compile(rf"(?:{_NAME})?")


class LabelSelectorError(BadUserInputError):
    """A label selector that does not parse."""

    def __init__(self, selector: str, reason: str) -> None:
        super().__init__(f"invalid labelSelector {quoted(selector)}: {reason}")


class Operator(enum.Enum):
    """How a requirement compares a label."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One comma-separated clause of a selector."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this clause."""
        op = self.operator
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if op is Operator.EQUALS or op is Operator.IN:
            return value is not None and value in self.values
        # "!=" and "notin" also match objects without the label, as in Kubernetes.
        return value is None or value not in self.values


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed selector: every requirement must hold."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy every requirement (an empty selector matches all)."""
        requirements = self.requirements
        if len(requirements) == 1:  # the usual selector, once per pod: no generator
            return requirements[0].matches(labels)
        return all(r.matches(labels) for r in requirements)


_SET_RE = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ_RE = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


def _split_clauses(selector: str) -> list[str]:
    """Split on commas that are not inside a ``( … )`` value set."""
    clauses: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
            if depth > 1:
                raise LabelSelectorError(selector, "nested parentheses")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise LabelSelectorError(selector, "unbalanced ')'")
        elif ch == "," and depth == 0:
            clauses.append(selector[start:i])
            start = i + 1
    if depth:
        raise LabelSelectorError(selector, "unclosed '('")
    clauses.append(selector[start:])
    return clauses


def _check_key(selector: str, key: str) -> str:
    if not _KEY_RE.fullmatch(key):
        raise LabelSelectorError(selector, f"invalid label key {quoted(key)}")
    return key


def _check_value(selector: str, value: str) -> str:
    if not _VALUE_RE.fullmatch(value):
        raise LabelSelectorError(selector, f"invalid label value {quoted(value)}")
    return value


def _parse_clause(selector: str, clause: str) -> Requirement:
    text = clause.strip()
    if not text:
        raise LabelSelectorError(selector, "empty requirement")
    if m := _SET_RE.match(text):
        key = _check_key(selector, m["key"])
        raw = [v.strip() for v in m["values"].split(",")]
        if raw == [""]:
            raise LabelSelectorError(selector, f"empty value set for {quoted(key)}")
        values = frozenset(_check_value(selector, v) for v in raw)
        op = Operator.IN if m["op"] == "in" else Operator.NOT_IN
        return Requirement(key, op, values)
    if m := _EQ_RE.match(text):
        key = _check_key(selector, m["key"])
        value = _check_value(selector, m["value"])
        op = Operator.NOT_EQUALS if m["op"] == "!=" else Operator.EQUALS
        return Requirement(key, op, frozenset((value,)))
    if text.startswith("!"):
        return Requirement(_check_key(selector, text[1:].strip()), Operator.DOES_NOT_EXIST)
    if _KEY_RE.fullmatch(text):
        return Requirement(text, Operator.EXISTS)
    raise LabelSelectorError(selector, f"cannot parse requirement {quoted(text)}")


def parse_label_selector(selector: str) -> LabelSelector:
    """Parse a Kubernetes label selector; raise LabelSelectorError when malformed."""
    if not selector.strip():
        return LabelSelector(())
    clauses = _split_clauses(selector)
    return LabelSelector(tuple(_parse_clause(selector, c) for c in clauses))
