// The map's model (web/map/src/model.js) under Node's test runner: what a
// tile draws, and how ticks mark nodes down and up again.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ClusterModel, describeGpu, downReason } from "../../web/map/src/model.js";

const GIB = 1024 ** 3;

function pod(namespace, name, gpuRequest = 1) {
  return { uid: `${namespace}-${name}`, namespace, name, gpuRequest };
}

function gpu(uuid, index, processes, extra = {}) {
  const listed = processes.reduce((sum, p) => sum + p.usedMemoryBytes, 0);
  return {
    uuid,
    index,
    name: "NVIDIA H200",
    memoryTotalBytes: 140 * GIB,
    memoryUsedBytes: listed + GIB,
    utilizationGpu: 50,
    temperatureC: 60,
    migEnabled: false,
    error: null,
    hiddenProcessCount: 0,
    hiddenMemoryBytes: 0,
    processes,
    ...extra,
  };
}

function proc(pid, bytes, owner) {
  return { pid, usedMemoryBytes: bytes, smUtilization: 10, container: owner ? { name: "main" } : null, pod: owner };
}

test("a GPU's memory splits into its pods, no pod, hidden and the rest", () => {
  const info = describeGpu(
    gpu("GPU-a", 0, [proc(1, 10 * GIB, pod("ml", "b")), proc(2, 5 * GIB, pod("ml", "a")), proc(3, 2 * GIB, pod("ml", "b")), proc(4, 3 * GIB, null)], {
      hiddenProcessCount: 1,
      hiddenMemoryBytes: 4 * GIB,
      memoryUsedBytes: 25 * GIB,
    }),
  );
  assert.deepEqual(
    info.pods.map((p) => [p.key, p.bytes]),
    [
      ["ml/a", 5 * GIB],
      ["ml/b", 12 * GIB],
    ],
  );
  assert.equal(info.noPodBytes, 3 * GIB);
  assert.equal(info.hiddenBytes, 4 * GIB);
  assert.equal(info.otherBytes, 25 * GIB - 20 * GIB - 4 * GIB);
  assert.equal(info.shared, true);
  assert.equal(info.unattributed, true);
  assert.equal(info.unrequested, false);
});

test("one pod with another tenant's hidden process is shared; no request is unrequested", () => {
  const info = describeGpu(gpu("GPU-a", 0, [proc(1, GIB, pod("research", "nb", null))], { hiddenProcessCount: 2 }));
  assert.equal(info.shared, true);
  assert.equal(info.unrequested, true);
  assert.equal(info.unattributed, false);
  assert.equal(describeGpu(gpu("GPU-b", 0, [proc(1, GIB, pod("a", "b"))])).shared, false);
});

function cluster() {
  const model = new ClusterModel();
  model.loadSnapshot(
    [
      { name: "n1", gpuCapacity: 2, gpus: [gpu("GPU-1b", 1, []), gpu("GPU-1a", 0, [])] },
      { name: "n2", gpuCapacity: 1, gpus: [gpu("GPU-2a", 0, [])] },
      { name: "n3", gpuCapacity: 4, gpus: null },
    ],
    [{ message: "agent on node 'n3' unavailable: refused", path: ["nodes", 2, "gpus"] }],
  );
  return model;
}

test("a snapshot orders each node's GPUs by index and keeps down nodes with their reason", () => {
  const model = cluster();
  assert.deepEqual(model.nodes.get("n1").gpus, ["GPU-1a", "GPU-1b"]);
  assert.equal(model.nodes.get("n3").down, true);
  // The page names the node and says "agent down" itself: the reason is the rest.
  assert.equal(model.nodes.get("n3").reason, "refused");
  assert.equal(model.gpus.size, 3);
});

