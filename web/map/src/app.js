// The map's controller: loads the cluster, follows the subscription, and
// keeps the DOM (tiles, filters, selection, details, status) in step.
import { AuthRequired, answer, query, subscribe, token } from "./api.js";
import { ago, count, esc } from "./format.js";
import { ClusterModel, idleOf, setIdleAllocations } from "./model.js";
import { detailsHtml, podsHtml } from "./panel.js";
import { EVENT_HOURS, eventsByGpu, eventsHtml } from "./events.js";
import { STRIP_HOURS, historyStripHtml, historyUnavailableHtml } from "./history.js";
import { nodeHtml, nodeStatus, tileInner, tileLabel, tileShape, updateTile } from "./tiles.js";

const SKELETON = `
<header class="top">
  <h1>gpugraph <span>GPU map</span></h1>
  <form id="filters" class="filters" aria-label="Filters">
    <label>Namespace <select id="f-ns"><option value="">all</option></select></label>
    <label>Node <input id="f-node" type="search" placeholder="name contains" autocomplete="off"></label>
    <label>Show <select id="f-only">
      <option value="">all GPUs</option>
      <option value="shared">only shared</option>
      <option value="unattributed">only unattributed</option>
      <option value="unrequested">only unrequested</option>
    </select></label>
  </form>
  <div id="status" class="status" role="status" aria-live="polite">connecting</div>
  <span id="viewer" class="viewer" hidden>Signed in as <b id="viewer-name"></b></span>
  <button type="button" id="sign-out" class="sign-out" hidden>Sign out</button>
  <a id="graphiql-link" href="/graphql">GraphiQL</a>
</header>
<div id="banner" class="banner" role="alert" hidden></div>
<main class="layout">
  <div class="board">
    <p id="empty" class="empty" role="status" hidden><span id="empty-text"></span>
      <button type="button" id="clear-filters">Clear filters</button></p>
    <div id="nodes" class="nodes" role="region" aria-label="GPUs by node"></div>
  </div>
  <aside class="side">
    <section id="details" class="details" aria-live="polite"></section>
    <section class="pods-box">
      <h2>Pods <span id="pod-selected"></span></h2>
      <ul id="pods" class="pods" aria-label="Pods; select one to highlight its GPUs"></ul>
      <p id="pods-empty" class="empty-pods" hidden>Nothing matches.</p>
    </section>
    <section class="legend" aria-label="Legend">
      <span><span class="seg-sample nopod"></span>no pod</span>
      <span><span class="seg-sample hidden"></span>other tenants</span>
      <span><span class="seg-sample other"></span>driver, unlisted</span>
      <span><span class="mark m-shared">S</span>shared</span>
      <span><span class="mark m-mig">MIG</span>MIG</span>
      <span><span class="mark m-unreq">!</span>unrequested</span>
      <span><span class="mark m-nopod">\u2205</span>unattributed</span>
      <span><span class="mark m-unalloc">\u2717</span>not allocated</span>
      <span><span class="mark m-allocunk">?</span>no allocation data</span>
      <span><span class="mark m-idle">z</span>allocated, idle</span>
      <span><span class="mark m-err">ERR</span>GPU error</span>
      <span><span class="util-sample"></span>utilization</span>
    </section>
  </aside>
</main>
<div id="auth" class="auth" hidden>
  <form id="auth-form" class="auth-form" aria-labelledby="auth-title">
    <h2 id="auth-title">This server checks who you are</h2>
    <p>Paste a Kubernetes bearer token, e.g. from <code>kubectl create token NAME</code>.
    The map shows what that identity may see. It is kept in this tab only (sessionStorage).</p>
    <p id="auth-error" class="auth-error" role="alert"></p>
    <label>Bearer token <input id="auth-token" type="password" autocomplete="off" required></label>
    <button type="submit">Show the map</button>
  </form>
</div>`;

const HINT =
  '<p class="hint">Hover or select a GPU for its processes. Arrow keys move between GPUs, Enter pins one, Escape clears. Click a pod to highlight its GPUs on every node.</p>';
// The cheapest query there is: does the server accept the token?
const TOKEN_CHECK = "query TokenCheck { __typename }";
// The first picture draws this many nodes at a time until the board is full;
// the rest follow this many per frame.
const FILL_NODES = 2;
const SLICE_NODES = 100;
// A new ClusterMap query (a node joined, an agent came back) at most this often.
const RESYNC_SPACING_MS = 10_000;
// The view a URL shares: query parameter -> filter field.
const FILTER_PARAMS = { ns: "f-ns", node: "f-node", only: "f-only" };

