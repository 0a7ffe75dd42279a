"""The cluster map in headless Chromium: first render and one update at 1,000 nodes x 8 GPUs.

A real ``gpugraph serve`` (its own process, real uvicorn) over the stub API
server and one real agent per node (``bench/agent_host.py``, the fleet of
``bench/fleet.py``: 8 GPUs x 4 processes per node), and Debian's Chromium
driving ``/map`` through Playwright. Measured in one run:

1. first render: from navigation to the frame after every tile is in the
   document, with the ClusterMap query's share (server time + transfer) and
   the script's share (building the DOM from the parsed answer);
2. one update: a real subscription tick (the fleet's numbers do not move, so
   nothing is redrawn), then a tick in which all 8,000 GPUs changed, applied
   in the page as the subscription would (script time, and to the next frame);
3. a pod highlight and a filter over every tile; the DOM's size and JS heap.

Run ``python bench/map_bench.py`` (1,000 nodes) or ``--small`` (CI, 10 nodes).

First renders are also taken ``--rounds`` times in fresh contexts and their
medians reported: one is too noisy on shared cores. A client polls the
full-cluster query every ``--poll-every`` seconds beside the page, as a
dashboard does (the server keeps what it reads warm); 0 leaves the page alone.

``--baseline DIR`` measures the first render side by side, alternating, with
another build of the page against the same server: DIR holds that build's
``map.js`` and ``map.css`` (``node web/map/build.mjs DIR`` in its checkout)
and, where its documents differ, a ``queries.json`` of the ``queries`` its
server hands the page (``map_config()["queries"]`` there).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
from cluster_bench import FULL_QUERY, pct, serve_process, start_cluster  # noqa: E402

from api.demo.cluster import write_kubeconfig  # noqa: E402
from api.http.cluster_map import MAP_PATH, assets_present  # noqa: E402
from api.http.map_queries import SNAPSHOT_QUERY  # noqa: E402
from api.http.offline_assets import BUILD_COMMAND  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 300_000

# In the page: every GPU of the model changed at once, applied as a tick.
CHANGE_EVERY_GPU = """round => {
    const gpus = [...window.gpugraphMap.model.gpus.values()].map((e) => ({
        ...e.gpu,
        utilizationGpu: (e.gpu.utilizationGpu + 7 * round) % 101,
        temperatureC: 30 + round,
        processes: e.gpu.processes.map((p) => ({
            ...p, usedMemoryBytes: p.usedMemoryBytes + round })),
    }));
    const started = performance.now();
    window.gpugraphMap.applyTick({ data: { gpuUpdates: gpus } });
    const script = performance.now() - started;
    return new Promise((resolve) => requestAnimationFrame(() => setTimeout(() =>
        resolve({ script, frame: performance.now() - started,
                  changed: window.gpugraphMap.stats.lastChanged }))));
}"""

TIMED = """([selector, action]) => {
    const started = performance.now();
    if (action === "click") document.querySelector(selector).click();
    else { const el = document.querySelector(selector); el.value = action;
           el.dispatchEvent(new Event("change")); }
    const script = performance.now() - started;
    return new Promise((resolve) => requestAnimationFrame(() => setTimeout(() =>
        resolve({ script, frame: performance.now() - started }))));
}"""


# Before any script of the page: when the first frame with a tile was painted
# (a task after the frame that found one), when the frame with every tile was
# (a task after the frame in which the page says it rendered), and when the
# side panel's pods list was in the document. Any build of the page.
PAINT_PROBE = """(() => {
    window.__probe = {};
    const tiles = () => {
        if (document.querySelector(".tile")) {
            setTimeout(() => { window.__probe.picture = performance.now(); }, 0);
        } else requestAnimationFrame(tiles);
    };
    requestAnimationFrame(tiles);
    // The document has no <html> element yet when this runs.
    new MutationObserver((_, observer) => {
        if (!document.documentElement?.dataset.rendered) return;
        observer.disconnect();
        setTimeout(() => { window.__probe.painted = performance.now(); }, 0);
    }).observe(document, { attributes: true, attributeFilter: ["data-rendered"], subtree: true });
    const pods = () => {
        if (document.querySelector("#pods li")) window.__probe.pods = performance.now();
        else requestAnimationFrame(pods);
    };
    requestAnimationFrame(pods);
})()"""

FIRST_RENDER = """() => new Promise((resolve) => {
    const done = () => {
        const probe = window.__probe;
        if (probe.painted === undefined || probe.pods === undefined) return setTimeout(done, 20);
        const answer = performance.getEntriesByType("resource")
            .filter((e) => e.name.endsWith("/graphql"))[0];
        const stats = window.gpugraphMap.stats;
        // A build that draws every tile before its first frame has no first picture of its own.
        resolve({ first_picture: stats.firstPictureMs ?? stats.firstRenderMs,
                  first_render: stats.firstRenderMs,
                  page: performance.getEntriesByType("navigation")[0].responseEnd,
                  query_sent: answer.startTime,
                  build: stats.renderMs,
                  query: answer.responseEnd - answer.startTime,
                  answer_bytes: answer.decodedBodySize,
                  picture_painted: probe.picture, painted: probe.painted, pods: probe.pods });
    };
    done();
})"""


# The first picture's query, then the idle allocations and the health events
# answered, and the subscription's first tick applied.
SETTLED = """() => Number(document.documentElement.dataset.ticks || 0) >= 1
    && performance.getEntriesByType("resource")
        .filter((e) => e.name.endsWith("/graphql")).length >= 3"""


def serve(kubeconfig: str, agent_port: int, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    """``gpugraph serve`` in its own process (with ``flags``), once it is ready."""
    server, base = serve_process(kubeconfig, agent_port, *flags)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                return server, base
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not become ready")


class Poller:
    """A dashboard beside the page: the full-cluster query every ``every`` seconds, in a
    thread of its own, as a Grafana panel polls it; with default flags the server keeps
    the nodes it reads warm."""

    def __init__(self, base: str, every: float) -> None:
        self.base = base
        self.every = every
        self.times: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._polled = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)

    def start(self, warm: int) -> None:
        """Start polling; return once ``warm`` polls have been answered."""
        self._thread.start()
        with self._polled:
            self._polled.wait_for(lambda: len(self.times) + self.errors >= warm)

    def stop(self) -> None:
        """Stop after the poll in flight."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=120) as http:
            due = time.monotonic()
            while not self._stop.wait(max(0.0, due - time.monotonic())):
                due = max(due + self.every, time.monotonic())
                started = time.perf_counter()
                try:
                    r = http.post("/graphql", json={"query": FULL_QUERY})
                    ok = r.status_code == 200 and b',"errors":[' not in r.content
                except httpx.HTTPError:
                    ok = False
                took = time.perf_counter() - started
                with self._polled:
                    if ok:
                        self.times.append(took)
                    else:
                        self.errors += 1
                    self._polled.notify_all()


