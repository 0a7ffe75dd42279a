// The first picture's query, sent from the page's HTML (the server inlines
// this script) while map.js is still on its way: on a busy server the
// bundle's request waits its turn, and the query need not wait for it.
// map.js picks the response up as its first answer.
import { send } from "./api.js";

const config = JSON.parse(document.getElementById("gpugraph-map-config").textContent);
const first = send(config.graphqlPath, config.queries.snapshot, "ClusterMap");
// A failed request is map.js's to report (it retries); not an unhandled rejection here.
first.catch(() => {});
window.gpugraphMapFirstAnswer = first;