/** What the filters ask for, from the form or a URL. */
function filterValues(read) {
  return { ns: read("ns") || "", node: (read("node") || "").trim(), only: read("only") || "" };
}

export class MapApp {
  constructor(root, config) {
    this.config = config;
    this.model = new ClusterModel();
    this.selectedPod = null;
    this.pinned = null;
    this.hovered = null;
    this.tiles = new Map();
    this.shapes = new Map();
    this.podKeys = "";
    this.connection = "connecting";
    this.lastTick = null;
    this.stopLive = null;
    this.generation = 0;
    // The GPUs the filters leave on show (null: not worked out yet).
    this.shownTiles = null;
    this.resyncAt = 0;
    this.resyncTimer = null;
    this.pictures = 0;
    this.stats = { firstPictureMs: null, firstRenderMs: null, renderMs: null, ticks: 0, lastApplyMs: null, lastFrameMs: null, lastChanged: 0 };
    root.innerHTML = SKELETON;
    this.$ = (id) => root.querySelector(`#${id}`);
    this.nodesEl = this.$("nodes");
    if (!config.graphiqlPath) this.$("graphiql-link").hidden = true;
    this._readUrl();
    this._bind();
    this.$("details").innerHTML = HINT;
    setInterval(() => this._renderStatus(), 1000);
    // The allocations left idle: a fan-out of its own, once a minute.
    setInterval(() => this._loadIdle(), 60_000);
    // The GPUs' health events of the last day: a fan-out to the agents' logs, once a minute.
    setInterval(() => this._loadEvents(), 60_000);
  }

  get interval() {
    // Large clusters tick slower: one tick of 8,000 GPUs is megabytes.
    return Math.min(10, Math.max(this.config.intervalSeconds, this.model.nodes.size / 200));
  }

  // ---------------------------------------------------------------- data

  async load() {
    // The page's HTML sent the first one (boot.js); every later load asks anew.
    const first = window.gpugraphMapFirstAnswer;
    window.gpugraphMapFirstAnswer = undefined;
    let body;
    try {
      body = await (first ? answer(first) : query(this.config.graphqlPath, this.config.queries.snapshot, "ClusterMap"));
    } catch (error) {
      if (error instanceof AuthRequired) return this._askToken(error.message);
      this._banner(`Cannot load the cluster: ${error.message}. Retrying.`);
      setTimeout(() => this.load(), 3000);
      return;
    }
    this._banner(null);
    const started = performance.now();
    const previousSize = this.model.nodes.size;
    this.model.loadSnapshot(body.data.nodes, body.errors ?? []);
    this.lastTick = Date.now();
    const everyTile = this._renderAll();
    this.stats.renderMs = performance.now() - started;
    if (this.stats.firstRenderMs === null) {
      // The first picture: the nodes in view, painted...
      requestAnimationFrame(() => {
        this.stats.firstPictureMs ??= performance.now();
      });
      // ...and the frame with every tile.
      everyTile.then(() =>
        requestAnimationFrame(() => {
          this.stats.firstRenderMs ??= performance.now();
          document.documentElement.dataset.rendered = "true";
        }),
      );
    }
    this._renderViewer(body.data.viewer?.username ?? null);
    this._loadIdle();
    this._loadEvents();
    if (!this.stopLive || this.model.nodes.size !== previousSize) this._subscribe();
  }

  // Each GPU's events of the last day: a badge on its tile, a list in its panel.
  _loadEvents() {
    const eventsQuery = this.config.queries.events;
    if (!eventsQuery || this.loadingEvents) return;
    this.loadingEvents = true;
    const since = new Date(Date.now() - EVENT_HOURS * 3600_000).toISOString();
    query(this.config.graphqlPath, eventsQuery, "MapGpuEvents", { since })
      .then((body) => {
        this.events = eventsByGpu(body.data?.gpuEvents?.edges);
        const counts = new Map([...this.events].map(([uuid, events]) => [uuid, events.length]));
        for (const uuid of this.model.setEventCounts(counts)) this._redrawTile(uuid);
        this._renderDetails();
      })
      // A node whose log cannot answer leaves its GPUs unbadged; the map goes on.
      .catch(() => {})
      .finally(() => {
        this.loadingEvents = false;
      });
  }

