// Pod colours: distinct between the pods of one node (and so of one GPU),
// and the same for a pod on every load and in every browser.
//
// Each pod prefers a palette slot picked by a hash of "namespace/name". The
// pods of a node take their preferred slots in name order; a pod whose slot
// is taken gets the next free one. A pod keeps its colour unless a pod with
// the same preference (and an earlier name) comes to its node. With more pods
// on a node than colours, only the pods sharing a GPU are kept apart.

// Tableau 10 without its grey (the grey is the "driver, unlisted" part of a
// bar): every two colours differ by a CIE76 distance of at least 30.
export const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];

/** 32-bit FNV-1a of a string. */
function fnv1a(text) {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** The palette slot a pod asks for, before its node's other pods are seen. */
export function preferredSlot(key) {
  return fnv1a(key) % PALETTE.length;
}

/**
 * The colours of one node's pods. ``gpuPods`` holds, per GPU of the node, the
 * keys of the pods on it. Returns a Map from pod key to CSS colour.
 */
export function nodeColors(gpuPods) {
  const keys = [...new Set(gpuPods.flat())].sort();
  const wholeNode = keys.length <= PALETTE.length;
  const sharing = new Map(keys.map((key) => [key, new Set()]));
  if (!wholeNode) {
    for (const pods of gpuPods) for (const a of pods) for (const b of pods) if (a !== b) sharing.get(a).add(b);
  }
  const slots = new Map();
  for (const key of keys) {
    const taken = new Set();
    for (const [other, slot] of slots) if (wholeNode || sharing.get(key).has(other)) taken.add(slot);
    let slot = preferredSlot(key);
    for (let tries = 0; tries < PALETTE.length && taken.has(slot); tries++) slot = (slot + 1) % PALETTE.length;
    slots.set(key, slot);
  }
  return new Map([...slots].map(([key, slot]) => [key, PALETTE[slot]]));
}
