"""Large documents parse in a worker thread, with the token limit and error messages unchanged."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from strawberry.types import ExecutionResult

from graph_schema import parsing, pipeline
from graph_schema.context import GraphContext
from graph_schema.limits import SchemaLimits
from graph_schema.schema import build_schema
from tests.support.graph import MemoryCluster, MemorySnapshots, node_record


async def run(query: str, limits: SchemaLimits = SchemaLimits()) -> ExecutionResult:  # noqa: B008
    cluster = MemoryCluster()
    cluster.add_node(node_record("n1"))
    schema = build_schema(limits)
    return await schema.execute(
        query, context_value=GraphContext(cluster, MemorySnapshots(), schema.state)
    )


async def test_a_large_document_is_parsed_off_the_loop_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[str] = []
    real = pipeline.cached_parse

    def recording_cache(maxsize: int) -> Callable[..., object]:
        cached = real(maxsize)

        def recording(*args: object, **kwargs: object) -> object:
            threads.append(threading.current_thread().name)
            return cached(*args, **kwargs)

        return recording

    monkeypatch.setattr(pipeline, "cached_parse", recording_cache)
    big = "{ " + " ".join(f"a{i}: __typename" for i in range(25)) + " nodes { name } }"
    big += " " * parsing.THREAD_FROM_BYTES
    result = await run(big)
    assert result.errors is None and result.data is not None
    assert result.data["nodes"] == [{"name": "n1"}]
    assert threads and threads[0] != threading.main_thread().name
    threads.clear()
    await run("{ nodes { name } }")
    assert threads == [threading.main_thread().name], "small documents parse inline"


async def test_the_token_limit_and_syntax_errors_read_as_before() -> None:
    padding = " " * parsing.THREAD_FROM_BYTES
    result = await run("{ " + "nodes { name } " * 20 + "}" + padding, SchemaLimits(max_tokens=50))
    assert [e.message for e in result.errors or []] == [
        "Syntax Error: Document contains more than 50 tokens. Parsing aborted."
    ]
    broken = await run("{ nodes { name " + padding)
    assert broken.data is None and broken.errors
    assert broken.errors[0].message.startswith("Syntax Error")


async def test_concurrent_large_documents_parse_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each parser thread holds the GIL while it runs: several at once would
    # starve the event loop, so they queue for one thread instead.
    running = 0
    most = 0
    lock = threading.Lock()
    real = pipeline.cached_parse

    def slow_cache(maxsize: int) -> Callable[..., object]:
        cached = real(maxsize)

        def slow(*args: object, **kwargs: object) -> object:
            nonlocal running, most
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.02)
            try:
                return cached(*args, **kwargs)
            finally:
                with lock:
                    running -= 1

        return slow

    monkeypatch.setattr(pipeline, "cached_parse", slow_cache)
    big = "{ nodes { name } }" + " " * parsing.THREAD_FROM_BYTES
    results = await asyncio.gather(*(run(big) for _ in range(6)))
    assert all(r.errors is None for r in results)
    assert most == 1
