// mailroom-verify against the shared known-answer cases (../testdata/vectors.json, or the file
// MAILROOM_VECTORS names): both flavours and the command line. Run: node --test
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { run } from "./cli.mjs";
import { ACTIONS, actionDomain, InvalidTokenError, KeyConfigError, parseKeys, verifyToken, verifyTokenSync, wellFormed } from "./mailroom-verify.mjs";

const vectorsPath =
  process.env.MAILROOM_VECTORS ?? fileURLToPath(new URL("../testdata/vectors.json", import.meta.url));
const { cases, invalid_action_names: invalidNames } = JSON.parse(readFileSync(vectorsPath, "utf8"));
const SPEC_KEY = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const SPEC_ACT = cases[0].token;
const hex = (bytes) => Buffer.from(bytes).toString("hex");
const keysOf = (c) => c.keys.map((k) => Uint8Array.from(Buffer.from(k, "hex")));
const code = (c) => c.code ?? undefined;

test("there are at least 50 cases", () => assert.ok(cases.length >= 50));

test("verifyTokenSync (node:crypto) agrees with every case", () => {
  for (const c of cases) {
    if (c.valid) {
      assert.equal(hex(verifyTokenSync(c.token, c.action, keysOf(c), code(c))), c.secret, c.name);
    } else {
      assert.throws(() => verifyTokenSync(c.token, c.action, keysOf(c), code(c)),
        (e) => e instanceof InvalidTokenError && e.kind === c.refusal && !e.message.includes(c.token || "\0"),
        c.name);
    }
  }
});

test("verifyToken (WebCrypto) agrees with every case", async () => {
  for (const c of cases) {
    if (c.valid) {
      assert.equal(hex(await verifyToken(c.token, c.action, keysOf(c), code(c))), c.secret, c.name);
    } else {
      await assert.rejects(verifyToken(c.token, c.action, keysOf(c), code(c)),
        (e) => e instanceof InvalidTokenError && e.kind === c.refusal, c.name);
    }
  }
});

function runCli(argv, env, stdin = "") {
  let out = "", err = "";
  const rc = run(argv, { env, readStdin: () => stdin, out: (s) => (out += s), err: (s) => (err += s) });
  return { rc, out, err };
}
const argvOf = (c) => [`--action=${c.action}`, `--token=${c.token}`, ...(c.code === null ? [] : [`--code=${c.code}`])];
const envOf = (c) => ({ MAILROOM_SECRET_KEY: c.keys[0], MAILROOM_VERIFY_KEYS: c.keys.slice(1).join(",") });

test("the command line agrees with every case and never prints the token", () => {
  for (const c of cases) {
    const { rc, out, err } = runCli(argvOf(c), envOf(c));
    if (c.valid) {
      assert.deepEqual([rc, out], [0, "valid\n"], `${c.name}: ${err}`);
    } else {
      assert.equal(rc, 1, `${c.name}: ${err}`);
      assert.match(err, /^invalid: /);
    }
    if (c.token.length >= 8) assert.ok(!(out + err).includes(c.token), c.name);
  }
});

test("a real process for each outcome, and a token from stdin", () => {
  const cli = fileURLToPath(new URL("./cli.mjs", import.meta.url));
  const spawn = (args, input = "") =>
    spawnSync(process.execPath, [cli, ...args], { input, encoding: "utf8", env: { MAILROOM_SECRET_KEY: SPEC_KEY } });
  let p = spawn(["--action=activation", `--token=${SPEC_ACT}`]);
  assert.deepEqual([p.status, p.stdout], [0, "valid\n"], p.stderr);
  p = spawn(["--action=activation", `--token=${SPEC_ACT.slice(0, -1)}R`]);
  assert.equal(p.status, 1);
  assert.ok(!p.stderr.includes(SPEC_ACT.slice(0, -1)));
  p = spawn(["--action=activation", "--token=-"], `${SPEC_ACT}\r\n`);
  assert.equal(p.status, 0, p.stderr);
  p = spawn(["--action=Nope", "--token=x"]);
  assert.equal(p.status, 2);
  const login = cases.find((c) => c.action === "login_code" && c.valid && c.keys.length === 1);
  p = spawnSync(process.execPath, [cli, "--action=login_code", "--token=-", `--code=${login.code}`],
    { input: `${login.token}\n`, encoding: "utf8", env: envOf(login) });
  assert.deepEqual([p.status, p.stdout], [0, "valid\n"], p.stderr);
});

test("usage and configuration errors exit 2 and name what is wrong", () => {
  const key = { MAILROOM_SECRET_KEY: SPEC_KEY };
  for (const [argv, env, says] of [
    [["--action=Email-Change", "--token=x"], key, "--action"],
    [["--action=activation"], key, "--token"],
    [["--action=activation", `--tokn=${SPEC_ACT}`], key, "--tokn"],
    [["--action=activation", "--token=x"], {}, "MAILROOM_SECRET_KEY"],
    [["--action=activation", "--token=x"], { MAILROOM_SECRET_KEY: "abc" }, "MAILROOM_SECRET_KEY"],
    [["--action=activation", "--token=x"], { ...key, MAILROOM_VERIFY_KEYS: `${SPEC_KEY},xyz` }, "MAILROOM_VERIFY_KEYS key 2"],
  ]) {
    const { rc, err } = runCli(argv, env);
    assert.equal(rc, 2, argv.join(" "));
    assert.ok(err.includes(says), err);
    assert.ok(!err.includes(SPEC_ACT) && !err.includes(SPEC_KEY), err);
  }
});

