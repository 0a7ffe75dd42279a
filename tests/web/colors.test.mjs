// Pod colours (web/map/src/colors.js and their use in model.js) under Node's
// test runner: apart where they meet, the same for a pod on every load.
import assert from "node:assert/strict";
import { test } from "node:test";

import { PALETTE, nodeColors, preferredSlot } from "../../web/map/src/colors.js";
import { ClusterModel } from "../../web/map/src/model.js";

const GIB = 1024 ** 3;

// CIE76: the Euclidean distance of two sRGB colours in CIELAB (D65).
function lab(hex) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
  const linear = (c) => (c > 0.04045 ? ((c + 0.055) / 1.055) ** 2.4 : c / 12.92);
  const [R, G, B] = [r, g, b].map(linear);
  const x = (0.4124 * R + 0.3576 * G + 0.1805 * B) / 0.95047;
  const y = 0.2126 * R + 0.7152 * G + 0.0722 * B;
  const z = (0.0193 * R + 0.1192 * G + 0.9505 * B) / 1.08883;
  const f = (t) => (t > 0.008856 ? Math.cbrt(t) : 7.787 * t + 16 / 116);
  return [116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))];
}

function distance(a, b) {
  const [p, q] = [lab(a), lab(b)];
  return Math.hypot(p[0] - q[0], p[1] - q[1], p[2] - q[2]);
}

test("every two palette colours are far apart, and apart from the bar's greys", () => {
  for (let i = 0; i < PALETTE.length; i++) {
    for (let j = i + 1; j < PALETTE.length; j++) {
      assert.ok(distance(PALETTE[i], PALETTE[j]) >= 30, `${PALETTE[i]} ~ ${PALETTE[j]}`);
    }
    // "driver, unlisted" (--other) and the empty bar.
    for (const grey of ["#c3c8cf", "#eef0f3"]) assert.ok(distance(PALETTE[i], grey) >= 20, `${PALETTE[i]} ~ ${grey}`);
  }
});

function pod(namespace, name) {
  return { namespace, name, gpuRequest: 1 };
}

function gpu(uuid, index, pods) {
  const processes = pods.map((owner, i) => ({ pid: 100 + i, usedMemoryBytes: GIB, smUtilization: 10, container: null, pod: owner }));
  return { uuid, index, memoryTotalBytes: 140 * GIB, memoryUsedBytes: pods.length * GIB, processes };
}

function node(name, gpus) {
  return { name, gpuCapacity: gpus.length, gpus };
}

// The demo's pods, as `gpugraph demo` places them.
const chat0 = pod("inference", "chat-api-0");
const chat1 = pod("inference", "chat-api-1");
const workers = [0, 1, 2].map((i) => pod("ml-training", `llm-pretrain-worker-${i}`));
const notebook = pod("research", "notebook-alice");
const DEMO = [
  node("gpu-node-0", [gpu("G0-0", 0, [chat0, chat1]), gpu("G0-1", 1, []), gpu("G0-2", 2, [workers[0]]), gpu("G0-3", 3, [workers[0]])]),
  node("gpu-node-1", [gpu("G1-0", 0, [workers[1]]), gpu("G1-1", 1, [workers[1]]), gpu("G1-2", 2, [workers[1]]), gpu("G1-3", 3, [notebook])]),
  node("gpu-node-2", [0, 1, 2, 3].map((i) => gpu(`G2-${i}`, i, [workers[2]]))),
];

function colorsOf(model, nodeName) {
  const keys = new Set(model.nodes.get(nodeName).gpus.flatMap((uuid) => model.gpus.get(uuid).info.pods.map((p) => p.key)));
  return [...keys].map((key) => model.color(key));
}

test("the pods of one node, and so of one GPU, never share a colour", () => {
  const model = new ClusterModel();
  model.loadSnapshot(DEMO);
  for (const name of model.nodes.keys()) {
    const colors = colorsOf(model, name);
    assert.equal(new Set(colors).size, colors.length, name);
  }
  const shared = model.gpus.get("G0-0").info.pods.map((p) => p.color);
  assert.equal(new Set(shared).size, 2);
  assert.ok(shared.every((c) => PALETTE.includes(c)));
});

test("a pod's colour is the same on every load, whatever the order, and not set by other nodes", () => {
  const first = new ClusterModel();
  first.loadSnapshot(DEMO);
  const again = new ClusterModel();
  again.loadSnapshot([...DEMO].reverse().map((n) => ({ ...n, gpus: [...n.gpus].reverse() })));
  assert.deepEqual(new Map([...again.colors].sort()), new Map([...first.colors].sort()));
  // Alone on its node, a pod has the colour its name asks for.
  assert.equal(first.color("ml-training/llm-pretrain-worker-2"), PALETTE[preferredSlot("ml-training/llm-pretrain-worker-2")]);
});

test("with more pods on a node than colours, the pods sharing a GPU still differ", () => {
  const many = Array.from({ length: 3 * PALETTE.length }, (_, i) => `ns/p-${i}`);
  const gpuPods = [many.slice(0, 4), many.slice(4, 6), ...many.slice(6).map((key) => [key])];
  const colors = nodeColors(gpuPods);
  assert.equal(colors.size, many.length);
  for (const pods of gpuPods) assert.equal(new Set(pods.map((key) => colors.get(key))).size, pods.length);
});

test("a newcomer that takes a neighbour's colour redraws the neighbour's tile", () => {
  const resident = "ml/resident";
  // A pod whose name asks for the same slot and sorts first wins it.
  let rival = null;
  for (let i = 0; rival === null; i++) {
    const key = `ml/a-${i}`;
    if (preferredSlot(key) === preferredSlot(resident)) rival = key;
  }
  const [ns, name] = rival.split("/");
  const model = new ClusterModel();
  model.loadSnapshot([node("n", [gpu("A", 0, [pod("ml", "resident")]), gpu("B", 1, [])])]);
  const before = model.color(resident);
  const tick = model.applyTick([gpu("A", 0, [pod("ml", "resident")]), gpu("B", 1, [pod(ns, name)])], []);
  assert.equal(model.color(rival), before);
  assert.notEqual(model.color(resident), before);
  assert.deepEqual(tick.changed.sort(), ["A", "B"]);
  assert.equal(model.gpus.get("A").info.pods[0].color, model.color(resident));
});
