"""What working out the keep-warm plan costs the event loop, by cluster size (issue 35).

The adaptive policy works its plan out again every ``REPLAN_EVERY`` seconds, on
the event loop, over every node read: a query that arrives meanwhile waits for
it. This times ``KeepWarm.plan`` alone over nodes read by a dashboard and by
narrower queries (a third every second, a third every 5 s, a third every
30 s; 0.5 ms a refresh, a quarter of a core: the budget spaces the first
third out), for this checkout and, with ``--baseline REV``, the policy as it
was at git revision ``REV``, side by side in one run (rounds alternating).

Run ``python bench/keep_warm_plan_bench.py --baseline REV`` or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
MODULE = "api/agents/keep_warm.py"
PERIODS = (1.0, 5.0, 30.0)
COST = 0.0005


def policy_module(path: Path, name: str) -> ModuleType:
    """The keep-warm module at ``path`` (it imports the standard library only)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Reads:
    """A policy over a manual clock, and its nodes read as the queries above would."""

    def __init__(self, module: ModuleType, nodes: int) -> None:
        self.now = 0.0
        self.policy = module.KeepWarm(ttl=1.0, budget=0.25, timeout=2.0, clock=lambda: self.now)
        self.policy.spent(COST)
        self.periods = {f"gpu-node-{i:05d}": PERIODS[i % len(PERIODS)] for i in range(nodes)}
        # A minute of reads first, so that every node has its period.
        for _ in range(60):
            self.second()

    def second(self) -> None:
        """One second on: the nodes due are read."""
        self.now += 1.0
        for node, period in self.periods.items():
            if self.now % period == 0:
                self.policy.read(node)

    def time_plan(self) -> tuple[float, str]:
        """Seconds one plan took (the clock a REPLAN_EVERY on), and its regime."""
        self.second()
        start = time.perf_counter()
        plan = self.policy.plan()
        return time.perf_counter() - start, plan.regime


def main() -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000", help="node counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=50, help="plans timed per size and tree")
    parser.add_argument("--baseline", help="a git revision whose policy runs beside this one")
    parser.add_argument("--small", action="store_true", help="CI size: 300 nodes, 5 plans")
    args = parser.parse_args()
    if args.small:
        args.sizes, args.repeat = "300", 5
    trees = {"this tree": policy_module(ROOT / MODULE, "keep_warm_here")}
    if args.baseline:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{args.baseline}:{MODULE}"],
            check=True,
            capture_output=True,
        ).stdout
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "keep_warm.py"
            path.write_bytes(source)
            trees = {args.baseline: policy_module(path, "keep_warm_baseline")} | trees
    print(f"\n# keep-warm plan benchmark — {time.strftime('%Y-%m-%d')}\n")
    print("| nodes | " + " | ".join(f"{name}: p50 | max" for name in trees) + " |")
    print("|---|" + "---|---|" * len(trees))
    for nodes in (int(n) for n in args.sizes.split(",")):
        states = {name: Reads(module, nodes) for name, module in trees.items()}
        took: dict[str, list[float]] = {name: [] for name in trees}
        regimes = set()
        # Alternating rounds, so both meet the same machine.
        for _ in range(args.repeat):
            for name, reads in states.items():
                seconds, regime = reads.time_plan()
                took[name].append(seconds)
                regimes.add(regime)
        cells = " | ".join(
            f"{statistics.median(t) * 1000:.2f} ms | {max(t) * 1000:.2f} ms" for t in took.values()
        )
        print(f"| {nodes:,} ({', '.join(sorted(regimes))}) | {cells} |")


if __name__ == "__main__":
    main()
