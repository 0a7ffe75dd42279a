"""Each scan reaches the occupancy log and the GPU event recorder, whatever the other does."""

from __future__ import annotations

from typing import Any, cast

import pytest

from node_resolver.cli import scan_hooks
from node_resolver.models import NodeSample, NodeSnapshot


class Hook:
    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.seen: list[NodeSnapshot] = []

    def observe(self, snapshot: NodeSnapshot) -> None:
        self.seen.append(snapshot)
        if self.fails:
            raise RuntimeError("the log is broken")


def test_a_failing_log_does_not_keep_a_scan_from_the_event_recorder() -> None:
    history, events = Hook(fails=True), Hook()
    hook = scan_hooks(cast(Any, history), cast(Any, events))
    assert hook is not None
    snapshot = NodeSnapshot(node_name="n", sample=NodeSample(), sampled_at=1.0)
    with pytest.raises(RuntimeError, match="the log is broken"):
        hook(snapshot)
    assert (history.seen, events.seen) == ([snapshot], [snapshot])
    assert scan_hooks(None, None) is None
