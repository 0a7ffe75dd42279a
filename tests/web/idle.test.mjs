// Idle allocations on the map (web/map/src/model.js, tiles.js): a GPU given to a pod that
// leaves it idle gets its own marker, and says who holds it, in what way and since when.
// The page asks idleGpuAllocations apart from the ticks (api/http/map_queries.py's IDLE_QUERY).
import assert from "node:assert/strict";
import { test } from "node:test";

import { describeGpu, idleHolders, idleOf, setIdleAllocations } from "../../web/map/src/model.js";
import { markers } from "../../web/map/src/tiles.js";

function gpu(uuid = "GPU-a", processes = []) {
  return {
    uuid,
    index: 0,
    memoryTotalBytes: 100,
    memoryUsedBytes: 10,
    utilizationGpu: 0,
    migEnabled: false,
    hiddenProcessCount: 0,
    hiddenMemoryBytes: 0,
    processes,
  };
}

function given(namespace, name, use, idleSince = null, idleSeconds = 0, gpuUuid = "GPU-a") {
  return { gpuUuid, use, idleSince, idleSeconds, pod: { namespace, name } };
}

test("IDLE and UNUSED allocations are the GPU's idle holders, longest idle first", () => {
  const holders = idleHolders([
      given("ml", "busy", "ACTIVE"),
      given("ml", "idle", "IDLE", "2026-12-05T18:00:00+00:00", 2700),
      given("research", "notebook", "UNUSED", "2026-12-05T17:00:00+00:00", 7200),
      given("ml", "blind", "UNKNOWN"),
      // Another tenant's allocation reaches the page without its pod: not listed.
      { use: "UNUSED", idleSince: "2026-12-05T16:00:00+00:00", idleSeconds: 9000, pod: null },
  ]);
  assert.deepEqual(
    holders.map((h) => [h.key, h.use, h.seconds]),
    [
      ["research/notebook", "UNUSED", 7200],
      ["ml/idle", "IDLE", 2700],
    ],
  );
  assert.equal(holders[0].since, "2026-12-05T17:00:00+00:00");
});

test("each tile reads its GPU's idle holders from the last answer, ticks or not", () => {
  const changed = setIdleAllocations([
    given("research", "notebook", "UNUSED", "2026-12-05T17:00:00+00:00", 7200),
    given("ml", "idle", "IDLE", "2026-12-05T18:00:00+00:00", 2700, "GPU-b"),
  ]);
  assert.deepEqual(changed.sort(), ["GPU-a", "GPU-b"]);
  // A tick's GPU carries no allocations: its description still has the holder, and a marker.
  const marks = markers(describeGpu(gpu("GPU-a")));
  const found = marks.find(([cls]) => cls === "m-idle");
  assert.ok(found, JSON.stringify(marks));
  assert.match(found[2], /research\/notebook \(UNUSED\)/);
  assert.deepEqual(idleOf("GPU-b").map((h) => h.key), ["ml/idle"]);
  assert.equal(markers(describeGpu(gpu("GPU-c"))).some(([cls]) => cls === "m-idle"), false);
  // The same answer again changes nothing; a holder gone is a change, and its marker goes.
  assert.deepEqual(
    setIdleAllocations([
      given("research", "notebook", "UNUSED", "2026-12-05T17:00:00+00:00", 7260),
      given("ml", "idle", "IDLE", "2026-12-05T18:00:00+00:00", 2760, "GPU-b"),
    ]),
    [],
  );
  assert.deepEqual(setIdleAllocations([given("ml", "idle", "IDLE", "2026-12-05T18:00:00+00:00", 2820, "GPU-b")]), ["GPU-a"]);
  assert.equal(markers(describeGpu(gpu("GPU-a"))).some(([cls]) => cls === "m-idle"), false);
  setIdleAllocations([]);
});
