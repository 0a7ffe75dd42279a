// The map's GPU health events (web/map/src/events.js, the model's counts, the tile's badge)
// under Node's test runner.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eventsByGpu, eventsHtml } from "../../web/map/src/events.js";
import { ClusterModel } from "../../web/map/src/model.js";
import { markers } from "../../web/map/src/tiles.js";

function edge(uuid, time, extra = {}) {
  return {
    node: {
      time,
      kind: "XID",
      xid: 13,
      description: "Graphics engine exception",
      gpu: { uuid },
      culprit: null,
      processes: [],
      hiddenProcessCount: 0,
      ...extra,
    },
  };
}

test("events are grouped by GPU, newest first", () => {
  const byGpu = eventsByGpu([
    edge("GPU-a", "2026-12-05T10:00:00Z"),
    edge("GPU-b", "2026-12-05T11:00:00Z"),
    edge("GPU-a", "2026-12-05T12:00:00Z"),
    edge("", "2026-12-05T12:00:00Z"),
  ]);
  assert.deepEqual([...byGpu.keys()], ["GPU-a", "GPU-b"]);
  assert.deepEqual(
    byGpu.get("GPU-a").map((e) => e.time),
    ["2026-12-05T12:00:00Z", "2026-12-05T10:00:00Z"],
  );
  assert.equal(eventsByGpu(undefined).size, 0);
});

test("the panel lists each event with the pods on the GPU and the culprit", () => {
  const [event] = eventsByGpu([
    edge("GPU-a", "2026-12-05T10:00:00Z", {
      processes: [
        { pid: 1, podNamespace: "ml", podName: "train" },
        { pid: 2, podNamespace: "ml", podName: "train" },
        { pid: 3, podNamespace: null, podName: null },
      ],
      culprit: { pid: 2, podNamespace: "ml", podName: "train" },
      hiddenProcessCount: 1,
    }),
  ]).get("GPU-a");
  const html = eventsHtml([event]);
  assert.match(html, /2026-12-05 10:00 UTC/);
  assert.match(html, /XID 13: Graphics engine exception/);
  assert.match(html, /on it: ml\/train, PID 3 \(no pod\) and 1 hidden/);
  assert.match(html, /blamed: ml\/train, PID 2/);
  assert.equal(eventsHtml([]), "");
  const lost = eventsHtml([{ ...event, kind: "GPU_LOST", xid: null, description: null }]);
  assert.match(lost, /gpu lost/);
});

test("names are escaped", () => {
  const html = eventsHtml([
    edge("GPU-a", "2026-12-05T10:00:00Z", {
      processes: [{ pid: 1, podNamespace: "ns", podName: "<img src=x>" }],
    }).node,
  ]);
  assert.ok(!html.includes("<img"));
});

test("a GPU with events gets a badge, and loses it when they age out", () => {
  const model = new ClusterModel();
  model.loadSnapshot([
    {
      name: "n1",
      gpus: [
        { uuid: "GPU-a", index: 0, processes: [], memoryUsedBytes: 0, memoryTotalBytes: 1 },
        { uuid: "GPU-b", index: 1, processes: [], memoryUsedBytes: 0, memoryTotalBytes: 1 },
      ],
    },
  ]);
  const badge = (uuid) => markers(model.gpus.get(uuid).info).some(([cls]) => cls === "m-event");
  assert.deepEqual(model.setEventCounts(new Map([["GPU-a", 2]])), ["GPU-a"]);
  assert.ok(badge("GPU-a"));
  assert.ok(!badge("GPU-b"));
  // The same counts again change nothing.
  assert.deepEqual(model.setEventCounts(new Map([["GPU-a", 2]])), []);
  // A tick's update keeps the badge.
  model.update({ uuid: "GPU-a", index: 0, processes: [], memoryUsedBytes: 5, memoryTotalBytes: 1 });
  assert.ok(badge("GPU-a"));
  assert.deepEqual(model.setEventCounts(new Map()), ["GPU-a"]);
  assert.ok(!badge("GPU-a"));
});
