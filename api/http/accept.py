"""Accept-style request headers (``Accept``, ``Accept-Encoding``), read per RFC 9110 §12.4.

Each element is a token or media range, its parameters, and an optional
weight ``q`` between 0 and 1 with at most three decimals. A weight is a
number, so ``q=0``, ``q=0.0`` and ``q=0.000`` all mean "not acceptable". An
element whose weight breaks the grammar is dropped rather than guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator

__all__ = ["quality", "weighted"]

# RFC 9110 §12.4.2: qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
_QVALUE = re.compile(r"0(\.[0-9]{0,3})?|1(\.0{0,3})?")


def _split(text: str, separator: str) -> Iterator[str]:
    """``text`` split at ``separator``, except inside quoted strings (which may hold it)."""
    start, quoted, escaped = 0, False, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def weighted(header: str) -> Iterator[tuple[str, float]]:
    """Each element's name (lower case, without its parameters) and weight (1 when absent)."""
    for element in _split(header, ","):
        name, *params = (part.strip() for part in _split(element, ";"))
        if not name:
            continue
        weight = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                value = value.strip()
                weight = float(value) if _QVALUE.fullmatch(value) else -1.0
                break  # the first q is the weight; what follows are extensions
        if weight >= 0:
            yield name.lower(), weight


def quality(header: str, names: Collection[str], wildcard: str | None = None) -> float:
    """The weight ``header`` gives ``names`` (aliases, lower case); 0 when not acceptable.

    An element naming one of ``names`` wins over ``wildcard`` (``*`` in
    Accept-Encoding, ``*/*`` in Accept), which applies only when none does.
    """
    named = [q for name, q in weighted(header) if name in names]
    if named:
        return max(named)
    if wildcard is not None:
        return max((q for name, q in weighted(header) if name == wildcard), default=0.0)
    return 0.0
