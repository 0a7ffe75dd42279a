// A GPU's last 24 hours as a strip: who held it, and when (from the agents' occupancy logs).
import { nodeColors } from "./colors.js";
import { esc } from "./format.js";

export const STRIP_HOURS = 24;

function ownerKey(record) {
  return record.podName ? `${record.podNamespace}/${record.podName}` : null;
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 16);
}

/**
 * The strip's segments, one per record, as percentages of [since, until]:
 * each {left, width, key, title}; a running process reaches ``until``.
 */
export function stripSegments(records, sinceMs, untilMs) {
  const span = untilMs - sinceMs;
  if (!(span > 0)) return [];
  return records
    .map((record) => {
      const start = Math.max(Date.parse(record.start), sinceMs);
      const end = Math.min(record.end ? Date.parse(record.end) : untilMs, untilMs);
      const key = ownerKey(record);
      const who = key ?? `${record.processName ?? "?"} (no pod)`;
      return {
        left: ((start - sinceMs) / span) * 100,
        // At least a sliver, so a one-minute job stays visible on a day.
        width: Math.max(((end - start) / span) * 100, 0.3),
        key,
        title: `${who}, PID ${record.pid}, ${clock(start)}\u2013${record.end ? clock(end) : "now"} UTC`,
      };
    })
    .filter((s) => s.left < 100 && s.width > 0);
}

/** The strip's HTML, with a legend of who held the GPU; ``hidden`` other tenants' records. */
export function historyStripHtml(records, sinceMs, untilMs, hidden = 0) {
  const segments = stripSegments(records, sinceMs, untilMs);
  // Holders of one GPU get distinct colours, each its preferred one where it can (as on the map).
  const colors = nodeColors([segments.map((s) => s.key).filter((key) => key !== null)]);
  const bars = segments
    .map(
      (s) =>
        `<span class="seg${s.key ? "" : " nopod"}" style="left:${s.left.toFixed(2)}%;width:${s.width.toFixed(2)}%${s.key ? `;background:${colors.get(s.key)}` : ""}" title="${esc(s.title)}"></span>`,
    )
    .join("");
  const owners = [...new Set(segments.map((s) => s.key ?? "(no pod)"))];
  const legend = owners.length ? `<p class="history-legend">${owners.map(esc).join(", ")}</p>` : '<p class="history-legend">nobody</p>';
  const note = hidden ? `<p class="hidden-note">${hidden} record(s) of other tenants are not shown to you.</p>` : "";
  return `<h3>Last ${STRIP_HOURS} h</h3><div class="history-strip" role="img" aria-label="who held this GPU in the last ${STRIP_HOURS} hours">${bars}</div>${legend}${note}`;
}

/**
 * The strip's place where the GPU's node could not answer for its log (``history`` null):
 * the reasons the answer's errors give for that field, each once.
 */
export function historyUnavailableHtml(errors) {
  const ours = (errors ?? []).filter((e) => !e.path || e.path.at(-1) === "history");
  const reason = [...new Set(ours.map((e) => e.message))].join("; ") || "the node did not answer";
  return `<h3>Last ${STRIP_HOURS} h</h3><p class="history-legend">history unavailable: ${esc(reason)}</p>`;
}
