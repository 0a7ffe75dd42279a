"""Our gauge writer against prometheus_client's ``generate_latest``: the same bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from api.gpu_metrics.families import SnapshotCollector
from node_resolver.metrics.exposition import render_gauges
from tests.server.gpu_metrics.test_exporter import World


class Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def reference(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families))
    return generate_latest(registry)


def awkward() -> list[Metric]:
    """Label values and help texts that need escaping, label names out of order, odd values."""
    g = GaugeMetricFamily("x_bytes", 'help with "quotes", \\ and\na newline', labels=["z", "a"])
    for value in ("plain", 'say "hi"', "back\\slash", "new\nline", "{braces}", "ünï", ""):
        g.add_metric([value, "1"], 1.5)
    for number in (0.0, -0.0, 1e21, 123456789.0, 1 / 3, float("inf"), float("-inf"), float("nan")):
        g.add_metric([str(number), "n"], number)
    empty = GaugeMetricFamily("y_ratio", "no samples", labels=["a"])
    bare = GaugeMetricFamily("z_total_up", "no labels", value=2)
    return [g, empty, bare]


def test_the_same_bytes_as_generate_latest_for_awkward_families() -> None:
    assert render_gauges(awkward()) == reference(awkward())


@pytest.mark.parametrize("dcgm", [False, True])
def test_the_same_bytes_as_generate_latest_for_the_servers_series(dcgm: bool) -> None:
    world = World()
    exporter = world.exporter(dcgm_names=dcgm)
    results = asyncio.run(exporter.collect())
    families = list(SnapshotCollector(results, dcgm_names=dcgm).collect())
    again = list(SnapshotCollector(results, dcgm_names=dcgm).collect())
    assert render_gauges(families) == reference(again)


def test_counters_are_the_same_bytes_as_generate_latest() -> None:
    def counters() -> list[Metric]:
        c = CounterMetricFamily("x_seconds", 'a "counter"', labels=["z", "a"])
        c.add_metric(["new\nline", "1"], 2.5)
        c.add_metric(["plain", "2"], 0.0)
        return [c, GaugeMetricFamily("g", "a gauge", value=1)]

    assert render_gauges(counters()) == reference(counters())


def test_anything_but_a_plain_gauge_or_counter_is_refused() -> None:
    with pytest.raises(ValueError):
        render_gauges([CounterMetricFamily("c", "created too", value=1, created=1.0)])
    with pytest.raises(ValueError):
        render_gauges([SummaryMetricFamily("s", "a summary", count_value=1, sum_value=1)])
    bad = GaugeMetricFamily("g", "bad label", labels=["a-b"])
    bad.add_metric(["v"], 1)
    with pytest.raises(ValueError):
        render_gauges([bad])
