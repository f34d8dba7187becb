// Writes the CommonJS entry (mailroom-verify.cjs, mailroom-verify.d.cts) from the ES module
// and its types, so that the two entries of the package are one code:
//   node build-cjs.mjs          rewrite both files
//   node build-cjs.mjs --check  exit 1 when either differs from what it would write (npm pack)
import { readFileSync, writeFileSync } from "node:fs";

const here = (name) => new URL(name, import.meta.url);
const header = (from) =>
  `// Generated from ${from} by build-cjs.mjs: edit that file and run \`node build-cjs.mjs\`.\n`;

function cjs(esm) {
  const names = [];
  const body = esm.replace(/^export (async function|function|class|const) (\w+)/gm, (_, kind, name) => {
    names.push(name);
    return `${kind} ${name}`;
  });
  if (/^\s*(import|export)\b/m.test(body)) throw new Error("mailroom-verify.mjs: an import or export build-cjs.mjs cannot convert");
  return `${header("mailroom-verify.mjs")}"use strict";\n${body}\nmodule.exports = { ${names.sort().join(", ")} };\n`;
}

const outputs = {
  "mailroom-verify.cjs": cjs(readFileSync(here("mailroom-verify.mjs"), "utf8")),
  "mailroom-verify.d.cts": header("mailroom-verify.d.mts") + readFileSync(here("mailroom-verify.d.mts"), "utf8"),
};
let stale = 0;
for (const [name, text] of Object.entries(outputs)) {
  if (process.argv.includes("--check")) {
    let now = "";
    try { now = readFileSync(here(name), "utf8"); } catch {}
    if (now !== text) {
      console.error(`${name} is not what build-cjs.mjs writes from its source: run node build-cjs.mjs`);
      stale = 1;
    }
  } else {
    writeFileSync(here(name), text);
  }
}
process.exitCode = stale;
