"""The server over time: releasing departed nodes, and garbage-collector settings for serving."""

from .departures import DepartedNodes
from .gc_tuning import gc_paused, tune_gc_for_serving

__all__ = ["DepartedNodes", "gc_paused", "tune_gc_for_serving"]