test("a tick redraws only what changed", () => {
  const model = cluster();
  const same = [gpu("GPU-1a", 0, []), gpu("GPU-1b", 1, []), gpu("GPU-2a", 0, [])];
  // The first tick brings the details the first picture left out: no tile is redrawn for them.
  assert.deepEqual(model.applyTick(same, []), {
    changed: [],
    detailed: ["GPU-1a", "GPU-1b", "GPU-2a"],
    nodesChanged: [],
    unknown: false,
  });
  assert.deepEqual(model.applyTick(same, []), { changed: [], detailed: [], nodesChanged: [], unknown: false });
  const hotter = [gpu("GPU-1a", 0, [], { temperatureC: 90 }), gpu("GPU-1b", 1, []), gpu("GPU-2a", 0, [])];
  assert.deepEqual(model.applyTick(hotter, []).changed, ["GPU-1a"]);
  assert.equal(model.gpus.get("GPU-1a").gpu.temperatureC, 90);
});

test("a node missing from a tick goes down with its error, keeps its tiles, and comes back", () => {
  const model = cluster();
  const error = { message: "agent on node 'n2' unavailable: deadline exceeded" };
  const tick = model.applyTick([gpu("GPU-1a", 0, []), gpu("GPU-1b", 1, [])], [error]);
  assert.deepEqual(tick.nodesChanged, ["n2"]);
  assert.equal(model.nodes.get("n2").down, true);
  assert.equal(model.nodes.get("n2").reason, "deadline exceeded");
  assert.ok(model.gpus.has("GPU-2a"));
  // A later snapshot that still finds it down keeps its last known GPUs, greyed.
  model.loadSnapshot([{ name: "n2", gpuCapacity: 1, gpus: null }], [error]);
  assert.deepEqual(model.nodes.get("n2").gpus, ["GPU-2a"]);
  const back = model.applyTick([gpu("GPU-2a", 0, [])], []);
  assert.deepEqual(back.nodesChanged, ["n2"]);
  assert.equal(model.nodes.get("n2").down, false);
});

test("a down node's reason drops the words naming the node, in either of the server's forms", () => {
  const unreachable = "agent on node 'n2' unreachable at 10.0.0.2:50051: UNAVAILABLE: refused";
  assert.equal(downReason("n2", unreachable), "unreachable at 10.0.0.2:50051: UNAVAILABLE: refused");
  assert.equal(downReason("n2", "agent on node 'n2' unavailable: bad token"), "bad token");
  // Another node's message, or one of another shape, is kept whole.
  assert.equal(downReason("n1", unreachable), unreachable);
  // An agent that answers but cannot sample its GPUs, as `gpugraph top` words it.
  const sampling = "GPU sampling failed on node 'n2': NVML_ERROR_DRIVER_NOT_LOADED";
  assert.equal(downReason("n2", sampling), "GPU sampling failed: NVML_ERROR_DRIVER_NOT_LOADED");
  assert.equal(downReason("n1", sampling), sampling);
});

test("a node whose GPUs are null is down, with no error the reason is that its agent did not answer", () => {
  const model = new ClusterModel();
  model.loadSnapshot([{ name: "n1", gpuCapacity: 2, gpus: null }]);
  assert.equal(model.nodes.get("n1").down, true);
  assert.equal(model.nodes.get("n1").reason, "its agent did not answer");
});

test("GPUs the map does not know ask for a new snapshot", () => {
  const model = cluster();
  const tick = model.applyTick([gpu("GPU-1a", 0, []), gpu("GPU-1b", 1, []), gpu("GPU-2a", 0, []), gpu("GPU-3a", 0, [])], []);
  assert.equal(tick.unknown, true);
});

test("pods list every GPU and node they touch", () => {
  const model = new ClusterModel();
  const worker = pod("ml", "w");
  model.loadSnapshot([
    { name: "n1", gpus: [gpu("GPU-1a", 0, [proc(1, GIB, worker)]), gpu("GPU-1b", 1, [proc(2, GIB, worker)])] },
    { name: "n2", gpus: [gpu("GPU-2a", 0, [proc(3, GIB, worker)])] },
  ]);
  const item = model.pods().get("ml/w");
  assert.deepEqual(item.gpus.sort(), ["GPU-1a", "GPU-1b", "GPU-2a"]);
  assert.deepEqual([...item.nodes].sort(), ["n1", "n2"]);
});
