// A GPU's health events of the last 24 hours (XID and ECC errors, a lost GPU), from the
// agents' logs: a badge on its tile and a list in its panel, with the pods that were on it.
import { esc } from "./format.js";

export const EVENT_HOURS = 24;

/** The events of a gpuEvents answer's edges by GPU UUID, newest first. */
export function eventsByGpu(edges) {
  const byGpu = new Map();
  for (const { node: event } of edges ?? []) {
    const uuid = event.gpu?.uuid;
    if (!uuid) continue;
    if (!byGpu.has(uuid)) byGpu.set(uuid, []);
    byGpu.get(uuid).push(event);
  }
  for (const events of byGpu.values()) events.sort((a, b) => Date.parse(b.time) - Date.parse(a.time));
  return byGpu;
}

function what(event) {
  const name = event.kind === "XID" ? `XID ${event.xid}` : event.kind.replaceAll("_", " ").toLowerCase();
  return event.description ? `${name}: ${event.description}` : name;
}

function who(process) {
  return process.podName ? `${process.podNamespace}/${process.podName}` : `PID ${process.pid} (no pod)`;
}

/** The panel's list of a GPU's events, each with the pods on it then and the culprit. */
export function eventsHtml(events) {
  if (!events?.length) return "";
  const items = events
    .map((event) => {
      const pods = [...new Set((event.processes ?? []).map(who))];
      const hidden = event.hiddenProcessCount ? ` and ${event.hiddenProcessCount} hidden` : "";
      const culprit = event.culprit ? `<br>blamed: ${esc(who(event.culprit))}, PID ${event.culprit.pid}` : "";
      return (
        `<li><span class="ev-time">${esc(new Date(event.time).toISOString().slice(0, 16).replace("T", " "))} UTC</span> ` +
        `${esc(what(event))}<br>on it: ${esc(pods.join(", ") || "nobody")}${esc(hidden)}${culprit}</li>`
      );
    })
    .join("");
  return `<h3>Events, last ${EVENT_HOURS} h</h3><ul class="events">${items}</ul>`;
}