  // The GPUs given to pods that leave them idle: a marker on the tile, since when in the panel.
  _loadIdle() {
    const idleQuery = this.config.queries.idle;
    if (!idleQuery || this.loadingIdle) return;
    this.loadingIdle = true;
    query(this.config.graphqlPath, idleQuery, "MapIdle", {})
      .then((body) => {
        for (const uuid of setIdleAllocations(body.data?.idleGpuAllocations ?? [])) {
          const entry = this.model.gpus.get(uuid);
          if (!entry) continue;
          // In place: the info keeps the pods' colours the model gave them.
          entry.info.idle = idleOf(uuid);
          this._redrawTile(uuid);
        }
        this._renderDetails();
      })
      // A node whose agent cannot answer leaves its GPUs unmarked; the map goes on.
      .catch(() => {})
      .finally(() => {
        this.loadingIdle = false;
      });
  }

  _subscribe() {
    this._stopSubscription();
    // Events of a socket already let go of are ignored.
    const generation = this.generation;
    const current = (fn) => (arg) => {
      if (generation === this.generation) fn(arg);
    };
    this.stopLive = subscribe(
      this.config.graphqlPath,
      this.config.queries.live,
      { interval: this.interval },
      {
        onResult: current((result) => this.applyTick(result)),
        onState: current((state) => {
          const back = state === "live" && this.connection === "closed";
          this.connection = state;
          this._renderStatus();
          if (back) this._resync();
        }),
        onAuth: current(() => this._socketRefused()),
        onError: current((error) => this._restart(`The live updates stopped: ${describe(error)}`)),
        // The server ended it (e.g. it could not re-check the token): start over.
        onEnd: current(() => this._restart("The server ended the live updates")),
      },
    );
  }

  // The socket says only "refused" (4403), both for a bad token and while the
  // Kubernetes API server cannot check one; a query tells the two apart, so a
  // passing outage keeps the token instead of asking for another.
  async _socketRefused() {
    this._stopSubscription();
    try {
      await query(this.config.graphqlPath, TOKEN_CHECK, "TokenCheck");
    } catch (error) {
      if (error instanceof AuthRequired) {
        this._askToken(`the server no longer accepts this token (${error.message})`);
        return;
      }
      this._restart(`The live updates were refused: ${error.message}`);
      return;
    }
    this._restart("The live updates were refused, though the token passes");
  }

  _restart(message) {
    this._banner(`${message}. Restarting.`);
    this._stopSubscription();
    this.connection = "closed";
    this._renderStatus();
    setTimeout(() => this._subscribe(), 5000);
  }

  _stopSubscription() {
    this.generation += 1;
    if (this.stopLive) this.stopLive();
    this.stopLive = null;
  }

  /** Apply one subscription result (a tick) to the model and the DOM. */
  applyTick(result) {
    // A tick without data (the whole operation failed) says nothing about the
    // nodes: reading it as "no GPU answered" would grey out every node.
    if (!result.data?.gpuUpdates) {
      this._banner(`The last update failed: ${describe(result.errors ?? [])}`);
      return;
    }
    this._banner(null);
    const started = performance.now();
    const gpus = result.data.gpuUpdates;
    const { changed, detailed, nodesChanged, unknown } = this.model.applyTick(gpus, result.errors ?? []);
    this.lastTick = Date.now();
    for (const name of nodesChanged) this._redrawNode(name);
    for (const uuid of changed) this._redrawTile(uuid);
    if (changed.length || nodesChanged.length) {
      this._renderPods();
      // Without a filter every tile shows already.
      if (this._filtering() || nodesChanged.length) this._applyFilters();
      this._renderDetails();
    } else if (detailed.includes(this.pinned ?? this.hovered)) {
      this._renderDetails();
    }
    if (unknown) this._resync();
    this.stats.ticks += 1;
    this.stats.lastChanged = changed.length;
    this.stats.lastApplyMs = performance.now() - started;
    requestAnimationFrame(() => {
      this.stats.lastFrameMs = performance.now() - started;
      document.documentElement.dataset.ticks = String(this.stats.ticks);
    });
    this._renderStatus();
  }

