#!/usr/bin/env node
// mailroom from Node.js with pg (node-postgres): the account emails of docs/integration.md in
// its order. A signup, a resend, what happened, the activation's click; a password recovery (its
// link, a wrong code, then the right one); a sign-in code typed on another device
// (mailroom.consume_code); an address change confirmed from the new address. Each link is
// checked with the verifier of clients/js (npm mailroom-verify) before its token reaches
// mailroom.consume, as a front end's GET does; every answer is checked against the guide's.
//
// Every call is schema-qualified (mailroom.request, not request) and every value is a
// parameter bound by the driver ($1, $2, ...), never part of the statement's text. Each query
// runs in autocommit: mailroom.consume's outcome (a wrong code too) is committed whatever
// comes next.
//
// Environment:
//   DATABASE_URL    the application's role (SELECT mailroom.grant_application('app'))
//   EXAMPLE_EMAIL   the address to sign up (default ada@example.test)
//   EXAMPLE_OUTBOX  the sender's MAILROOM_FILE_DIR (file transport): stands in for the user's
//                   mailbox; the newest email of an action to an address is the one "clicked"
//   MAILROOM_SECRET_KEY, MAILROOM_VERIFY_KEYS
//                   the collector's signing key (and older ones): the verifier's keys
"use strict";
const fs = require("fs");
const path = require("path");
const { Client } = require("pg");
const { parseKeys, verifyTokenSync, wellFormed, InvalidTokenError } = require("mailroom-verify");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The account's emails once tokenId (or, without one, any activation) is sent.
async function waitSent(db, account, tokenId = null, seconds = 30) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const { rows } = await db.query(
      "SELECT token_id, action, state, state_at, reason FROM mailroom.account_emails" +
        " WHERE account = $1 ORDER BY requested_at DESC, token_id DESC",
      [account]);
    if (rows.some((r) => r.state === "sent" && (tokenId === null || r.token_id === tokenId))) {
      return rows;
    }
    if (Date.now() > deadline) throw new Error(`no email sent in ${seconds} s: ${JSON.stringify(rows)}`);
    await sleep(200);
  }
}

// The text/plain part of a MIME email, decoded (mailroom's sender writes base64 parts; a
// quoted-printable one is undone too).
function plainText(raw) {
  const boundary = /boundary="?([^";\r\n]+)"?/i.exec(raw);
  const parts = boundary ? raw.split("--" + boundary[1]) : [raw];
  for (const part of parts) {
    const split = part.search(/\r?\n\r?\n/);
    if (split < 0) continue;
    const head = part.slice(0, split);
    const body = part.slice(split).trim();
    if (boundary && !/^Content-Type:\s*text\/plain/im.test(head)) continue;
    if (/^Content-Transfer-Encoding:\s*base64/im.test(head)) {
      return Buffer.from(body.replace(/\s+/g, ""), "base64").toString("utf8");
    }
    if (/^Content-Transfer-Encoding:\s*quoted-printable/im.test(head)) {
      return body.replace(/=\r?\n/g, "").replace(/=([0-9A-F]{2})/gi,
                                                   (_, h) => String.fromCharCode(parseInt(h, 16)));
    }
    return body;
  }
  return "";
}

// The token and code of the newest email to address whose link goes to linkPath (the user's
// click): the link's code, else the one the text shows for typing (or null).
function newestLink(outbox, address, linkPath) {
  const files = fs.readdirSync(outbox).filter((f) => f.endsWith(".eml")).sort().reverse();
  const link = new RegExp(linkPath.replace(/[/?]/g, "\\$&") + "\\?token=([A-Za-z0-9_-]+)(?:&code=([0-9]+))?");
  for (const f of files) {
    const raw = fs.readFileSync(path.join(outbox, f), "utf8");
    const to = /^To:.*$/im.exec(raw);
    if (!to || !to[0].includes(`<${address}>`) && !to[0].endsWith(` ${address}`)) continue;
    const text = plainText(raw);
    const m = link.exec(text);
    if (!m) continue;
    const typed = /(?<![0-9])[0-9]{5,12}(?![0-9])/.exec(text.replace(/https?:\/\/\S+/g, " "));
    return { token: m[1], code: m[2] || (typed && typed[0]) || null };
  }
  throw new Error(`no email to ${address} with a link to ${linkPath} in ${outbox}`);
}

// Prints "what: got" and stops unless it is the answer the guide gives.
function expect(what, got, want) {
  const shown = JSON.stringify(got);
  console.log(`${what}: ${shown}`);
  if (shown !== JSON.stringify(want)) throw new Error(`${what}: ${shown}, not ${JSON.stringify(want)}`);
}

