// The HTML of a node and of its GPU tiles. Built as strings: 8,000 tiles
// go into the document in one assignment, and a tick rewrites only the
// tiles whose values changed.
import { celsius, count, esc, gib, percent } from "./format.js";

function width(bytes, total) {
  return total ? Math.max(0, Math.min(100, (bytes / total) * 100)).toFixed(2) : "0";
}

// The memory bar's parts, in drawing order: pods, then no pod, other
// tenants (hidden from this caller), and what no process holds.
function segmentsOf(info) {
  const parts = info.pods.map((pod) => ({ cls: "pod", pod: pod.key, color: pod.color, bytes: pod.bytes, label: pod.key }));
  if (info.noPodBytes) parts.push({ cls: "nopod", bytes: info.noPodBytes, label: "no pod" });
  if (info.hiddenBytes) parts.push({ cls: "hidden", bytes: info.hiddenBytes, label: "other tenants (hidden)" });
  if (info.otherBytes) parts.push({ cls: "other", bytes: info.otherBytes, label: "driver and unlisted" });
  return parts;
}

function segmentTitle(part) {
  return `${part.label}: ${gib(part.bytes)}`;
}

/** The markers of a GPU, as [class, short text, meaning]. */
export function markers(info) {
  const marks = [];
  if (info.shared) marks.push(["m-shared", "S", "shared by several pods"]);
  if (info.mig) marks.push(["m-mig", "MIG", "MIG enabled"]);
  if (info.unrequested) marks.push(["m-unreq", "!", "used by a pod that did not request a GPU"]);
  if (info.unattributed) marks.push(["m-nopod", "\u2205", "memory held by processes in no pod"]);
  if (info.notAllocated) marks.push(["m-unalloc", "\u2717", "runs a process on a GPU its container was not given"]);
  if (info.allocationUnknown) marks.push(["m-allocunk", "?", "a pod's process on a node with no allocation data"]);
  if (info.idle?.length) {
    const holders = info.idle.map((h) => `${h.key} (${h.use})`).join(", ");
    marks.push(["m-idle", "z", `given to a pod that leaves it idle: ${holders}`]);
  }
  if (info.events) marks.push(["m-event", "\u26a0", `${info.events} health event(s) (XID, ECC, lost) in the last 24 h`]);
  return marks;
}

/** What a screen reader says for a tile. */
export function tileLabel(entry, down) {
  const { gpu, info } = entry;
  const parts = [`GPU ${gpu.index} ${gpu.uuid} on ${entry.node}`];
  if (down) parts.push("agent down, last known values");
  if (gpu.error) parts.push(`error ${gpu.error}`);
  parts.push(`${percent(gpu.utilizationGpu)} utilization`, celsius(gpu.temperatureC));
  parts.push(`${memoryText(info)} used`);
  if (info.pods.length) parts.push(`pods ${info.pods.map((p) => p.key).join(", ")}`);
  for (const [, , meaning] of markers(info)) parts.push(meaning);
  return parts.join("; ");
}

/**
 * What decides a tile's elements (not its numbers): the parts of its bar and
 * its markers. A tile whose shape is unchanged is updated in place.
 */
export function tileShape(entry) {
  // A pod's colour is part of the shape: a recoloured pod redraws the tile.
  const parts = segmentsOf(entry.info).map((part) => (part.pod ? `${part.pod} ${part.color}` : part.cls));
  const marks = markers(entry.info).map(([cls]) => cls);
  return `${parts.join("\n")}|${marks.join()}|${entry.gpu.error ?? ""}`;
}

