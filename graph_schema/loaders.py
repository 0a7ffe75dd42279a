"""Per-operation dataloaders: one agent call per node, and GPUs found by UUID."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from aiodataloader import DataLoader

from .errors import GpuNotFoundError
from .gather import gather_inline
from .interfaces import AgentUnavailableError, ClusterView, Received, SnapshotSource
from .shared_futures import seen, shielded
from .types import Gpu

logger = logging.getLogger(__name__)


class Freshness:
    """When the oldest snapshot an operation read reached the server (monotonic clock).

    Shared between a request's context and the contexts forked from it, so
    the HTTP app can tell how long an answer built from them stays fresh.
    """

    def __init__(self) -> None:
        self.oldest: float | None = None

    def note(self, received_at: float) -> None:
        """Remember a snapshot that reached the server at ``received_at``."""
        if self.oldest is None or received_at < self.oldest:
            self.oldest = received_at


T = TypeVar("T")


K = TypeVar("K", bound=Hashable)


class SharedLoader(DataLoader[K, T]):
    """A loader whose future for a key every field of the operation that asks awaits."""

    def __init__(self, *, shielded: bool = True) -> None:
        super().__init__()
        # Whether each field gets its own shield (``shared_futures.shielded``):
        # graphql-core cancels the other fields of an object when one of them fails in
        # a non-null position, and a field cancelled while it awaits the loader's own
        # future would cancel it under every other field awaiting it. The compiled plan
        # cancels no field (only a whole operation), so its loaders skip the shields,
        # which cost a future and two callbacks per load.
        self.shielded = shielded
        # The keys whose futures are watched for a failure no field read.
        self._watched: set[K] = set()

    def load(self, key: K) -> asyncio.Future[T]:
        """The key's value, shared by every field of the operation that asks for it."""
        shared = super().load(key)
        if key not in self._watched:
            self._watched.add(key)
            # A failure is an answer, read or not: every field that asked may have given
            # up first (cancelled, when a shield forgets its inner future; or its
            # coroutine closed, when the plan hands over to strawberry).
            shared.add_done_callback(seen)
        return shielded(shared) if self.shielded else shared


class SnapshotLoader(SharedLoader[str, Received]):
    """Batches snapshot reads into one concurrent ``fetch`` per distinct node."""

    def __init__(
        self,
        source: SnapshotSource,
        gpu_nodes: dict[str, str],
        freshness: Freshness,
        *,
        shielded: bool = True,
    ) -> None:
        super().__init__(shielded=shielded)
        self.source = source
        self.gpu_nodes = gpu_nodes
        self.freshness = freshness

    async def batch_load_fn(  # type: ignore[override]
        self, node_names: Sequence[str]
    ) -> list[Received | Exception]:
        """Fetch every requested node at once; one node's failure fails only that node."""
        return await gather_inline([self._fetch(n) for n in node_names])

    async def _fetch(self, node_name: str) -> Received | Exception:
        try:
            received = await self.source.fetch(node_name)
        except AgentUnavailableError as exc:
            # The node's answer, kept in this loader's future for every field that asks
            # for it: without the frames it was raised through, which hold this loader.
            return exc.with_traceback(None)
        except Exception as exc:
            # The client learns which node failed; the details stay in the log.
            logger.exception("fetching the snapshot of node %r failed", node_name)
            return AgentUnavailableError(node_name, f"internal error ({type(exc).__name__})")
        for uuid in received.snapshot.sample.gpu_uuids():
            self.gpu_nodes[uuid] = node_name
        self.freshness.note(time.monotonic() - max(0.0, received.held_seconds))
        return received

    async def load_all(self, node_names: Sequence[str]) -> list[Received | BaseException]:
        """Several nodes in one batch; failures are returned, not raised."""
        return list(
            await asyncio.gather(*(self.load(n) for n in node_names), return_exceptions=True)
        )


# Several nodes' GPUs as the caller sees them; a failing node comes back as its exception.
NodeGpus = Callable[[Sequence[str]], Awaitable[list[list[Gpu] | Exception]]]


class GpuLoader(SharedLoader[str, "Gpu | None"]):
    """Finds GPUs by UUID: asks the hinted nodes first, then every visible node in one batch.

    ``view`` says which nodes the caller may see, so no error names another's
    node; ``gpus_of`` builds the nodes' GPUs as the caller sees them.
    """

    def __init__(
        self,
        view: ClusterView,
        hints: Mapping[str, str],
        gpus_of: NodeGpus,
        *,
        shielded: bool = True,
    ) -> None:
        super().__init__(shielded=shielded)
        self.view = view
        self.hints = hints
        self.gpus_of = gpus_of

    async def batch_load_fn(  # type: ignore[override]
        self, uuids: Sequence[str]
    ) -> list[Gpu | Exception | None]:
        """Resolve each UUID to its GPU, None when no node has it."""
        view = self.view
        found: dict[str, Gpu] = {}
        failed: dict[str, Exception] = {}

        async def search(node_names: Sequence[str]) -> None:
            for name, result in zip(node_names, await self.gpus_of(node_names), strict=True):
                if isinstance(result, Exception):
                    failed[name] = result
                    continue
                for gpu in result:
                    found[gpu.uuid] = gpu

        hints = self.hints
        hinted = {hints[u] for u in uuids if u in hints and view.sees_node(hints[u])}
        if hinted:
            await search(sorted(hinted))
        missing = [u for u in uuids if u not in found and hints.get(u) not in failed]
        if missing:
            rest = [n.name for n in view.nodes() if n.name not in hinted]
            await search(rest)

        results: list[Gpu | Exception | None] = []
        for uuid in uuids:
            gpu = found.get(uuid)
            if gpu is not None:
                results.append(gpu)
            elif (node := hints.get(uuid)) is not None and node in failed:
                # Its node is known and down: say so rather than "no such GPU".
                results.append(failed[node])
            elif failed:
                results.append(GpuNotFoundError(uuid, list(failed)))
            else:
                results.append(None)
        return results