  // A node joined or an agent came back: one query, at most every few seconds.
  _resync() {
    if (this.resyncTimer) return;
    const wait = Math.max(0, this.resyncAt - Date.now());
    this.resyncTimer = setTimeout(() => {
      this.resyncTimer = null;
      this.resyncAt = Date.now() + RESYNC_SPACING_MS;
      this.load();
    }, wait);
  }

  // ---------------------------------------------------------------- auth

  _askToken(message) {
    this._stopSubscription();
    this.connection = "token needed";
    this._renderStatus();
    const hadToken = Boolean(token.get());
    token.set("");
    this.$("auth-error").textContent = hadToken ? `The server refused that token: ${message}` : "";
    this.$("auth").hidden = false;
    this.$("auth-token").value = "";
    this.$("auth-token").focus();
    this._renderViewer(null);
  }

  // Who the server says the caller is; with no name (auth off) nothing to sign out of.
  _renderViewer(username) {
    this.$("viewer").hidden = !username;
    this.$("viewer-name").textContent = username ?? "";
    this.$("sign-out").hidden = !username && !token.get();
  }

  // Forget the token and everything it showed, and ask for one again.
  _signOut() {
    this._stopSubscription();
    token.set("");
    this.model.loadSnapshot([]);
    this.lastTick = null;
    this.pinned = null;
    this.hovered = null;
    this._renderAll();
    this._renderViewer(null);
    this._askToken("");
  }

  // ---------------------------------------------------------------- drawing

  // The nodes in view are drawn and painted first, the rest in slices after
  // each frame: 8,000 tiles are 180,000 elements, and the first picture need
  // not wait for those below the fold. With filters on, all at once: a part
  // of the cluster could say "nothing matches" too early. Resolves once every
  // tile is in the document (never, for a picture a newer one replaced).
  _renderAll() {
    const { nodes, gpus } = this.model;
    const focused = this.nodesEl.contains(document.activeElement) ? document.activeElement.dataset.uuid : null;
    const picture = ++this.pictures;
    const order = [...nodes.values()];
    this.nodesEl.innerHTML = "";
    this.tiles = new Map();
    this.shapes = new Map();
    if (this.selectedPod && !this.model.pods().has(this.selectedPod)) this.selectedPod = null;
    this.nodesEl.classList.toggle("highlighting", Boolean(this.selectedPod));
    let drawn = 0;
    const draw = (count) => {
      const sections = this.nodesEl.children.length;
      const html = order.slice(drawn, drawn + count).map((node) => nodeHtml(node, gpus));
      this.nodesEl.insertAdjacentHTML("beforeend", html.join(""));
      drawn = Math.min(order.length, drawn + count);
      for (let i = sections; i < this.nodesEl.children.length; i++) {
        this._registerTiles(this.nodesEl.children[i], focused);
      }
      // Filters set while the slices come apply to each of them.
      if (this._filtering()) this._applyFilters();
    };
    if (this._filtering()) {
      draw(order.length);
    } else {
      this.shownTiles = null;
      this.$("empty").hidden = true;
      const board = this.nodesEl.parentElement;
      // A few nodes at a time until the board's visible height is full.
      while (drawn < order.length && this.nodesEl.offsetHeight <= board.clientHeight) draw(FILL_NODES);
    }
    const first = this.nodesEl.querySelector(".tile:not([hidden])");
    if (first && !this.nodesEl.querySelector('.tile[tabindex="0"]')) first.tabIndex = 0;
    this._renderDetails();
    this._renderStatus();
    return new Promise((resolve) => {
      const rest = () => {
        if (picture !== this.pictures) return;
        if (drawn < order.length) {
          draw(SLICE_NODES);
          this._afterPaint(rest);
          return;
        }
        // The pods list (one button per pod, thousands on a large cluster)
        // is drawn anew, even when empty, after the tiles.
        this.podKeys = null;
        this._afterPaint(() => this._renderPods());
        resolve();
      };
      if (drawn < order.length) this._afterPaint(rest);
      else rest();
    });
  }

  // A section just drawn: its tiles in the index, with the selection, the pin and the focus.
  _registerTiles(section, focused) {
    for (const el of section.getElementsByClassName("tile")) {
      const uuid = el.getAttribute("data-uuid");
      if (!uuid) continue;
      const entry = this.model.gpus.get(uuid);
      this.tiles.set(uuid, el);
      this.shapes.set(uuid, tileShape(entry));
      if (this.selectedPod) this._highlightTile(el, entry);
      if (uuid === this.pinned) el.classList.add("pinned");
      if (uuid === focused) this._focus(el);
    }
  }

