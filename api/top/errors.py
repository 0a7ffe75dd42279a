"""The one error ``gpugraph top`` reports: a single line, no traceback, exit code 1."""

from __future__ import annotations


class TopError(Exception):
    """Something the user must fix or wait for; the message is the whole report."""