def first_render(browser: Any, base: str, baseline: Path | None) -> dict[str, Any]:
    """One navigation to the map in a fresh context: the first render's figures."""
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    try:
        if baseline is not None:
            _route_baseline(context, base, baseline)
        page = context.new_page()
        page.add_init_script(PAINT_PROBE)
        page.goto(f"{base}{MAP_PATH}", timeout=TIMEOUT_MS)
        page.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
        figures = dict(page.evaluate(FIRST_RENDER))
        # What the page asks for after its first picture (the idle allocations, the
        # health events, the subscription's first tick) is each a fan-out to every
        # agent: answered before the next round, which would otherwise wait behind it.
        page.wait_for_function(SETTLED, timeout=TIMEOUT_MS)
        return figures
    finally:
        context.close()


# For a baseline build: this server's page sends its first query from an inline
# script, which such a build does not pick up (it sends its own from map.js);
# that one is kept from reaching the server.
NO_INLINE_QUERY = """(() => {
    const fetch = window.fetch;
    window.fetch = function (...args) {
        const script = document.currentScript;
        return script && !script.src ? new Promise(() => {}) : fetch.apply(this, args);
    };
})()"""


def _route_baseline(context: Any, base: str, baseline: Path) -> None:
    """Serve ``baseline``'s build of the page's assets, and its documents, in ``context``."""
    context.add_init_script(NO_INLINE_QUERY)
    queries = baseline / "queries.json"
    # The page itself comes from the server: a page fulfilled here would be no
    # longer on loopback to Chromium, which then refuses its socket to the server.
    # Its documents are swapped in by the script, before the bundle reads them.
    swap = ""
    if queries.is_file():
        swap = (
            '(() => { const el = document.getElementById("gpugraph-map-config");'
            " const config = JSON.parse(el.textContent);"
            f" config.queries = {queries.read_text().strip()};"
            " el.textContent = JSON.stringify(config); })();\n"
        )

    def asset(route: Any) -> None:
        name = route.request.url.rsplit("/", 1)[1]
        body = (baseline / name).read_bytes()
        if name.endswith(".js"):
            body = swap.encode() + body
        kind = "text/css" if name.endswith(".css") else "text/javascript"
        route.fulfill(body=body, content_type=kind)

    context.route(f"{base}/static/map/map.*", asset)


