// The cluster as the map knows it: nodes, their GPUs, and what each tile
// draws, derived from the GraphQL answers. No DOM here.
import { nodeColors } from "./colors.js";

/** A pod's key and name on the page: "namespace/name". */
export function podKey(pod) {
  return `${pod.namespace}/${pod.name}`;
}

/** What a tile draws about one GPU, derived from its GraphQL object. */
export function describeGpu(gpu) {
  const pods = new Map();
  let noPodBytes = 0;
  let listed = 0;
  for (const process of gpu.processes ?? []) {
    const bytes = process.usedMemoryBytes ?? 0;
    listed += bytes;
    if (!process.pod) {
      noPodBytes += bytes;
      continue;
    }
    const key = podKey(process.pod);
    let pod = pods.get(key);
    if (!pod) {
      pod = { key, ...process.pod, bytes: 0 };
      pods.set(key, pod);
    }
    pod.bytes += bytes;
  }
  const hiddenBytes = gpu.hiddenMemoryBytes ?? 0;
  const used = gpu.memoryUsedBytes ?? listed + hiddenBytes;
  const list = [...pods.values()].sort((a, b) => a.key.localeCompare(b.key));
  return {
    pods: list,
    noPodBytes,
    hiddenBytes,
    // Held by the driver, CUDA contexts, or processes NVML did not list.
    otherBytes: Math.max(0, used - listed - hiddenBytes),
    used,
    total: gpu.memoryTotalBytes,
    // Another tenant's hidden process counts as a second user.
    shared: list.length + (gpu.hiddenProcessCount > 0 ? 1 : 0) >= 2,
    unattributed: noPodBytes > 0,
    unrequested: list.some((pod) => !pod.gpuRequest),
    // The kubelet gave this GPU to none of the containers running a process on it.
    notAllocated: (gpu.processes ?? []).some((p) => p.allocation === "NOT_ALLOCATED"),
    // A pod's process on a node without allocation data (only the spec rule speaks).
    allocationUnknown: (gpu.processes ?? []).some((p) => p.pod && p.allocation === "UNKNOWN"),
    mig: Boolean(gpu.migEnabled),
    // Pods holding it (or a MIG device, a replica of it) without using it, longest idle first.
    idle: idleByGpu.get(gpu.uuid) ?? idleHolders(gpu.allocations ?? []),
  };
}

// The uses of an allocation its holder leaves idle (GraphQL's GpuAllocation.use).
const IDLE_USES = new Set(["IDLE", "UNUSED"]);
// Each GPU's idle holders from the last idleGpuAllocations answer: the ticks do not carry
// allocations, so every tile's description reads them from here.
let idleByGpu = new Map();

/** The allocations that the agent judges IDLE or UNUSED, longest idle first. */
export function idleHolders(allocations) {
  return allocations
    .filter((a) => a.pod && IDLE_USES.has(a.use))
    .map((a) => ({ key: podKey(a.pod), use: a.use, since: a.idleSince, seconds: a.idleSeconds ?? 0 }))
    .sort((a, b) => b.seconds - a.seconds || a.key.localeCompare(b.key));
}

/** The idle holders of the GPU ``uuid`` in the last idleGpuAllocations answer. */
export function idleOf(uuid) {
  return idleByGpu.get(uuid) ?? [];
}

/** Take an idleGpuAllocations answer; the UUIDs of the GPUs whose idle holders changed. */
export function setIdleAllocations(allocations) {
  const byGpu = new Map();
  for (const a of allocations) {
    if (!a.gpuUuid) continue;
    const list = byGpu.get(a.gpuUuid) ?? [];
    list.push(a);
    byGpu.set(a.gpuUuid, list);
  }
  const next = new Map([...byGpu].map(([uuid, list]) => [uuid, idleHolders(list)]));
  const shown = (holders) => (holders ?? []).map((h) => `${h.key}:${h.use}:${h.since}`).join(",");
  const changed = [...new Set([...idleByGpu.keys(), ...next.keys()])].filter(
    (uuid) => shown(idleByGpu.get(uuid)) !== shown(next.get(uuid)),
  );
  idleByGpu = next;
  return changed;
}

