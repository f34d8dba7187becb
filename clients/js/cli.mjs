#!/usr/bin/env node
// mailroom-verify: the C++ `verify` tool's command line on mailroom-verify.mjs.
//   MAILROOM_SECRET_KEY=… [MAILROOM_VERIFY_KEYS=…] node cli.mjs --action=NAME --token=TOKEN|- [--code=DIGITS]
// Exit 0 and "valid"; 1 and "invalid: reason" on stderr; 2 for usage or configuration errors.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { actionDomain, InvalidTokenError, KeyConfigError, parseKeys, verifyTokenSync } from "./mailroom-verify.mjs";

const USAGE =
  "usage: mailroom-verify --action=NAME --token=TOKEN|- [--code=DIGITS]\n" +
  "  NAME: activation, password_recovery, login_code, email_change, invitation or an action " +
  "of the application's own ([a-z][a-z0-9_]{0,62})";

/** Runs the command line; returns the exit code. `io`: { env, readStdin, out, err }. */
export function run(argv, io) {
  const usage = (why) => (io.err(`mailroom-verify: ${why}\n${USAGE}\n`), 2);
  const args = new Map();
  for (const arg of argv) {
    const eq = arg.indexOf("=");
    const name = eq < 0 ? arg : arg.slice(0, eq);
    if (eq < 0 || !["--action", "--token", "--code"].includes(name)) {
      return usage(`unknown argument ${name}`);
    }
    args.set(name, arg.slice(eq + 1));
  }
  try {
    actionDomain(args.get("--action"));
  } catch {
    return usage("--action must name an action ([a-z][a-z0-9_]{0,62})");
  }
  if (!args.has("--token")) return usage("--token is required");
  let token = args.get("--token");
  if (token === "-") token = io.readStdin().split("\n")[0].replace(/\r$/, "");
  if (!io.env.MAILROOM_SECRET_KEY) {
    io.err("mailroom-verify: MAILROOM_SECRET_KEY: required but not set\n");
    return 2;
  }
  let keys;
  try {
    keys = parseKeys(io.env.MAILROOM_SECRET_KEY, io.env.MAILROOM_VERIFY_KEYS);
  } catch (e) {
    if (!(e instanceof KeyConfigError)) throw e;
    io.err(`mailroom-verify: ${e.message}\n`);
    return 2;
  }
  try {
    verifyTokenSync(token, args.get("--action"), keys, args.get("--code"));
  } catch (e) {
    if (!(e instanceof InvalidTokenError)) throw e;
    io.err(`invalid: ${e.message}\n`);
    return 1;
  }
  io.out("valid\n");
  return 0;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  process.exitCode = run(process.argv.slice(2), {
    env: process.env,
    readStdin: () => readFileSync(0, "utf8"),
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
  });
}