def side_by_side(base: str, baseline: Path | None, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """The first render of ``baseline``'s build and of this one, alternating (this one's
    alone without a baseline)."""
    from playwright.sync_api import sync_playwright

    runs: dict[str, list[dict[str, Any]]] = {"this build": []}
    if baseline is not None:
        runs = {"baseline": [], **runs}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu"],
            headless=True,
        )
        try:
            # Each goes first in every other round: the second of a pair may find
            # the agents' snapshots the first one's fan-out just fetched.
            for n in range(rounds):
                order = [(name, baseline if name == "baseline" else None) for name in runs]
                for name, build in order if n % 2 == 0 else order[::-1]:
                    runs[name].append(first_render(browser, base, build))
        finally:
            browser.close()
    return runs


def report_side_by_side(nodes: int, runs: dict[str, list[dict[str, Any]]]) -> None:
    """Medians of the alternating first renders, and this build's ratio to the baseline."""
    rounds = len(runs["this build"])
    alone = "" if "baseline" in runs else " (this build alone)"
    print(f"\n## First render{alone}, {nodes:,} nodes, medians of {rounds}\n")
    print(
        "| build | first picture painted (the nodes in view) | every tile painted "
        "| first picture's frame | every tile's frame | the page's HTML in | ClusterMap sent "
        "| of which the ClusterMap query | of which the first picture's script | pods list in "
        "| query answer |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    med: dict[str, dict[str, float]] = {}
    for name, rows in runs.items():
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        med[name] = m
        print(
            f"| {name} | {m['picture_painted']:.0f} ms | {m['painted']:.0f} ms "
            f"| {m['first_picture']:.0f} ms | {m['first_render']:.0f} ms | {m['page']:.0f} ms "
            f"| {m['query_sent']:.0f} ms | {m['query']:.0f} ms | {m['build']:.0f} ms "
            f"| {m['pods']:.0f} ms | {m['answer_bytes'] / 1e6:.2f} MB |"
        )
    if "baseline" not in med:
        return
    old, new = med["baseline"], med["this build"]
    print(
        "| ratio | "
        + " | ".join(
            f"{new[k] / old[k]:.2f}x"
            for k in (
                "picture_painted",
                "painted",
                "first_picture",
                "first_render",
                "page",
                "query_sent",
                "query",
                "build",
                "pods",
                "answer_bytes",
            )
        )
        + " |"
    )


def measure(base: str, updates: int, baseline: Path | None = None) -> dict[str, Any]:
    """Drive the page (``baseline``'s build of it, if given) in Chromium; the figures."""
    from playwright.sync_api import sync_playwright

    body = httpx.post(f"{base}/graphql", json={"query": SNAPSHOT_QUERY}, timeout=120)
    assert body.status_code == 200 and not body.json().get("errors"), str(
        body.json().get("errors")
    )[:800]
    result: dict[str, Any] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--enable-precise-memory-info"],
            headless=True,
        )
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            if baseline is not None:
                _route_baseline(context, base, baseline)
            page = context.new_page()
            page.goto(f"{base}{MAP_PATH}", timeout=TIMEOUT_MS)
            page.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
            stats = page.evaluate("() => ({ ...window.gpugraphMap.stats })")
            result["first_render"] = stats["firstRenderMs"]
            result["build"] = stats["renderMs"]
            result["query"] = page.evaluate(
                """() => performance.getEntriesByType("resource")
                    .filter((e) => e.name.endsWith("/graphql"))
                    .map((e) => e.responseEnd - e.startTime)[0]"""
            )
            # The answer the page got, to the byte, whichever documents it sent.
            result["snapshot_bytes"] = page.evaluate(
                """() => performance.getEntriesByType("resource")
                    .filter((e) => e.name.endsWith("/graphql"))[0].decodedBodySize"""
            )
            result["tiles"] = page.locator(".tile[data-uuid]").count()
            # A real tick from the server: parsed, compared, nothing redrawn.
            page.wait_for_function(
                "() => Number(document.documentElement.dataset.ticks || 0) >= 2",
                timeout=TIMEOUT_MS,
            )
            stats = page.evaluate("() => ({ ...window.gpugraphMap.stats })")
            result["real_tick"] = stats["lastApplyMs"]
            result["real_changed"] = stats["lastChanged"]
            rounds = [page.evaluate(CHANGE_EVERY_GPU, n) for n in range(1, updates + 1)]
            result["changed"] = rounds[-1]["changed"]
            result["update_script"] = statistics.median(r["script"] for r in rounds)
            result["update_frame"] = statistics.median(r["frame"] for r in rounds)
            pod = page.get_attribute("#pods .pod-link", "data-pod")
            result["highlight"] = page.evaluate(
                TIMED, [f'#pods .pod-link[data-pod="{pod}"]', "click"]
            )
            result["filter"] = page.evaluate(TIMED, ["#f-only", "shared"])
            result["dom"] = page.evaluate("() => document.getElementsByTagName('*').length")
            result["heap"] = page.evaluate("() => performance.memory.usedJSHeapSize")
            result["interval"] = page.evaluate("() => document.getElementById('status').innerText")
        finally:
            browser.close()
    return result


