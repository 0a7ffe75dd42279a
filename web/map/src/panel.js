// The side panel: one GPU's processes, and the list of pods to highlight.
import { celsius, count, esc, gib, percent } from "./format.js";
import { markers, memoryText } from "./tiles.js";
import { podKey } from "./model.js";

function graphiqlLink(config, uuid) {
  if (!config.graphiqlPath) return "";
  const hash = new URLSearchParams({
    query: config.queries.gpu,
    variables: JSON.stringify({ uuid }, null, 2),
  });
  return `<a class="graphiql" href="${esc(`${config.graphiqlPath}#${hash}`)}" target="_blank" rel="noopener">Open this GPU's query in GraphiQL</a>`;
}

// ``color`` is one of the palette's (colors.js); ``after`` is HTML, written by the caller.
function podButton(pod, color, selected, after = "") {
  const key = podKey(pod);
  return `<button type="button" class="pod-link" data-pod="${esc(key)}" aria-pressed="${key === selected}"><span class="swatch" style="background:${color}"></span><span>${esc(pod.namespace)}/<wbr>${esc(pod.name)}</span>${after}</button>`;
}

/** The details of one GPU: its numbers, markers and processes. */
export function detailsHtml(entry, node, config, selectedPod, pinned) {
  const { gpu, info } = entry;
  const colors = new Map(info.pods.map((pod) => [pod.key, pod.color]));
  const rows = [...(gpu.processes ?? [])]
    .sort((a, b) => (b.usedMemoryBytes ?? 0) - (a.usedMemoryBytes ?? 0))
    .map(
      (p) =>
        // The container goes under its pod, so the pod's name has the width to itself.
        `<tr><td>${p.pid}</td><td>${p.pod ? podButton(p.pod, colors.get(podKey(p.pod)), selectedPod) : '<span class="nopod-text">no pod</span>'}` +
        `<span class="ctr">${esc(p.container?.name ?? "\u2013")}</span></td><td>${gib(p.usedMemoryBytes)}</td><td>${percent(p.smUtilization)}</td></tr>`,
    )
    .join("");
  // Before its first tick a GPU holds what its tile draws; its processes are on their way.
  const body =
    entry.detailSig === null
      ? '<tr><td colspan="4">loading processes\u2026</td></tr>'
      : rows || '<tr><td colspan="4">no processes</td></tr>';
  const hidden = gpu.hiddenProcessCount
    ? `<p class="hidden-note">${gpu.hiddenProcessCount} process(es) of other tenants, ${gib(gpu.hiddenMemoryBytes)}, are not shown to you.</p>`
    : "";
  const marks = markers(info)
    .map(([cls, text, meaning]) => `<li><span class="mark ${cls}">${esc(text)}</span> ${esc(meaning)}</li>`)
    .join("");
  const idle = idleHtml(info.idle ?? []);
  return (
    `<h2>${pinned ? "Selected: " : ""}GPU ${gpu.index} on ${esc(entry.node)}</h2>` +
    (node?.down ? `<p class="down-note">Agent down: ${esc(node.reason)}. Last known values.</p>` : "") +
    `<p class="uuid">${esc(gpu.uuid)}</p>` +
    `<p>${esc(gpu.name ?? "")} &middot; ${percent(gpu.utilizationGpu)} &middot; ${celsius(gpu.temperatureC)} &middot; ${memoryText(info)}</p>` +
    (gpu.error ? `<p class="down-note">GPU error: ${esc(gpu.error)}</p>` : "") +
    (marks ? `<ul class="marks">${marks}</ul>` : "") +
    idle +
    `<table class="procs"><thead><tr><th>PID</th><th>Pod, container</th><th>Memory</th><th>SM</th></tr></thead>` +
    `<tbody>${body}</tbody></table>${hidden}` +
    graphiqlLink(config, gpu.uuid)
  );
}

/** Since when each pod holding the GPU has left it idle. */
function idleHtml(holders) {
  if (!holders.length) return "";
  const items = holders
    .map((h) => {
      const since = h.since ? `since ${esc(h.since.slice(0, 16).replace("T", " "))} UTC ` : "";
      const how = h.use === "UNUSED" ? "no process on it" : "its processes idle";
      return `<li>${esc(h.key)}: ${how} ${since}(${duration(h.seconds)})</li>`;
    })
    .join("");
  return `<p class="idle-note">Allocated and idle (IDLE or UNUSED):</p><ul class="idle-list">${items}</ul>`;
}

/** "45 min", "2 h 5 min". */
function duration(seconds) {
  const minutes = Math.floor(seconds / 60);
  return minutes < 60 ? `${minutes} min` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** The pods list, each a toggle that highlights the pod's GPUs. */
export function podsHtml(pods, selectedPod) {
  const items = [...pods.values()]
    .sort((a, b) => a.key.localeCompare(b.key))
    .map((pod) => {
      const where = count(pod.gpus.length, "GPU") + (pod.nodes.size > 1 ? ` on ${pod.nodes.size} nodes` : "");
      const flag = pod.gpuRequest ? "" : ' <span class="mark m-unreq" title="no GPU request">!</span>';
      return `<li data-ns="${esc(pod.namespace)}" data-pod="${esc(pod.key)}">${podButton(pod, pod.color, selectedPod, ` <span class="count">${where}</span>${flag}`)}</li>`;
    });
  return items.join("");
}