  // Run ``fn`` once the frame being prepared has been painted.
  _afterPaint(fn) {
    requestAnimationFrame(() => setTimeout(fn, 0));
  }

  _redrawTile(uuid) {
    const el = this.tiles.get(uuid);
    const entry = this.model.gpus.get(uuid);
    if (!el || !entry) return;
    const down = this.model.nodes.get(entry.node)?.down;
    // New numbers in the same elements, unless pods or markers changed.
    const shape = tileShape(entry);
    if (shape === this.shapes.get(uuid)) {
      updateTile(el, entry);
    } else {
      el.innerHTML = tileInner(entry);
      this.shapes.set(uuid, shape);
    }
    el.setAttribute("aria-label", tileLabel(entry, down));
    this._highlightTile(el, entry);
  }

  _redrawNode(name) {
    const node = this.model.nodes.get(name);
    const section = this.nodesEl.querySelector(`section[data-node="${CSS.escape(name)}"]`);
    if (!node || !section) return;
    section.classList.toggle("down", node.down);
    const status = section.querySelector(".n-status");
    status.textContent = nodeStatus(node);
    status.title = nodeStatus(node);
    for (const uuid of node.gpus) {
      const el = this.tiles.get(uuid);
      if (!el) continue;
      el.classList.toggle("down", node.down);
      el.setAttribute("aria-label", tileLabel(this.model.gpus.get(uuid), node.down));
    }
  }

  _renderNamespaces(pods) {
    const select = this.$("f-ns");
    // The chosen one stays offered without pods there (a shared link, a pod gone):
    // the map then says nothing matches, rather than quietly showing everything.
    const current = this.wantedNamespace ?? select.value;
    this.wantedNamespace = null;
    const namespaces = [...new Set([...pods.values()].map((p) => p.namespace))];
    if (current && !namespaces.includes(current)) namespaces.push(current);
    namespaces.sort();
    select.innerHTML =
      '<option value="">all</option>' + namespaces.map((ns) => `<option>${esc(ns)}</option>`).join("");
    select.value = current;
  }

  _renderPods() {
    const pods = this.model.pods();
    const keys = [...pods.keys()].sort().join("\n") + [...pods.values()].map((p) => p.gpus.length).join();
    if (keys === this.podKeys) return;
    this.podKeys = keys;
    // A tick can bring a pod of a namespace the filter does not offer yet.
    this._renderNamespaces(pods);
    if (this.selectedPod && !pods.has(this.selectedPod)) this.selectedPod = null;
    this.$("pods").innerHTML = podsHtml(pods, this.selectedPod);
    this._filterPods(pods);
    this._renderSelection(pods);
  }

  _renderSelection(pods = null) {
    const pod = this.selectedPod ? (pods ?? this.model.pods()).get(this.selectedPod) : null;
    this.$("pod-selected").textContent = pod
      ? `\u2013 ${pod.key}: ${count(pod.gpus.length, "GPU")} on ${[...pod.nodes].sort().join(", ")}`
      : "";
  }

  _renderDetails() {
    const uuid = this.pinned ?? this.hovered;
    const entry = uuid ? this.model.gpus.get(uuid) : null;
    const details = this.$("details");
    if (!entry) {
      details.innerHTML = HINT;
      return;
    }
    const node = this.model.nodes.get(entry.node);
    details.innerHTML = detailsHtml(entry, node, this.config, this.selectedPod, uuid === this.pinned);
    details.insertAdjacentHTML("beforeend", eventsHtml(this.events?.get(uuid)));
    this._renderHistory(details, uuid);
    if (entry.detailSig === null) this._fetchDetails(uuid);
  }

