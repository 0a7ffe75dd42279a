"""Text from the cluster made safe to print: no control characters, and errors on one line.

Pod, process and node names, GPU errors and the servers' error messages come
from the cluster; a process may name itself with an escape sequence that would
otherwise drive the operator's terminal.
"""

from __future__ import annotations

# C0, DEL and C1 control characters as "?", as ``ls -q`` shows them.
_CONTROL = dict.fromkeys([*range(32), *range(127, 160)], "?")


def printable(text: str) -> str:
    """``text`` with control characters replaced, so it cannot drive the terminal."""
    return text if text.isprintable() else text.translate(_CONTROL)


def one_line(text: str) -> str:
    """``text`` with its runs of whitespace (newlines too) as single spaces, and printable."""
    return printable(" ".join(text.split()))