// Every value a tile, the pods list and the filters draw (describeGpu's
// inputs), so a GPU whose picture is unchanged is not redrawn.
function tileSignature(gpu) {
  const processes = (gpu.processes ?? [])
    .map((p) => `${p.usedMemoryBytes}:${p.pod ? `${podKey(p.pod)}:${p.pod.gpuRequest}` : ""}:${p.allocation ?? ""}`)
    .join(",");
  return [
    gpu.memoryUsedBytes,
    gpu.memoryTotalBytes,
    gpu.utilizationGpu,
    gpu.temperatureC,
    gpu.migEnabled,
    gpu.error,
    gpu.hiddenMemoryBytes,
    gpu.hiddenProcessCount,
    processes,
  ].join("|");
}

// What the details draw besides: so they follow a tick that changed only those.
function detailSignature(gpu) {
  const processes = (gpu.processes ?? []).map((p) => `${p.pid}:${p.smUtilization}:${p.container?.name ?? ""}`);
  return `${gpu.name}|${processes.join(",")}`;
}

// "agent on node 'gpu-node-3' unreachable at ...: ..." names its node in quotes.
function errorFor(errors, node) {
  const quoted = `'${node}'`;
  const error = errors.find((e) => String(e.message).includes(quoted));
  return error ? downReason(node, String(error.message)) : null;
}

/**
 * Why a node is down, without the words naming it: "agent on node 'x' " (and
 * "unavailable: "), or "on node 'x'" of a failed sampling, as ``gpugraph top``
 * words it. The page already names the node and says its agent is down.
 */
export function downReason(node, message) {
  const sampling = `GPU sampling failed on node '${node}': `;
  if (message.startsWith(sampling)) return `GPU sampling failed: ${message.slice(sampling.length)}`;
  const prefix = `agent on node '${node}' `;
  if (!message.startsWith(prefix)) return message;
  const rest = message.slice(prefix.length);
  return rest.startsWith("unavailable: ") ? rest.slice("unavailable: ".length) : rest;
}

export class ClusterModel {
  constructor() {
    /** name -> { name, capacity, down, reason, gpus: [uuid] } */
    this.nodes = new Map();
    /** uuid -> { uuid, node, gpu, info, tileSig, detailSig } */
    this.gpus = new Map();
    /** pod key -> CSS colour, distinct within each node (colors.js) */
    this.colors = new Map();
  }

  /** The colour of a pod's key ("" for a pod the map does not know). */
  color(key) {
    return this.colors.get(key) ?? "";
  }

  // Colour the pods of ``names``' nodes; every pod entry of their GPUs gets
  // its ``color``. Returns the GPUs whose pods changed colour.
  _colorNodes(names) {
    const recolored = [];
    for (const name of names) {
      const node = this.nodes.get(name);
      if (!node) continue;
      const entries = node.gpus.map((uuid) => this.gpus.get(uuid)).filter(Boolean);
      const colors = nodeColors(entries.map((entry) => entry.info.pods.map((pod) => pod.key)));
      for (const [key, color] of colors) this.colors.set(key, color);
      for (const entry of entries) {
        let changed = false;
        for (const pod of entry.info.pods) {
          const color = colors.get(pod.key);
          if (pod.color !== undefined && pod.color !== color) changed = true;
          pod.color = color;
        }
        if (changed) recolored.push(entry.uuid);
      }
    }
    return recolored;
  }

  /**
   * Replace everything with a ClusterMap query's answer: its nodes, and its
   * errors, which say why a node's GPUs are null (its agent down or failing).
   */
  loadSnapshot(nodes, errors = []) {
    const previousNodes = this.nodes;
    const previousGpus = this.gpus;
    this.nodes = new Map();
    this.gpus = new Map();
    for (const node of nodes) {
      const down = node.gpus == null;
      const entry = {
        name: node.name,
        capacity: node.gpuCapacity ?? 0,
        down,
        reason: down ? errorFor(errors, node.name) || "its agent did not answer" : null,
        gpus: [],
      };
      if (node.gpus) {
        for (const gpu of [...node.gpus].sort((a, b) => a.index - b.index)) {
          this._put(gpu, node.name);
          entry.gpus.push(gpu.uuid);
        }
      } else {
        // What it last showed stays, greyed, while its agent is down.
        for (const uuid of previousNodes.get(node.name)?.gpus ?? []) {
          const last = previousGpus.get(uuid);
          if (last) {
            this.gpus.set(uuid, last);
            entry.gpus.push(uuid);
          }
        }
      }
      this.nodes.set(node.name, entry);
    }
    this.colors = new Map();
    this._colorNodes(this.nodes.keys());
  }

