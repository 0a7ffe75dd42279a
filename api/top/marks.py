"""The flags ``gpugraph top`` puts on its rows: one set, the same words in every view.

Each flag is declared here once, with what it means: the FLAGS column of the
GPU, pod and node tables, the ``flags`` lists of ``-o json``/``-o yaml``, the
legend of ``gpugraph top --help`` and the one in docs/top.md (a test holds the
docs to these words) all come from this list. A row's flags are its own and
those of the processes under it: a process's, then its GPU's (with the GPU's
own MIG and EVENTS), its pod's (with UNREQUESTED, which belongs to the pod, and
EVENTS where the pod was on a GPU when it had an event), its node's.

Only the standard library: ``gpugraph --help`` loads it for top's legend.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ALLOCATION_UNKNOWN",
    "EVENTS",
    "EVENT_HOURS",
    "IDLE",
    "MARKS",
    "MIG",
    "NOT_ALLOCATED",
    "UNREQUESTED",
    "Mark",
    "legend",
]


@dataclass(frozen=True, slots=True)
class Mark:
    """One flag: the word the tables and documents show, its colour, and what it means."""

    word: str
    style: str
    meaning: str


UNREQUESTED = Mark(
    "UNREQUESTED",
    "bold red",
    "the pod uses more GPUs than it requested (one that requested none, using one, included)",
)
NOT_ALLOCATED = Mark(
    "NOT-ALLOCATED",
    "bold magenta",
    "a process runs on a GPU its container was not given: the kubelet's device record or the "
    "pod's DRA claims name other GPUs (docs/allocation.md)",
)
ALLOCATION_UNKNOWN = Mark(
    "ALLOC-UNKNOWN",
    "dim",
    "whether a pod's process was given its GPU cannot be told: the node has no allocation data, "
    "or it does not list the container yet",
)
IDLE = Mark(
    "IDLE",
    "yellow",
    "a pod holds a GPU (or MIG device, replica, DRA device) it does not use: no process of its "
    "container above the idle threshold for the agent's idle window, IDLE or UNUSED "
    "(docs/allocation.md)",
)
MIG = Mark("MIG", "cyan", "the GPU is in MIG mode: its processes run on MIG devices, slices of it")
# How far back a health event flags its GPU, as far back as the map badges one.
EVENT_HOURS = 24
EVENTS = Mark(
    "EVENTS",
    "bold white on red",
    f"a health event (an XID, an ECC error, the GPU lost) in the last {EVENT_HOURS} hours on "
    "this GPU; for a pod, on a GPU it had a process on at that moment; for a node, on one of "
    "its GPUs. top --events lists them (docs/gpu-events.md)",
)
# The order flags are shown in, everywhere: a GPU that failed first.
MARKS = (EVENTS, UNREQUESTED, NOT_ALLOCATED, ALLOCATION_UNKNOWN, IDLE, MIG)


def ordered(found: Iterable[Mark]) -> tuple[Mark, ...]:
    """``found`` once each, in the order of MARKS."""
    present = set(found)
    return tuple(mark for mark in MARKS if mark in present)


def legend(width: int = 79) -> str:
    """The FLAGS legend, as ``gpugraph top --help`` ends with it: lines of at most ``width``."""
    import textwrap

    indent = " " * (max(len(mark.word) for mark in MARKS) + 4)
    lines = ["FLAGS (the same words in every view, and in -o json/yaml as flags):"]
    for mark in MARKS:
        first = f"  {mark.word}".ljust(len(indent))
        lines.extend(
            textwrap.wrap(mark.meaning, width, initial_indent=first, subsequent_indent=indent)
        )
    lines.extend(
        textwrap.wrap(
            "A GPU's, pod's or node's flags include those of the processes on it.",
            width,
            initial_indent="  ",
            subsequent_indent="  ",
        )
    )
    return "\n".join(lines)
