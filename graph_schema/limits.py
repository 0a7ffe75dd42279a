"""Limits on what one query, and the server as a whole, may ask for."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import BadUserInputError, GraphUserError

# Shortest and longest subscription tick.
MIN_INTERVAL_SECONDS = 0.5
MAX_INTERVAL_SECONDS = 3600.0
DEFAULT_MAX_SUBSCRIPTIONS = 200
# One identity's share of those: a quarter, so one tenant cannot lock the others out.
DEFAULT_MAX_SUBSCRIPTIONS_PER_CALLER = 50
DEFAULT_INTERVAL_SECONDS = 2.0
# Fields one selection set may hold once its fragments are flattened (see cost.py).
DEFAULT_MAX_FIELDS_PER_SELECTION = 100
# History and usage reads one caller (an identity) may have at the agents at once, over
# all its queries: as many as one query's fan-out (history.FAN_OUT), however many it sends.
DEFAULT_MAX_HISTORY_READS_PER_CALLER = 64
# Of those, at any one node: fewer than the reads an agent serves at once, so that one
# caller's flood leaves the others a reader.
DEFAULT_MAX_HISTORY_READS_PER_CALLER_PER_NODE = 2


@dataclass(frozen=True, slots=True)
class SchemaLimits:
    """Per-query limits, and the server-wide subscription cap.

    These defaults are the server's: ``api.settings.Settings`` and the command
    line take theirs from here.

    Depth, aliases and tokens are checked before execution, and so is the
    operation's estimated worst-case result size against ``max_result_items``
    (see cost.py), along with ``max_fields_per_selection``. During execution
    the same budget is enforced again: every list resolver charges its length to
    the operation (nodes, pods, containers, GPUs, processes listed by a root or
    per-pod field), and the field that crosses the limit fails. GPU processes
    and their pods are plain attributes of the GPU objects built once per
    snapshot, so they are not charged: the full-cluster query
    ``{ nodes { gpus { processes { pod { name } } } } }`` over 1,000 nodes x
    8 GPUs charges 9,000 (one per node, one per GPU), far below the default.

    ``max_result_items`` is 150,000: the full-cluster query at 1,000 nodes x
    8 GPUs x 4 processes is estimated at 73,000 and the GPU map's query (with
    each process's container) at 106,000, both admitted, while a
    ``gpus { node { gpus ... } }`` chain ten deep over the demo's 4 x 8 GPUs
    (168,512) is refused; answers near the limit take about a second and some
    tens of MB on two cores. ``max_variable_items`` bounds the list items an
    operation's variables hold (entity representations included), counted
    before graphql-core coerces them: coercion and ``_entities`` run in one
    piece on the event loop, about 18 µs per representation, so 5,000 keep
    it under 100 ms. A list written into the document is bounded by
    ``max_tokens`` already.
    """

    max_depth: int = 12
    max_aliases: int = 30
    max_tokens: int = 5000
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    max_subscriptions_per_caller: int = DEFAULT_MAX_SUBSCRIPTIONS_PER_CALLER
    max_result_items: int = 150_000
    max_variable_items: int = 5_000
    max_fields_per_selection: int = DEFAULT_MAX_FIELDS_PER_SELECTION
    # False refuses __schema and __type (GraphiQL then cannot load the schema);
    # __typename and federation's _service stay.
    introspection: bool = True


class SubscriptionLimitError(GraphUserError):
    """The server, or this caller, already holds as many subscriptions as allowed."""

    def __init__(self, limit: int, *, per_caller: bool = False) -> None:
        allowed = f"{limit} per caller" if per_caller else str(limit)
        super().__init__(
            f"too many concurrent subscriptions: this server allows {allowed}; try again later"
        )


class SubscriptionLimiter:
    """Counts live subscriptions and refuses new ones above the server's or a caller's cap."""

    def __init__(
        self,
        limit: int = DEFAULT_MAX_SUBSCRIPTIONS,
        per_caller: int = DEFAULT_MAX_SUBSCRIPTIONS_PER_CALLER,
    ) -> None:
        self.limit = limit
        self.per_caller = per_caller
        self.active = 0
        # Live subscriptions by caller identity; an identity leaves when it holds none.
        self.by_caller: dict[str, int] = {}

    @contextmanager
    def hold(self, caller: str | None = None) -> Iterator[None]:
        """One slot for the duration of the block; SubscriptionLimitError when full.

        ``caller`` is the authenticated identity (None without authentication,
        where only the server-wide cap applies).
        """
        # Check and increment with no await in between, so this is race-free
        # on one event loop.
        if self.active >= self.limit:
            raise SubscriptionLimitError(self.limit)
        if caller is not None:
            held = self.by_caller.get(caller, 0)
            if held >= self.per_caller:
                raise SubscriptionLimitError(self.per_caller, per_caller=True)
            self.by_caller[caller] = held + 1
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            if caller is not None:
                left = self.by_caller[caller] - 1
                if left:
                    self.by_caller[caller] = left
                else:
                    del self.by_caller[caller]


def clamp_interval(seconds: float | None) -> float:
    """A subscription tick length within [MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS]."""
    if seconds is None:
        return DEFAULT_INTERVAL_SECONDS
    if math.isnan(seconds):
        raise BadUserInputError("intervalSeconds must be a number")
    return min(max(seconds, MIN_INTERVAL_SECONDS), MAX_INTERVAL_SECONDS)