test("parseKeys puts the current key first and refuses what is not 64 hex", () => {
  assert.deepEqual(parseKeys(SPEC_KEY, ` ${"ab".repeat(32)} , ,`).map(hex), [SPEC_KEY, "ab".repeat(32)]);
  assert.throws(() => parseKeys("0g".repeat(32)), KeyConfigError);
  assert.throws(() => parseKeys(SPEC_KEY, "12"), /MAILROOM_VERIFY_KEYS key 1/);
});

test("a name that is not an action's is a TypeError, not an invalid token", async () => {
  const keys = parseKeys(SPEC_KEY);
  assert.ok(invalidNames.length >= 10);
  for (const name of [...invalidNames, undefined, null, 7]) {
    assert.throws(() => verifyTokenSync(SPEC_ACT, name, keys), TypeError, String(name));
    await assert.rejects(verifyToken(SPEC_ACT, name, keys), TypeError, String(name));
    if (typeof name === "string") {
      const { rc, err } = runCli([`--action=${name}`, `--token=${SPEC_ACT}`], { MAILROOM_SECRET_KEY: SPEC_KEY });
      assert.equal(rc, 2, name);
      assert.ok(err.includes("--action"), err);
    }
  }
  // A name of Object.prototype is an action name like any other, not a lookup.
  assert.throws(() => verifyTokenSync(SPEC_ACT, "constructor", keys), (e) => e.kind === "mismatch");
  assert.ok(Object.isFrozen(ACTIONS));
});

test("every action has its domain, and the cases cover every action by name", () => {
  assert.equal(actionDomain("activation"), "/activate");
  assert.equal(actionDomain("password_recovery"), "/recover");
  assert.equal(actionDomain("login_code"), "/action/login_code/");
  assert.equal(actionDomain("team_invite"), "/action/team_invite/");
  const actions = new Set(cases.map((c) => c.action));
  for (const a of ["activation", "password_recovery", "login_code", "email_change", "invitation", "welcome_gift", "team_invite"]) {
    assert.ok(actions.has(a), a);
  }
});

test("wellFormed agrees with every case's spelling, with no key and no code", () => {
  let yes = 0, no = 0;
  for (const c of cases) {
    assert.equal(typeof c.well_formed, "boolean", c.name);
    assert.equal(wellFormed(c.token, c.action), c.well_formed, c.name);
    c.well_formed ? yes++ : no++;
  }
  assert.ok(yes > 0 && no > 0);
  // A recovery link's token without its code: refused by the verifier, well formed here.
  const rec = cases.find((c) => c.action === "password_recovery" && c.code === null && c.well_formed);
  assert.ok(rec);
  assert.throws(() => verifyTokenSync(rec.token, rec.action, keysOf(rec)), (e) => e.kind === "malformed");
  assert.equal(wellFormed(rec.token, rec.action), true);
  for (const name of [...invalidNames, undefined, null, 7]) {
    assert.throws(() => wellFormed(SPEC_ACT, name), TypeError, String(name));
  }
  for (const t of [undefined, null, 86, {}]) assert.equal(wellFormed(t, "activation"), false);
});

test("the command line's --well-formed agrees with every case, with no key", () => {
  for (const c of cases) {
    for (const argv of [
      ["--well-formed", `--action=${c.action}`, `--token=${c.token}`],
      ["--action", c.action, "--well-formed", "--token", c.token],
    ]) {
      const { rc, out, err } = runCli(argv, {});
      if (c.well_formed) assert.deepEqual([rc, out], [0, "well-formed\n"], `${c.name}: ${err}`);
      else assert.deepEqual([rc, err.startsWith("malformed: ")], [1, true], `${c.name}: ${err}`);
      if (c.token.length >= 8) assert.ok(!(out + err).includes(c.token), c.name);
    }
  }
  for (const name of invalidNames) {
    assert.equal(runCli(["--well-formed", "--action", name, "--token", SPEC_ACT], {}).rc, 2, name);
  }
});

test("every flag may be given as --flag value, as verify takes it", () => {
  for (const c of cases) {
    const argv = ["--action", c.action, "--token", c.token, ...(c.code === null ? [] : ["--code", c.code])];
    const { rc, err } = runCli(argv, envOf(c));
    assert.equal(rc, c.valid ? 0 : 1, `${c.name}: ${err}`);
  }
  for (const argv of [["--action=activation", "--token"], ["--action"], ["--action=activation", "--token=x", "extra"], ["--well-formed=maybe"]]) {
    const { rc, err } = runCli(argv, { MAILROOM_SECRET_KEY: SPEC_KEY });
    assert.equal(rc, 2, argv.join(" "));
    assert.ok(!err.includes("extra"), err);
  }
  assert.equal(runCli(["--help"], {}).rc, 0);
});

test("the CommonJS entry is the ES module's code, current, and agrees with every case", () => {
  const p = spawnSync(process.execPath, [fileURLToPath(new URL("./build-cjs.mjs", import.meta.url)), "--check"], { encoding: "utf8" });
  assert.equal(p.status, 0, p.stderr);
  const cjs = createRequire(import.meta.url)("./mailroom-verify.cjs");
  for (const c of cases) {
    assert.equal(cjs.wellFormed(c.token, c.action), c.well_formed, c.name);
    if (c.valid) assert.equal(hex(cjs.verifyTokenSync(c.token, c.action, keysOf(c), code(c))), c.secret, c.name);
    else assert.throws(() => cjs.verifyTokenSync(c.token, c.action, keysOf(c), code(c)), (e) => e.kind === c.refusal, c.name);
  }
});
