"""The server over time: releasing departed nodes, and the garbage collector while serving."""

from .departures import DepartedNodes
from .gc_tuning import GcPauses, gc_paused, gc_pauses_recorded, tune_gc_for_serving

__all__ = [
    "DepartedNodes",
    "GcPauses",
    "gc_paused",
    "gc_pauses_recorded",
    "tune_gc_for_serving",
]
