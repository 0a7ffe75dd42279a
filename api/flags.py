"""Command-line pieces shared by ``gpugraph serve`` and ``gpugraph demo``."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["LOG_LEVELS", "add_defaulted"]

# For ``--log-level`` with ``type=str.lower``, so DEBUG and debug both work.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def add_defaulted(
    group: argparse._ActionsContainer, defaults: object, flag: str, help_text: str, **kwargs: Any
) -> None:
    """``flag``, defaulting to the field of its name in ``defaults``, named at the end of its help.

    So a command's defaults are declared once, in its settings dataclass.
    """
    default = getattr(defaults, flag.removeprefix("--").replace("-", "_"))
    shown = format(default, "g") if isinstance(default, float) else default
    group.add_argument(flag, default=default, help=f"{help_text} (default {shown})", **kwargs)
