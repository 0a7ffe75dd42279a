// The graphql-http audit suite (the GraphQL-over-HTTP spec's MUST/SHOULD/MAY
// checks) against one GraphQL URL; prints one JSON object per audit.
import { serverAudits } from "graphql-http";

const url = process.argv[2];
if (!url) {
  console.error("usage: node http_audit.mjs URL");
  process.exit(2);
}
const results = [];
for (const audit of serverAudits({ url, fetchFn: fetch })) {
  const result = await audit.fn();
  results.push({ id: audit.id, name: audit.name, status: result.status, reason: result.reason ?? null });
}
console.log(JSON.stringify(results));
