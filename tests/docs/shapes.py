"""Reading the docs' examples and comparing a live answer with the one a document shows.

A documented answer is JSON in which ``...`` (or ``…``) marks what the document
left out: in an object, keys it does not show; in a list, items it does not show;
in a string, text it does not show. Without such a mark an object must have
exactly the documented keys and a list exactly the documented items, so a field
the product adds, or one it drops, shows up as a difference.

Values that move with the demo's simulated load (utilization, memory, temperature,
the snapshot's age, GPU-hours) are compared by kind only: a number where the
document shows a number, ``null`` where it shows ``null``. Everything else (names,
UIDs, UUIDs, PIDs, indices, requests, verdicts, flags, messages) must be equal,
after the parts of a message that differ between runs of the demo (the agents'
port, a retry's delay, the failed method's name) are made alike.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ABRIDGED",
    "MOVING",
    "Block",
    "differences",
    "documented_json",
    "fenced_blocks",
    "normalized",
]

# What a documented answer left out, once read (the JSON string ``…``).
ABRIDGED = "\u2026"
_ELLIPSIS = re.compile(r"\.\.\.|\u2026")

# Fields whose values change with every tick of the demo.
MOVING = frozenset(
    {
        # GraphQL
        "utilizationGpu",
        "utilizationMemory",
        "memoryUsedBytes",
        "usedMemoryBytes",
        "smUtilization",
        "temperatureC",
        "powerUsageWatts",
        "snapshotAgeSeconds",
        "meanMemoryBytes",
        "peakMemoryBytes",
        "meanSmUtilization",
        "gpuSeconds",
        # /gpu-pods
        "UsedGpuMemory",
        "usageGpu",
        # gpugraph top -o json
        "utilizationPercent",
        "memoryBytes",
        "smPercent",
        "maxTemperatureC",
        "gpuHours",
        "memoryGibHours",
    }
)

# An agent's port is picked when the demo starts; a retry's delay is jittered. A down
# agent's error names the method that failed when this call asked it, and the retry's
# delay when an earlier call's failure holds the node back: which one a run sees is timing.
_PORT = re.compile(r"\b(127\.0\.0\.\d+):\d+")
_RETRY = re.compile(r" \(next retry in [\d.]+ s\)")
_METHOD = re.compile(r"(unreachable at \S+: )(?:Get|Put)[A-Za-z]+: ")


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown document."""

    path: Path
    line: int
    language: str
    text: str

    def where(self, root: Path) -> str:
        """``docs/x.md:12``, for test ids and messages."""
        return f"{self.path.relative_to(root)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, with its language and the line of its opening fence."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(```+|~~~+)\s*([\w+-]*)", lines[i])
        if opening is None:
            i += 1
            continue
        fence, language = opening.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence)), None)
        if end is None:
            break
        blocks.append(Block(path, i + 1, language, "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return blocks


def documented_json(text: str) -> Any:
    """``text`` as JSON, each ``...`` outside a string read as a mark of what was left out."""
    out: list[str] = []
    stack: list[str] = []
    i, in_string = 0, False
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\":
                out.append(text[i + 1])
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif (mark := _ELLIPSIS.match(text, i)) is not None:
            out.append(f'"{ABRIDGED}": null' if stack and stack[-1] == "{" else f'"{ABRIDGED}"')
            i = mark.end()
            # The mark may stand without the comma between it and the next item.
            rest = text[i:].lstrip()
            if rest and rest[0] not in ",}]":
                out.append(",")
            continue
        else:
            if char in "{[":
                stack.append(char)
            elif char in "}]" and stack:
                stack.pop()
            out.append(char)
        i += 1
    return json.loads("".join(out))


def normalized(text: str) -> str:
    """``text`` with what differs between runs of the demo made alike."""
    return _METHOD.sub(r"\1", _RETRY.sub("", _PORT.sub(r"\1:PORT", text)))


def _string_matches(documented: str, actual: str) -> bool:
    parts = [normalized(p) for p in _ELLIPSIS.split(documented)]
    actual = normalized(actual)
    if len(parts) == 1:
        return parts[0] == actual
    if not (actual.startswith(parts[0]) and actual.endswith(parts[-1])):
        return False
    at = len(parts[0])
    for part in parts[1:-1]:
        found = actual.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return at <= len(actual) - len(parts[-1])


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def differences(documented: Any, actual: Any, path: str = "$", key: str = "") -> list[str]:
    """How ``actual`` differs from the ``documented`` answer (empty when it matches)."""
    if isinstance(documented, dict):
        if not isinstance(actual, dict):
            return [f"{path}: the document shows an object, the answer has {actual!r}"]
        shown = {k: v for k, v in documented.items() if k != ABRIDGED}
        found: list[str] = []
        missing = sorted(set(shown) - set(actual))
        if missing:
            found.append(f"{path}: the answer has no {missing}")
        if ABRIDGED not in documented:
            extra = sorted(set(actual) - set(shown))
            if extra:
                found.append(f"{path}: the document does not show {extra}")
        for name in shown:
            if name in actual:
                found += differences(shown[name], actual[name], f"{path}.{name}", name)
        return found
    if isinstance(documented, list):
        if not isinstance(actual, list):
            return [f"{path}: the document shows a list, the answer has {actual!r}"]
        shown_items = [item for item in documented if item != ABRIDGED]
        if ABRIDGED not in documented:
            if len(shown_items) != len(actual):
                return [
                    f"{path}: the document shows {len(shown_items)} items, "
                    f"the answer has {len(actual)}: {actual!r}"
                ]
            found = []
            for n, (item, got) in enumerate(zip(shown_items, actual, strict=True)):
                found += differences(item, got, f"{path}[{n}]", key)
            return found
        # An abridged list: the documented items, in order, among the answer's.
        at = 0
        for item in shown_items:
            match = next(
                (n for n in range(at, len(actual)) if not differences(item, actual[n], path, key)),
                None,
            )
            if match is None:
                nearest = (
                    differences(item, actual[at], f"{path}[{at}]", key) if at < len(actual) else []
                )
                return [f"{path}: no item of the answer (in order) is {item!r}", *nearest[:3]]
            at = match + 1
        return []
    if key in MOVING:
        if _kind(documented) != _kind(actual):
            return [f"{path}: the document shows {documented!r}, the answer {actual!r}"]
        return []
    if isinstance(documented, str) and isinstance(actual, str):
        if _string_matches(documented, actual):
            return []
    elif documented == actual and _kind(documented) == _kind(actual):
        return []
    return [f"{path}: the document shows {documented!r}, the answer {actual!r}"]