// mailroom.request; the new token's id once its email is sent (the user waits for it).
async function ask(db, account, action, address = null) {
  const r = (await db.query(
    "SELECT decision, token_id, retry_at, reason FROM mailroom.request($1, $2, $3)",
    [account, action, address])).rows[0];
  expect(`request ${action}`, [r.decision, r.reason], ["queued", null]);
  await waitSent(db, account, r.token_id);
  return r.token_id;
}

async function consume(db, token, code = null) {
  const r = (await db.query("SELECT outcome, account, action FROM mailroom.consume($1, $2)",
                            [token, code])).rows[0];
  return [r.outcome, r.account, r.action];
}

async function main() {
  const address = process.env.EXAMPLE_EMAIL || "ada@example.test";
  const db = new Client({ connectionString: process.env.DATABASE_URL });
  await db.connect();
  try {
    // 1. Sign up: the trigger queues the activation email. (pg returns bigint as a string.)
    const signup = await db.query(
      "INSERT INTO mailroom.accounts (email, login, locale) VALUES ($1, $2, $3) RETURNING id",
      [address, "ada", "en"]);
    const account = signup.rows[0].id;
    console.log("signed up: account", account);
    await waitSent(db, account);

    // 2. "Didn't get the email?": send it again.
    const resend = (await db.query(
      "SELECT decision, token_id, retry_at, reason FROM mailroom.request($1, $2)",
      [account, "activation"])).rows[0];
    console.log("resend:", resend.decision, resend.token_id, resend.retry_at, resend.reason);
    if (resend.decision !== "queued") throw new Error(`resend not queued: ${resend.reason}`);

    // 3. What happened to each email of the account.
    for (const r of await waitSent(db, account, resend.token_id)) {
      console.log("email:", r.token_id, r.action, r.state, r.state_at, r.reason);
    }

    // 4. The user clicks the newest email's button: its GET verifies the token, the POST
    // consumes it.
    const outbox = process.env.EXAMPLE_OUTBOX;
    const keys = parseKeys(process.env.MAILROOM_SECRET_KEY ?? "", process.env.MAILROOM_VERIFY_KEYS);
    let { token, code } = newestLink(outbox, address, "/activate");
    verifyTokenSync(token, "activation", keys);  // throws InvalidTokenError
    expect("consume", await consume(db, token), ["ok", account, "activation"]);
    expect("consume again", (await consume(db, token))[0], "consumed");
    const accountRow = async () =>
      (await db.query("SELECT status, email FROM mailroom.accounts WHERE id = $1", [account])).rows[0];
    expect("account status", (await accountRow()).status, "active");

    // 5. Password recovery: the GET checks the spelling only (the code is not typed yet); the
    // POST hands the typed code to mailroom.consume, a wrong one too (it is counted).
    await ask(db, account, "password_recovery");
    ({ token, code } = newestLink(outbox, address, "/recover"));
    expect("recovery link well formed", wellFormed(token, "password_recovery"), true);
    const wrong = String((Number(code) + 1) % 100000).padStart(5, "0");
    try {
      verifyTokenSync(token, "password_recovery", keys, wrong);
      throw new Error("a wrong code verified");
    } catch (e) {
      if (!(e instanceof InvalidTokenError)) throw e;  // and still the database counts it
    }
    expect("recovery with a wrong code", (await consume(db, token, wrong))[0], "wrong_code");
    verifyTokenSync(token, "password_recovery", keys, code);
    expect("recovery", await consume(db, token, code), ["ok", account, "password_recovery"]);

    // 6. A sign-in code read on a phone, typed on the laptop: the account and the code.
    await ask(db, account, "login_code");
    ({ token, code } = newestLink(outbox, address, "/action/login_code"));
    verifyTokenSync(token, "login_code", keys, code);
    const signIn = async () => Object.values((await db.query(
      "SELECT outcome, account, action FROM mailroom.consume_code($1, $2, $3)",
      [account, "login_code", code])).rows[0]);
    expect("sign-in code", await signIn(), ["ok", account, "login_code"]);
    expect("sign-in code again", (await signIn())[0], "consumed");

    // 7. An address change: the confirmation goes to the new address.
    const newAddress = "new." + address;
    await ask(db, account, "email_change", newAddress);
    ({ token } = newestLink(outbox, newAddress, "/action/email_change"));
    verifyTokenSync(token, "email_change", keys);
    expect("email change", await consume(db, token), ["ok", account, "email_change"]);
    expect("account email", (await accountRow()).email, newAddress);
    console.log("every answer as the guide says");
  } finally {
    await db.end();
  }
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
