// Bundles the cluster map's script and stylesheet with esbuild into the
// folder the gpugraph server serves them from, so the page works with no
// network access. Run after `npm ci` in web/:  node map/build.mjs [OUT_DIR]
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const web = join(here, "..");
const outDir = resolve(process.argv[2] ?? join(web, "..", "api", "static", "map"));
const modules = join(web, "node_modules");
// Bundled into map.js; their licenses travel with it.
const BUNDLED = ["graphql-ws"];

function packageVersion(name) {
  return JSON.parse(readFileSync(join(modules, name, "package.json"), "utf8")).version;
}

async function main() {
  let esbuild;
  try {
    esbuild = await import("esbuild");
  } catch (err) {
    console.error(`web packages are not installed (${err.message}); run \`npm ci\` in ${web} first`);
    process.exit(1);
  }
  // Start clean so a stale file from an older build is never served.
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(join(outDir, "licenses"), { recursive: true });
  await esbuild.build({
    // map-boot.js is inlined into the page by the server (api/http/cluster_map.py).
    entryPoints: { map: join(here, "src", "main.js"), "map-boot": join(here, "src", "boot.js") },
    bundle: true,
    minify: true,
    format: "iife",
    target: ["chrome100", "firefox100", "safari15"],
    outdir: outDir,
    logLevel: "warning",
  });
  await esbuild.build({
    entryPoints: { map: join(here, "map.css") },
    bundle: true,
    minify: true,
    outdir: outDir,
    logLevel: "warning",
  });
  for (const name of BUNDLED) {
    copyFileSync(join(modules, name, "LICENSE.md"), join(outDir, "licenses", `${name}.LICENSE`));
  }
  const versions = Object.fromEntries([...BUNDLED, "esbuild"].map((n) => [n, packageVersion(n)]));
  const manifest = { files: ["map.js", "map-boot.js", "map.css"], versions };
  writeFileSync(join(outDir, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  console.log(`cluster map (${Object.entries(versions).map((e) => e.join(" ")).join(", ")}) -> ${outDir}`);
}

await main();
