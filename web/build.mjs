// Copies the GraphiQL page's browser bundles out of node_modules into the
// folder the gpugraph server serves them from, so the IDE works with no
// network access. Run after `npm ci`:  node build.mjs [OUT_DIR]
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outDir = resolve(process.argv[2] ?? join(here, "..", "api", "static", "graphiql"));
const modules = join(here, "node_modules");

// Served name -> file inside node_modules. The server's page references
// exactly these names; React 18 is the last major with UMD builds, and
// GraphiQL 3's UMD bundle already carries graphql-js and the graphql-ws client.
const ASSETS = {
  "react.production.min.js": "react/umd/react.production.min.js",
  "react-dom.production.min.js": "react-dom/umd/react-dom.production.min.js",
  "graphiql.min.js": "graphiql/graphiql.min.js",
  "graphiql.min.css": "graphiql/graphiql.min.css",
};
const PACKAGES = ["react", "react-dom", "graphiql"];

function packageVersion(name) {
  const manifest = JSON.parse(readFileSync(join(modules, name, "package.json"), "utf8"));
  return manifest.version;
}

function main() {
  let versions;
  try {
    versions = Object.fromEntries(PACKAGES.map((name) => [name, packageVersion(name)]));
  } catch (err) {
    console.error(`web packages are not installed (${err.message}); run \`npm ci\` in ${here} first`);
    process.exit(1);
  }
  // Start clean so a stale file from an older build is never served.
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(join(outDir, "licenses"), { recursive: true });
  for (const [served, source] of Object.entries(ASSETS)) {
    copyFileSync(join(modules, source), join(outDir, served));
  }
  // The bundles are MIT-licensed; their licenses travel with them.
  for (const name of PACKAGES) {
    copyFileSync(join(modules, name, "LICENSE"), join(outDir, "licenses", `${name}.LICENSE`));
  }
  const manifest = { files: Object.keys(ASSETS), versions };
  writeFileSync(join(outDir, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  console.log(`GraphiQL assets (${PACKAGES.map((n) => `${n} ${versions[n]}`).join(", ")}) -> ${outDir}`);
}

main();
