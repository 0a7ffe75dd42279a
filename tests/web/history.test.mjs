// The map's 24-hour strip (web/map/src/history.js) under Node's test runner.
import assert from "node:assert/strict";
import { test } from "node:test";

import { historyStripHtml, historyUnavailableHtml, stripSegments } from "../../web/map/src/history.js";

const HOUR = 3600_000;
const SINCE = Date.parse("2026-12-02T12:00:00Z");
const UNTIL = SINCE + 24 * HOUR;

function record(pid, start, end, podName = "train", podNamespace = "research") {
  return {
    pid,
    processName: "python",
    podNamespace: podName ? podNamespace : null,
    podName,
    start: new Date(start).toISOString(),
    end: end === null ? null : new Date(end).toISOString(),
  };
}

test("segments sit where the records were, clipped to the strip", () => {
  const segments = stripSegments(
    [record(1, SINCE - HOUR, SINCE + 6 * HOUR), record(2, SINCE + 12 * HOUR, null, null)],
    SINCE,
    UNTIL,
  );
  assert.equal(segments.length, 2);
  assert.equal(segments[0].left, 0);
  assert.equal(segments[0].width, 25);
  assert.equal(segments[0].key, "research/train");
  // Still running: it reaches the right edge.
  assert.equal(segments[1].left, 50);
  assert.equal(segments[1].width, 50);
  assert.equal(segments[1].key, null);
  assert.match(segments[1].title, /python \(no pod\), PID 2, 00:00\u2013now UTC/);
});

test("a one-minute job is still a visible sliver", () => {
  const [segment] = stripSegments([record(3, SINCE + HOUR, SINCE + HOUR + 60_000)], SINCE, UNTIL);
  assert.ok(segment.width >= 0.3);
});

test("the strip names every holder once and escapes what the cluster wrote", () => {
  const html = historyStripHtml(
    [record(1, SINCE, SINCE + HOUR, "<b>x</b>"), record(2, SINCE + 2 * HOUR, null, "<b>x</b>")],
    SINCE,
    UNTIL,
    2,
  );
  assert.equal((html.match(/class="seg"/g) ?? []).length, 2);
  assert.ok(html.includes("research/&lt;b&gt;x&lt;/b&gt;</p>"));
  assert.ok(!html.includes("<b>x</b>"));
  assert.ok(html.includes("2 record(s) of other tenants"));
  assert.ok(historyStripHtml([], SINCE, UNTIL).includes("nobody"));
});

test("holders of the GPU get distinct colours, and one holder keeps one colour", () => {
  const html = historyStripHtml(
    [record(1, SINCE, SINCE + HOUR, "a"), record(2, SINCE + HOUR, SINCE + 2 * HOUR, "b"), record(3, SINCE + 3 * HOUR, null, "a")],
    SINCE,
    UNTIL,
  );
  const colours = [...html.matchAll(/background:(#[0-9a-f]{6})/g)].map((m) => m[1]);
  assert.equal(colours.length, 3);
  assert.notEqual(colours[0], colours[1]);
  assert.equal(colours[0], colours[2]);
});

test("a node that could not answer for its log is said so, not drawn as a day of nobody", () => {
  const off = "history is off on node '<n>'";
  const html = historyUnavailableHtml([
    { message: off, path: ["gpu", "hiddenHistoryCount"] },
    { message: off, path: ["gpu", "history"] },
    { message: "something else", path: ["other"] },
  ]);
  assert.ok(html.includes("history unavailable: history is off on node &#39;&lt;n&gt;&#39;</p>"));
  assert.ok(!html.includes("something else"));
  assert.ok(!html.includes("nobody") && !html.includes("history-strip"));
  assert.ok(historyUnavailableHtml(undefined).includes("the node did not answer"));
});
