"""docs/metrics.md names what the chart and the server serve: alerts, their values, series."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import yaml

from tests.support.demo import LiveDemo

ROOT = Path(__file__).resolve().parents[2]
METRICS = (ROOT / "docs" / "metrics.md").read_text()
CHART = ROOT / "charts" / "gpugraph"
NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def chart_alerts() -> list[str]:
    """The alerts of the chart's PrometheusRule, as its template writes them."""
    template = (CHART / "templates" / "metrics-prometheusrule.yaml").read_text()
    return re.findall(r"^\s+- alert: (\w+)$", template, re.M)


def alerts_section() -> str:
    start = METRICS.index("**Alerts.**")
    return METRICS[start : METRICS.index("\n\n", METRICS.index("| alert |", start))]


def test_the_alerts_table_lists_every_alert_of_the_chart_and_counts_them() -> None:
    section = alerts_section()
    documented = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert sorted(documented) == sorted(chart_alerts())
    count = re.search(r"PrometheusRule \([^)]*\) has (\w+)", section)
    assert count is not None and NUMBERS.get(count[1]) == len(documented), count


def test_every_value_of_the_prometheus_rule_is_named() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["metrics"]["prometheusRule"]
    paragraph = next(p for p in METRICS.split("\n\n") if p.startswith("Chart values"))
    missing = [key for key in values if f"`prometheusRule.{key}`" not in paragraph
               and f"`.{key}`" not in paragraph]  # fmt: skip
    assert missing == [], f"docs/metrics.md's chart values lack prometheusRule {missing}"


def test_every_series_the_document_names_is_served_by_the_demo(demo: LiveDemo) -> None:
    exposition = httpx.get(f"{demo.url}/metrics", timeout=30).text
    served = set(re.findall(r"^(gpugraph_\w+)", exposition, re.M))
    # Whole names only: `gpugraph_gpu_*` is a family, written as one.
    named = set(re.findall(r"`(gpugraph_\w+)[`{]", METRICS))
    # A histogram is served as its _bucket, _sum and _count series.
    missing = sorted(n for n in named if n not in served and f"{n}_bucket" not in served)
    assert missing == [], f"docs/metrics.md names series the server does not serve: {missing}"
