"""How many history and usage reads each caller has at the agents, so one cannot take them all.

An agent answers log reads from a few readers at most; a tenant who sends many
history queries at once (varied, so none can share an agent call) would
otherwise fill every reader of a node, and everyone else's history queries
would wait behind its reads past their deadline. Each caller (an identity)
gets a budget of its own: a number of reads in flight over all nodes, and a
smaller number at any one node. A read over its caller's budget waits its turn
behind that caller's own reads and holds nothing anyone else needs, so other
callers' reads start at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field

__all__ = ["CallerReads", "ReadSlot"]


@dataclass(slots=True)
class _Budget:
    """One caller's reads: slots over all nodes, and per node; who holds or awaits them."""

    total: asyncio.Semaphore
    nodes: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    # Reads holding or waiting for a slot, in all and per node: a budget nobody uses is dropped.
    users: int = 0
    node_users: dict[str, int] = field(default_factory=dict)
    # Reads holding their slots, in all and per node.
    held: int = 0
    node_held: dict[str, int] = field(default_factory=dict)


class ReadSlot:
    """One read's place in its caller's budget; ``release`` gives it back (once)."""

    __slots__ = ("_caller", "_held", "_node", "_owner")

    def __init__(self, owner: CallerReads, caller: Hashable, node: str) -> None:
        self._owner = owner
        self._caller = caller
        self._node = node
        self._held = True

    def release(self) -> None:
        """Give the slot back; a second call does nothing."""
        if self._held:
            self._held = False
            self._owner._release(self._caller, self._node)


class CallerReads:
    """Per-caller budgets of reads in flight: ``per_caller`` over all nodes, ``per_node`` at one."""

    def __init__(self, per_caller: int, per_node: int) -> None:
        if per_caller < 1 or per_node < 1:
            raise ValueError(
                f"reads per caller must be at least 1, got {per_caller} and {per_node} per node"
            )
        self.per_caller = per_caller
        self.per_node = per_node
        self._budgets: dict[Hashable, _Budget] = {}

    async def acquire(self, caller: Hashable, node: str) -> ReadSlot:
        """A slot for one read of ``caller`` at ``node``, once its budget has room."""
        budget = self._budgets.get(caller)
        if budget is None:
            budget = self._budgets[caller] = _Budget(asyncio.Semaphore(self.per_caller))
        node_slots = budget.nodes.get(node)
        if node_slots is None:
            node_slots = budget.nodes[node] = asyncio.Semaphore(self.per_node)
        budget.users += 1
        budget.node_users[node] = budget.node_users.get(node, 0) + 1
        try:
            # The node's slot first: a read waiting for a busy node holds none of the
            # caller's slots over all nodes, so its reads elsewhere go ahead.
            await node_slots.acquire()
            try:
                await budget.total.acquire()
            except BaseException:
                node_slots.release()
                raise
        except BaseException:
            self._leave(caller, budget, node)
            raise
        budget.held += 1
        budget.node_held[node] = budget.node_held.get(node, 0) + 1
        return ReadSlot(self, caller, node)

    def _release(self, caller: Hashable, node: str) -> None:
        budget = self._budgets[caller]
        budget.held -= 1
        budget.node_held[node] -= 1
        budget.total.release()
        budget.nodes[node].release()
        self._leave(caller, budget, node)

    def _leave(self, caller: Hashable, budget: _Budget, node: str) -> None:
        left = budget.node_users[node] - 1
        if left:
            budget.node_users[node] = left
        else:
            del budget.node_users[node]
            del budget.nodes[node]
            budget.node_held.pop(node, None)
        budget.users -= 1
        if not budget.users:
            del self._budgets[caller]

    def in_flight(self, caller: Hashable, node: str | None = None) -> int:
        """How many reads of ``caller`` hold a slot (at ``node``, or over all nodes)."""
        budget = self._budgets.get(caller)
        if budget is None:
            return 0
        return budget.held if node is None else budget.node_held.get(node, 0)

    def waiting(self, caller: Hashable) -> int:
        """How many reads of ``caller`` wait for a slot."""
        budget = self._budgets.get(caller)
        return 0 if budget is None else budget.users - budget.held

    def callers(self) -> int:
        """How many callers hold or await a slot."""
        return len(self._budgets)