  // The first picture holds what the tiles draw; a GPU's processes (PIDs, SM,
  // containers) come with the ticks, or are asked for here when its details
  // are opened before the first tick.
  _fetchDetails(uuid) {
    this.fetchingDetails ??= new Set();
    if (!this.config.queries.details || this.fetchingDetails.has(uuid)) return;
    this.fetchingDetails.add(uuid);
    const shown = () => (this.pinned ?? this.hovered) === uuid;
    query(this.config.graphqlPath, this.config.queries.details, "MapGpuDetails", { uuid })
      .then((body) => {
        const gpu = body.data?.gpu;
        const what = gpu ? this.model.update(gpu) : null;
        if (what === "tile") {
          this._redrawTile(uuid);
          this._renderPods();
          if (this._filtering()) this._applyFilters();
        }
        if (shown()) this._renderDetails();
      })
      .catch((error) => {
        const rows = shown() ? this.$("details").querySelector(".procs tbody") : null;
        if (rows) rows.innerHTML = `<tr><td colspan="4">processes: ${esc(describe(error))}</td></tr>`;
      })
      .finally(() => this.fetchingDetails.delete(uuid));
  }

  // The GPU's last 24 hours under its details, fetched at most once a minute per GPU.
  _renderHistory(details, uuid) {
    const historyQuery = this.config.queries.history;
    if (!historyQuery) return;
    const box = document.createElement("div");
    box.className = "history";
    box.dataset.uuid = uuid;
    details.appendChild(box);
    this.histories ??= new Map();
    const cached = this.histories.get(uuid);
    const now = Date.now();
    if (cached && now - cached.at < 60_000) {
      box.innerHTML = cached.html;
      return;
    }
    const since = now - STRIP_HOURS * 3600_000;
    const variables = { uuid, since: new Date(since).toISOString() };
    query(this.config.graphqlPath, historyQuery, "GpuHistory", variables)
      .then((body) => {
        const gpu = body.data?.gpu;
        let html = "";
        if (gpu && gpu.history === null) {
          // Its node's agent or log did not answer: said, not drawn as an empty day.
          html = historyUnavailableHtml(body.errors);
        } else if (gpu) {
          html = historyStripHtml(gpu.history, since, now, gpu.hiddenHistoryCount ?? 0);
        }
        this.histories.set(uuid, { at: now, html });
        const shown = details.querySelector(`.history[data-uuid="${CSS.escape(uuid)}"]`);
        if (shown) shown.innerHTML = html;
      })
      .catch((error) => {
        const shown = details.querySelector(`.history[data-uuid="${CSS.escape(uuid)}"]`);
        if (shown) shown.textContent = `history: ${describe(error)}`;
      });
  }

  _renderStatus() {
    const nodes = [...this.model.nodes.values()];
    const up = nodes.filter((n) => !n.down).length;
    const age = this.lastTick ? (Date.now() - this.lastTick) / 1000 : null;
    const late = age !== null && age > Math.max(3 * this.interval, this.interval + 5);
    const stale = this.connection === "closed" || (this.connection === "live" && late);
    const state = this.connection === "live" ? (stale ? "stale" : "live") : this.connection === "closed" ? "reconnecting" : this.connection;
    const parts = [state];
    if (age !== null) parts.push(`updated ${ago(age)}`);
    parts.push(`${up}/${nodes.length} nodes up`, count(this.model.gpus.size, "GPU"));
    const status = this.$("status");
    status.textContent = parts.join(" \u00b7 ");
    status.dataset.state = state;
    this.nodesEl.classList.toggle("stale", stale && this.lastTick !== null);
  }

  _banner(message) {
    const banner = this.$("banner");
    banner.hidden = !message;
    banner.textContent = message ?? "";
  }

  // ---------------------------------------------------------------- highlight and filters

  _highlightTile(el, entry) {
    const key = this.selectedPod;
    el.classList.toggle("hl", Boolean(key && entry.info.pods.some((p) => p.key === key)));
    if (!key) return;
    for (const seg of el.querySelectorAll(".seg.pod")) seg.classList.toggle("hl", seg.dataset.pod === key);
  }

  _applyHighlight() {
    this.nodesEl.classList.toggle("highlighting", Boolean(this.selectedPod));
    for (const [uuid, el] of this.tiles) {
      const entry = this.model.gpus.get(uuid);
      if (entry) this._highlightTile(el, entry);
    }
    for (const button of document.querySelectorAll(".pod-link")) {
      button.setAttribute("aria-pressed", String(button.dataset.pod === this.selectedPod));
    }
    this._renderSelection();
  }

  selectPod(key) {
    this.selectedPod = this.selectedPod === key ? null : key;
    this._applyHighlight();
    this._writeUrl();
  }

  _filters() {
    return filterValues((name) => this.$(FILTER_PARAMS[name]).value);
  }

