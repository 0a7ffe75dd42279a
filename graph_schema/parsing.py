"""Parsing large documents off the event loop.

graphql-core's parser is pure Python: a document at the token limit takes
tens of milliseconds, during which the loop serves nobody, and ten of them
at once stall every other client for hundreds. A document over
``THREAD_FROM_BYTES`` is parsed in a worker thread instead; the interpreter
switches threads every few milliseconds, so the loop keeps answering
meanwhile. There is one such thread, server-wide: the parser holds the GIL
while it runs, so ten parsing threads would leave the loop a tenth of the
interpreter, where one leaves it half; concurrent large documents queue for
it, costing nothing while they wait. Small documents (nearly all) parse
inline, where a thread would cost more than it saves. A document that does
not parse is left to strawberry, which parses it again and reports the
error its usual way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graphql import GraphQLError, parse
from strawberry.extensions import SchemaExtension

__all__ = ["THREAD_FROM_BYTES", "ThreadedParse"]

# Documents at least this long are parsed in a thread.
THREAD_FROM_BYTES = 2048
# One thread for every event loop: executors, unlike asyncio's locks, are not
# bound to a loop.
PARSER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpugraph-parse")


class ThreadedParse(SchemaExtension):
    """Parses documents over ``THREAD_FROM_BYTES`` in a worker thread."""

    async def on_parse(self) -> AsyncIterator[None]:
        ec = self.execution_context
        query = ec.query
        if ec.graphql_document is None and query and len(query) >= THREAD_FROM_BYTES:
            options: dict[str, Any] = dict(ec.parse_options)  # max_tokens, from the token limiter
            # On a syntax error strawberry parses it again and reports it its usual way.
            with contextlib.suppress(GraphQLError):
                ec.graphql_document = await asyncio.get_running_loop().run_in_executor(
                    PARSER, functools.partial(parse, query, **options)
                )
        yield
