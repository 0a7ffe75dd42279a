// The cluster map's entry point: read the server's configuration, start.
import { MapApp } from "./app.js";

const config = JSON.parse(document.getElementById("gpugraph-map-config").textContent);
const app = new MapApp(document.getElementById("gpugraph-map"), config);
// For benchmarks and tests: how long rendering and updates took, and a way to
// apply a tick of one's own that the server's next tick does not overwrite.
window.gpugraphMap = {
  stats: app.stats,
  model: app.model,
  applyTick: (result) => app.applyTick(result),
  stopLive: () => app._stopSubscription(),
};
app.load();