  _filtering() {
    const { ns, node, only } = this._filters();
    return Boolean(ns || node || only);
  }

  // ---------------------------------------------------------------- the URL

  // The filters, the pinned GPU and the selected pod, from a shared link.
  _readUrl() {
    const params = new URLSearchParams(window.location.search);
    const wanted = filterValues((name) => params.get(name));
    this.$("f-node").value = wanted.node;
    const only = this.$("f-only");
    if ([...only.options].some((o) => o.value === wanted.only)) only.value = wanted.only;
    // Offered with the others once the pods are known; chosen (and filtering) from the start.
    this.wantedNamespace = wanted.ns || null;
    if (wanted.ns) {
      const ns = this.$("f-ns");
      ns.insertAdjacentHTML("beforeend", `<option>${esc(wanted.ns)}</option>`);
      ns.value = wanted.ns;
    }
    this.pinned = params.get("gpu") || null;
    this.selectedPod = params.get("pod") || null;
  }

  // The view as a URL to share; replaced, not pushed: Back leaves the map.
  _writeUrl() {
    const params = new URLSearchParams();
    const values = this._filters();
    for (const name of Object.keys(FILTER_PARAMS)) if (values[name]) params.set(name, values[name]);
    if (this.pinned) params.set("gpu", this.pinned);
    if (this.selectedPod) params.set("pod", this.selectedPod);
    const search = params.toString();
    const url = `${window.location.pathname}${search ? `?${search}` : ""}${window.location.hash}`;
    if (url !== `${window.location.pathname}${window.location.search}${window.location.hash}`) {
      window.history.replaceState(null, "", url);
    }
  }

  _applyFilters() {
    const { ns, node: text, only } = this._filters();
    const needle = text.toLowerCase();
    // A node whose agent is down could match ns or only, or not: it stays, marked.
    const byContent = Boolean(ns || only);
    const shown = new Set();
    let unknown = 0;
    for (const section of this.nodesEl.children) {
      const name = section.dataset.node;
      const nameMatches = !needle || name.toLowerCase().includes(needle);
      const down = Boolean(this.model.nodes.get(name)?.down);
      const undecided = nameMatches && byContent && down;
      let visible = 0;
      for (const el of section.getElementsByClassName("tile")) {
        const entry = el.dataset.uuid ? this.model.gpus.get(el.dataset.uuid) : null;
        let show = nameMatches && !undecided;
        if (show && byContent) show = Boolean(entry) && matches(entry, ns, only);
        el.hidden = !show;
        if (show) {
          visible += 1;
          if (entry) shown.add(entry.uuid);
        }
      }
      section.classList.toggle("unknown", undecided);
      if (undecided) unknown += 1;
      section.hidden = !undecided && (!nameMatches || (byContent && visible === 0));
    }
    this.shownTiles = shown;
    this._renderEmpty(shown.size, unknown);
    this._filterPods();
  }

  _renderEmpty(matched, unknown) {
    const empty = matched === 0 && this._filtering() && this.model.nodes.size > 0;
    this.$("empty").hidden = !empty;
    if (!empty) return;
    const down =
      unknown === 0 ? "" : unknown === 1 ? " One node's agent is down: it cannot be checked." : ` ${unknown} nodes' agents are down: they cannot be checked.`;
    this.$("empty-text").textContent = `Nothing matches these filters.${down}`;
  }

  // The pods of the GPUs on show, of the namespace asked for.
  _filterPods(pods = this.model.pods()) {
    const { ns } = this._filters();
    const shown = this.shownTiles;
    let visible = 0;
    for (const li of this.$("pods").children) {
      const pod = pods.get(li.dataset.pod);
      const onShow = shown === null || Boolean(pod?.gpus.some((uuid) => shown.has(uuid)));
      li.hidden = !onShow || (Boolean(ns) && li.dataset.ns !== ns);
      if (!li.hidden) visible += 1;
    }
    this.$("pods-empty").hidden = visible > 0 || pods.size === 0;
  }

  // ---------------------------------------------------------------- input

