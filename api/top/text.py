"""Text from the cluster made safe to print: no control characters, and errors on one line.

Pod, process and node names, GPU errors and the servers' error messages come
from the cluster; a process may name itself with an escape sequence that would
otherwise drive the operator's terminal, or with a bidirectional control that
would make the terminal show its text in another order than it has (U+202E
turns the rest of a line around, so ``evil\u202etxt.exe`` reads ``evilexe.txt``).
"""

from __future__ import annotations

# Unicode's Bidi_Control characters, every one: ALM, LRM, RLM, the embeddings and
# overrides (LRE, RLE, PDF, LRO, RLO) and the isolates (LRI, RLI, FSI, PDI).
BIDI_CONTROLS = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
# C0, DEL and C1 control characters, and the bidirectional ones, as "?", as ``ls -q``
# shows control characters.
_CONTROL = dict.fromkeys([*range(32), *range(127, 160), *BIDI_CONTROLS], "?")


def printable(text: str) -> str:
    """``text`` with control characters replaced, so it cannot drive or reorder the terminal."""
    # Every character replaced is one isprintable() refuses: the fast path is exact.
    return text if text.isprintable() else text.translate(_CONTROL)


def one_line(text: str) -> str:
    """``text`` with its runs of whitespace (newlines too) as single spaces, and printable."""
    return printable(" ".join(text.split()))
