"""Parsing through strawberry's parser cache, large documents off the event loop.

A dashboard sends the same few documents again and again: each is parsed
once, in strawberry's shared LRU cache of graphql-core's parser, and the
validation cache (keyed on the parsed document) then hits too.

graphql-core's parser is pure Python: a document at the token limit takes
tens of milliseconds, during which the loop serves nobody, and ten of them
at once stall every other client for hundreds. A document over
``THREAD_FROM_BYTES`` is parsed (or found in the cache) in a worker thread
instead; the interpreter switches threads every few milliseconds, so the
loop keeps answering meanwhile. There is one such thread, server-wide: the
parser holds the GIL while it runs, so ten parsing threads would leave the
loop a tenth of the interpreter, where one leaves it half; concurrent large
documents queue for it, costing nothing while they wait. Small documents
(nearly all) parse inline, where a thread would cost more than it saves. A
document that does not parse is left to strawberry, which parses it again
and reports the error its usual way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graphql import GraphQLError
from strawberry.types import ExecutionContext

__all__ = ["CACHED_DOCUMENTS", "THREAD_FROM_BYTES", "parse_cached"]

# Documents at least this long are parsed in a thread.
THREAD_FROM_BYTES = 2048
# Distinct documents kept parsed and validated (dashboards send a handful each).
CACHED_DOCUMENTS = 256
# One thread for every event loop: executors, unlike asyncio's locks, are not
# bound to a loop.
PARSER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpugraph-parse")


async def parse_cached(ec: ExecutionContext, parse: Callable[..., Any]) -> None:
    """Parse the operation's document with ``parse`` (strawberry's parser cache), over
    ``THREAD_FROM_BYTES`` in the parsing thread; on a syntax error leave it to strawberry."""
    query = ec.query
    if ec.graphql_document is not None or not query:
        return
    # max_tokens, from the token limit: part of the cache's key.
    parsing = functools.partial(parse, query, **ec.parse_options)
    # On a syntax error strawberry parses it again and reports it its usual way.
    with contextlib.suppress(GraphQLError):
        if len(query) >= THREAD_FROM_BYTES:
            loop = asyncio.get_running_loop()
            ec.graphql_document = await loop.run_in_executor(PARSER, parsing)
        else:
            ec.graphql_document = parsing()