  _put(gpu, node) {
    // The signatures are worked out at the first tick, not on the first render's path.
    // A ClusterMap answer holds what the tiles draw; the details come with
    // the ticks (or GPU_DETAILS_QUERY): ``detailSig`` stays null until then.
    const entry = { uuid: gpu.uuid, node, gpu, info: this._describe(gpu), tileSig: null, detailSig: null };
    this.gpus.set(gpu.uuid, entry);
    return entry;
  }

  /**
   * Take a GPU's full fields (a tick's, or its details'). Returns "tile" when
   * its tile changed, "details" when only its details did, or null.
   */
  // A GPU's tile as describeGpu draws it, with its count of recent health events.
  _describe(gpu) {
    const info = describeGpu(gpu);
    info.events = this.eventCounts?.get(gpu.uuid) ?? 0;
    return info;
  }

  /** Take each GPU's count of recent health events; the UUIDs whose count changed. */
  setEventCounts(counts) {
    const before = this.eventCounts ?? new Map();
    this.eventCounts = counts;
    const changed = [];
    for (const uuid of new Set([...before.keys(), ...counts.keys()])) {
      const entry = this.gpus.get(uuid);
      if (!entry || (before.get(uuid) ?? 0) === (counts.get(uuid) ?? 0)) continue;
      // In place: the info keeps the pods' colours the model gave them.
      entry.info.events = counts.get(uuid) ?? 0;
      changed.push(uuid);
    }
    return changed;
  }

  update(gpu) {
    const known = this.gpus.get(gpu.uuid);
    if (!known) return null;
    const tileSig = tileSignature(gpu);
    const detailSig = detailSignature(gpu);
    known.tileSig ??= tileSignature(known.gpu);
    if (tileSig === known.tileSig && detailSig === known.detailSig) return null;
    known.gpu = gpu;
    known.detailSig = detailSig;
    if (tileSig === known.tileSig) return "details";
    known.info = this._describe(gpu);
    known.tileSig = tileSig;
    return "tile";
  }

  /**
   * Apply one gpuUpdates tick. Returns the GPUs whose tile changed, those
   * whose details alone changed, the nodes that went down or came back, and
   * whether GPUs appeared that the map does not know (a new node, or one
   * whose agent is back).
   */
  applyTick(gpus, errors) {
    const changed = [];
    const detailed = [];
    const nodesChanged = [];
    let unknown = false;
    const seen = new Set();
    for (const gpu of gpus) {
      seen.add(gpu.uuid);
      if (!this.gpus.has(gpu.uuid)) {
        unknown = true;
        continue;
      }
      const what = this.update(gpu);
      if (what === "tile") changed.push(gpu.uuid);
      else if (what === "details") detailed.push(gpu.uuid);
    }
    // A GPU drawn anew may change its node's colours, and so its neighbours' tiles.
    const touched = new Set(changed.map((uuid) => this.gpus.get(uuid).node));
    for (const uuid of this._colorNodes(touched)) if (!changed.includes(uuid)) changed.push(uuid);
    for (const node of this.nodes.values()) {
      const answered = node.gpus.some((uuid) => seen.has(uuid));
      const reason = errorFor(errors, node.name);
      if (node.down && answered) {
        node.down = false;
        node.reason = null;
        nodesChanged.push(node.name);
      } else if (!node.down && node.gpus.length > 0 && !answered) {
        node.down = true;
        node.reason = reason || "its GPUs were missing from the last update";
        nodesChanged.push(node.name);
      } else if (node.down && reason && reason !== node.reason) {
        node.reason = reason;
        nodesChanged.push(node.name);
      }
    }
    return { changed, detailed, nodesChanged, unknown };
  }

  /** Every pod on a GPU: key -> { key, namespace, name, gpuRequest, color, gpus: [uuid], nodes: Set }. */
  pods() {
    const pods = new Map();
    for (const entry of this.gpus.values()) {
      for (const pod of entry.info.pods) {
        let item = pods.get(pod.key);
        if (!item) {
          item = {
            key: pod.key,
            namespace: pod.namespace,
            name: pod.name,
            gpuRequest: pod.gpuRequest,
            color: pod.color,
            gpus: [],
            nodes: new Set(),
          };
          pods.set(pod.key, item);
        }
        item.gpus.push(entry.uuid);
        item.nodes.add(entry.node);
      }
    }
    return pods;
  }
}