/** The inside of a GPU tile. */
export function tileInner(entry) {
  const { gpu, info } = entry;
  const total = info.total || info.used || 1;
  const segments = segmentsOf(info)
    .map((part) => {
      const pod = part.pod ? ` data-pod="${esc(part.pod)}"` : "";
      const colour = part.pod ? `;background:${part.color}` : "";
      return `<span class="seg ${part.cls}"${pod} style="width:${width(part.bytes, total)}%${colour}" title="${esc(segmentTitle(part))}"></span>`;
    })
    .join("");
  // A failing GPU says so on its tile, not only in its details.
  const failing = gpu.error ? [["m-err", "ERR", `GPU error: ${gpu.error}`]] : [];
  const marks = [...failing, ...markers(info)]
    .map(([cls, text, meaning]) => `<span class="mark ${cls}" title="${esc(meaning)}">${esc(text)}</span>`)
    .join("");
  return (
    `<div class="t-top"><span class="t-idx">${gpu.index}</span>` +
    `<span class="t-util" title="utilization">${percent(gpu.utilizationGpu)}</span>` +
    `<span class="t-temp" title="temperature">${celsius(gpu.temperatureC)}</span>` +
    `<span class="t-marks">${marks}</span></div>` +
    `<div class="t-bar" title="${esc(memoryText(info))}">${segments}</div>` +
    `<div class="t-util-bar" title="utilization"><span style="width:${gpu.utilizationGpu ?? 0}%"></span></div>` +
    `<div class="t-mem">${tileMemory(info)}</div>`
  );
}

// Short enough for the narrowest tile: "96.2/140.4 GiB".
function tileMemory(info) {
  return `${gib(info.used).replace(" GiB", "")}/${gib(info.total)}`;
}

/** A GPU's memory in use, as tooltips and the details write it. */
export function memoryText(info) {
  return `${gib(info.used)} of ${gib(info.total)}`;
}

/** Update a tile drawn by tileInner, of the same shape, to ``entry``'s numbers. */
export function updateTile(el, entry) {
  const { gpu, info } = entry;
  const total = info.total || info.used || 1;
  const [top, bar, util, memory] = el.children;
  top.children[1].textContent = percent(gpu.utilizationGpu);
  top.children[2].textContent = celsius(gpu.temperatureC);
  bar.title = memoryText(info);
  memory.textContent = tileMemory(info);
  segmentsOf(info).forEach((part, i) => {
    const span = bar.children[i];
    span.style.width = `${width(part.bytes, total)}%`;
    span.title = segmentTitle(part);
  });
  util.firstChild.style.width = `${gpu.utilizationGpu ?? 0}%`;
}

/** A whole tile, its element included. */
function tileHtml(entry, down) {
  return (
    `<div class="tile${down ? " down" : ""}" role="button" tabindex="-1" data-uuid="${esc(entry.uuid)}" ` +
    `aria-label="${esc(tileLabel(entry, down))}" title="${esc(entry.uuid)}">${tileInner(entry)}</div>`
  );
}

/** A tile for a GPU slot of a node whose agent never answered. */
function placeholderHtml(node, index) {
  const label = esc(`GPU slot ${index} on ${node.name}: agent down`);
  return `<div class="tile placeholder down" role="button" tabindex="-1" aria-label="${label}" title="${label}"><div class="t-top"><span class="t-idx">?</span></div><div class="t-bar"></div></div>`;
}

/** The header text of a node. */
export function nodeStatus(node) {
  return node.down ? `agent down: ${node.reason}` : count(node.gpus.length, "GPU");
}

/** A node's section: its name, its state, and its tiles. */
export function nodeHtml(node, gpus) {
  const tiles = node.gpus.map((uuid) => tileHtml(gpus.get(uuid), node.down));
  if (node.down && tiles.length === 0) {
    for (let i = 0; i < node.capacity; i++) tiles.push(placeholderHtml(node, i));
  }
  return (
    `<section class="node${node.down ? " down" : ""}" data-node="${esc(node.name)}" aria-label="node ${esc(node.name)}">` +
    `<h2><span class="n-name">${esc(node.name)}</span>` +
    // Shown while filters are on: what its GPUs hold is not known.
    `<span class="mark m-unknown n-unknown" title="its agent is down: whether it matches the filters is not known">unknown</span>` +
    ` <span class="n-status" title="${esc(nodeStatus(node))}">${esc(nodeStatus(node))}</span></h2>` +
    `<div class="tiles" role="group" aria-label="GPUs of ${esc(node.name)}">${tiles.join("")}</div></section>`
  );
}
