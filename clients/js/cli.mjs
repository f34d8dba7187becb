#!/usr/bin/env node
// mailroom-verify: the C++ `verify` tool's command line on mailroom-verify.mjs.
//   MAILROOM_SECRET_KEY=… [MAILROOM_VERIFY_KEYS=…] mailroom-verify --action=NAME --token=TOKEN|- [--code=DIGITS]
//   mailroom-verify --well-formed --action=NAME --token=TOKEN|-
// Every flag as --flag=value or --flag value. Exit 0 and "valid" (or "well-formed"); 1 and
// "invalid: reason" (or "malformed: reason") on stderr; 2 for usage or configuration errors.
import { readFileSync, realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { actionDomain, InvalidTokenError, KeyConfigError, parseKeys, verifyTokenSync, wellFormed } from "./mailroom-verify.mjs";

const USAGE =
  "usage: mailroom-verify --action=NAME --token=TOKEN|- [--code=DIGITS]\n" +
  "       mailroom-verify --well-formed --action=NAME --token=TOKEN|-\n" +
  "  NAME: activation, password_recovery, login_code, email_change, invitation or an action " +
  "of the application's own ([a-z][a-z0-9_]{0,62}); each flag as --flag=value or --flag value";

const VALUED = ["--action", "--token", "--code"];

/**
 * The arguments as { flags: Map, wellFormed, help } or { error }: --action, --token and --code
 * as --flag=value or --flag value, --well-formed, --help. Errors name the flag, never a value.
 */
export function parseArgs(argv) {
  const flags = new Map();
  let wellFormed = false, help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.indexOf("=");
    const name = eq < 0 ? arg : arg.slice(0, eq);
    if (arg === "--help" || arg === "-h") help = true;
    else if (name === "--well-formed") {
      const value = eq < 0 ? "true" : arg.slice(eq + 1);
      if (value !== "true" && value !== "false") return { error: "--well-formed: not a valid boolean" };
      wellFormed = value === "true";
    } else if (!VALUED.includes(name)) {
      return { error: name.startsWith("-") ? `unknown argument ${name}` : "unexpected argument" };
    } else if (eq >= 0) flags.set(name, arg.slice(eq + 1));
    else if (i + 1 < argv.length) flags.set(name, argv[++i]);
    else return { error: `${name} needs a value` };
  }
  return { flags, wellFormed, help };
}

/** Runs the command line; returns the exit code. `io`: { env, readStdin, out, err }. */
export function run(argv, io) {
  const usage = (why) => (io.err(`mailroom-verify: ${why}\n${USAGE}\n`), 2);
  const parsed = parseArgs(argv);
  if (parsed.error) return usage(parsed.error);
  if (parsed.help) return (io.out(`${USAGE}\n`), 0);
  const args = parsed.flags;
  try {
    actionDomain(args.get("--action"));
  } catch {
    return usage("--action must name an action ([a-z][a-z0-9_]{0,62})");
  }
  if (!args.has("--token")) return usage("--token is required");
  let token = args.get("--token");
  if (token === "-") token = io.readStdin().split("\n")[0].replace(/\r$/, "");
  if (parsed.wellFormed) {
    // The spelling only: no key, no code, no signature.
    if (!wellFormed(token, args.get("--action"))) {
      io.err("malformed: token is not the unpadded base64url of 64 bytes\n");
      return 1;
    }
    io.out("well-formed\n");
    return 0;
  }
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

// Run directly or through a symlink (node_modules/.bin/mailroom-verify), not when imported.
const invoked = (() => {
  try {
    return pathToFileURL(realpathSync(process.argv[1] ?? "")).href;
  } catch {
    return "";
  }
})();
if (import.meta.url === invoked) {
  process.exitCode = run(process.argv.slice(2), {
    env: process.env,
    readStdin: () => readFileSync(0, "utf8"),
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
  });
}