  _bind() {
    for (const id of ["f-ns", "f-only"]) this.$(id).addEventListener("change", () => this._applyFilters());
    this.$("f-node").addEventListener("input", () => this._applyFilters());
    for (const id of Object.values(FILTER_PARAMS)) {
      this.$(id).addEventListener(id === "f-node" ? "input" : "change", () => this._writeUrl());
    }
    this.$("clear-filters").addEventListener("click", () => {
      for (const id of Object.values(FILTER_PARAMS)) this.$(id).value = "";
      this._applyFilters();
      this._writeUrl();
    });
    // Enter in the node field would submit the form: a navigation the CSP refuses.
    this.$("filters").addEventListener("submit", (event) => event.preventDefault());
    this.nodesEl.addEventListener("mouseover", (event) => {
      const tile = event.target.closest?.(".tile");
      const uuid = tile?.dataset.uuid ?? null;
      if (uuid && uuid !== this.hovered) {
        this.hovered = uuid;
        if (!this.pinned) this._renderDetails();
      }
    });
    this.nodesEl.addEventListener("click", (event) => {
      const seg = event.target.closest?.(".seg.pod");
      if (seg) {
        this.selectPod(seg.dataset.pod);
        return;
      }
      const tile = event.target.closest?.(".tile");
      if (tile) this._pin(tile);
    });
    this.nodesEl.addEventListener("focusin", (event) => {
      const tile = event.target.closest?.(".tile");
      if (tile?.dataset.uuid) {
        this.hovered = tile.dataset.uuid;
        if (!this.pinned) this._renderDetails();
      }
    });
    this.nodesEl.addEventListener("keydown", (event) => this._key(event));
    for (const id of ["details", "pods"]) {
      this.$(id).addEventListener("click", (event) => {
        const button = event.target.closest?.(".pod-link");
        if (button) this.selectPod(button.dataset.pod);
      });
    }
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.$("auth").hidden) this._clear();
    });
    this.$("auth-form").addEventListener("submit", (event) => {
      event.preventDefault();
      token.set(this.$("auth-token").value.trim());
      this.$("auth").hidden = true;
      this.load();
    });
    this.$("sign-out").addEventListener("click", () => this._signOut());
  }

  _pin(tile) {
    const uuid = tile.dataset.uuid ?? null;
    this.pinned = this.pinned === uuid ? null : uuid;
    for (const el of this.nodesEl.querySelectorAll(".tile.pinned")) el.classList.remove("pinned");
    if (this.pinned) tile.classList.add("pinned");
    this._focus(tile);
    this._renderDetails();
    this._writeUrl();
  }

  _clear() {
    this.pinned = null;
    for (const el of this.nodesEl.querySelectorAll(".tile.pinned")) el.classList.remove("pinned");
    if (this.selectedPod) this.selectPod(this.selectedPod);
    this._renderDetails();
    this._writeUrl();
  }

  _focus(tile) {
    const current = this.nodesEl.querySelector('.tile[tabindex="0"]');
    if (current && current !== tile) current.tabIndex = -1;
    tile.tabIndex = 0;
    tile.focus();
  }

  _key(event) {
    const tile = event.target.closest?.(".tile");
    if (!tile) return;
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      this._pin(tile);
      return;
    }
    const visible = (root) => [...root.querySelectorAll(".tile")].filter((el) => !el.hidden);
    let target = null;
    if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      const all = visible(this.nodesEl);
      const at = all.indexOf(tile);
      target = all[at + (event.key === "ArrowRight" ? 1 : -1)];
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const sections = [...this.nodesEl.children].filter((s) => !s.hidden && visible(s).length);
      const here = tile.closest("section");
      const column = visible(here).indexOf(tile);
      const next = sections[sections.indexOf(here) + (event.key === "ArrowDown" ? 1 : -1)];
      if (next) {
        const tiles = visible(next);
        target = tiles[Math.min(column, tiles.length - 1)];
      }
    } else if (event.key === "Home" || event.key === "End") {
      const all = visible(this.nodesEl);
      target = event.key === "Home" ? all[0] : all[all.length - 1];
    } else {
      return;
    }
    event.preventDefault();
    if (target) this._focus(target);
  }
}

/** Whether a GPU holds a pod of ``ns`` (if given) and has the ``only`` property (if given). */
function matches(entry, ns, only) {
  if (ns && !entry.info.pods.some((p) => p.namespace === ns)) return false;
  return !only || Boolean(entry.info[only]);
}

function describe(error) {
  if (Array.isArray(error)) return error.map((e) => e.message).join("; ");
  if (error?.code) return `socket closed (${error.code}${error.reason ? `: ${error.reason}` : ""})`;
  return String(error?.message ?? error);
}
