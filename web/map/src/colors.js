// One colour per pod, the same on every load and in every browser: a hue
// from a hash of "namespace/name", so a pod keeps its colour across refreshes.

/** 32-bit FNV-1a of a string. */
function fnv1a(text) {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** The pod's colour, as CSS. */
export function podColor(key) {
  const hash = fnv1a(key);
  const hue = hash % 360;
  // Lightness and saturation steps from other bits keep close hues apart.
  const light = [38, 50, 62][(hash >>> 9) % 3];
  const saturation = [55, 80][(hash >>> 11) % 2];
  return `hsl(${hue} ${saturation}% ${light}%)`;
}