def report(nodes: int, r: dict[str, Any], build: str = "") -> None:
    print(
        f"\n# gpugraph cluster map benchmark — {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, Debian Chromium headless\n"
    )
    print(
        "| nodes | tiles | first render | of which ClusterMap query | of which DOM build | "
        "query answer | real tick (no change) | tick with every GPU changed: script | "
        "to next frame | pod highlight | filter | DOM elements | JS heap |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {nodes:,}{build} | {r['tiles']:,} | {r['first_render']:.0f} ms | {r['query']:.0f} ms | "
        f"{r['build']:.0f} ms | {r['snapshot_bytes'] / 1e6:.2f} MB | {r['real_tick']:.1f} ms "
        f"({r['real_changed']} redrawn) | {r['update_script']:.0f} ms ({r['changed']:,} redrawn) | "
        f"{r['update_frame']:.0f} ms | {r['highlight']['frame']:.0f} ms | "
        f"{r['filter']['frame']:.0f} ms | {r['dom']:,} | {r['heap'] / 1e6:.0f} MB |"
    )
    print(f"\nStatus line at the end: {r['interval']}")


def missing() -> str | None:
    """Why the benchmark cannot run here, if it cannot."""
    if not Path(CHROMIUM).is_file():
        return f"Debian's chromium is not at {CHROMIUM}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed"
    if not assets_present():
        return f"the map's assets are not built (`{BUILD_COMMAND}`)"
    return None


def main() -> int:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=8000)
    parser.add_argument("--updates", type=int, default=5, help="synthetic full ticks to apply")
    parser.add_argument("--small", action="store_true", help="CI size: 10 nodes")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another build of the page to measure the first render against (see above)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="first renders in fresh contexts, their medians reported (alternating with "
        "--baseline's); 0: none",
    )
    parser.add_argument(
        "--serve-flags",
        default="",
        help="flags for the server, e.g. '--snapshot-ttl 5 --snapshot-keep-warm 60'",
    )
    parser.add_argument(
        "--poll-every",
        type=float,
        default=2.0,
        help="a dashboard polling the full-cluster query this often beside the page, from "
        "three polls before the first navigation (0: none, the page reads the nodes alone)",
    )
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.updates = 10, 80, 3
    reason = missing()
    if reason is not None:
        # CI (GPUGRAPH_REQUIRE_ALL=1) has all of them; elsewhere this bench is optional.
        print(f"map_bench: {reason}; nothing measured", file=sys.stderr)
        return 1 if os.environ.get("GPUGRAPH_REQUIRE_ALL") == "1" else 0
    cluster = start_cluster(args.nodes, args.pods)
    tmp = tempfile.mkdtemp(prefix="gpugraph-map-bench-")
    server = None
    poller: Poller | None = None
    try:
        kubeconfig = write_kubeconfig(os.path.join(tmp, "kubeconfig"), cluster.stub.url)
        server, base = serve(kubeconfig, cluster.port, *shlex.split(args.serve_flags))
        if args.poll_every > 0:
            poller = Poller(base, args.poll_every)
            poller.start(warm=3)
        runs = side_by_side(base, args.baseline, args.rounds) if args.rounds else None
        result = measure(base, args.updates)
        before = measure(base, args.updates, args.baseline) if args.baseline else None
    finally:
        if poller is not None:
            poller.stop()
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(args.nodes, result)
    if poller is not None:
        print(
            f"\nBeside the page, a client polled the full-cluster query every "
            f"{args.poll_every:g} s: {len(poller.times)} polls, p50 "
            f"{pct(poller.times or [0.0], 50) * 1000:.0f} ms, {poller.errors} with errors "
            f"(server flags: {args.serve_flags or 'the defaults'})."
        )
    if before is not None:
        report(args.nodes, before, " (baseline)")
    if runs is not None:
        report_side_by_side(args.nodes, runs)
    if result["tiles"] != args.nodes * 8:
        print(f"expected {args.nodes * 8} tiles, the page drew {result['tiles']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
