// Text the page shows for numbers, and HTML escaping for names.

const GIB = 1024 ** 3;

/** Bytes as GiB with one decimal ("54.1 GiB"); "?" when unknown. */
export function gib(bytes) {
  return bytes == null ? "?" : `${(bytes / GIB).toFixed(1)} GiB`;
}

/** A percentage, or "?" when unknown. */
export function percent(value) {
  return value == null ? "?" : `${value}%`;
}

/** A temperature, or "?" when unknown. */
export function celsius(value) {
  return value == null ? "?" : `${value}\u00b0C`;
}

/** Seconds ago, short ("3 s ago", "2 min ago"). */
export function ago(seconds) {
  if (seconds < 90) return `${Math.max(0, Math.round(seconds))} s ago`;
  return `${Math.round(seconds / 60)} min ago`;
}

/** "1 GPU", "3 GPUs". */
export function count(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

const SPECIAL = /[&<>"']/;
const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text made safe for HTML content and attribute values. */
export function esc(text) {
  const value = String(text);
  // Most names hold none of them: no new string for those.
  return SPECIAL.test(value) ? value.replace(/[&<>"']/g, (c) => ENTITIES[c]) : value;
}
