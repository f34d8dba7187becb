#!/usr/bin/env node
// mailroom from Node.js with pg (node-postgres): signup, resend, what happened, consume.
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
//                   mailbox; the newest activation email to the address is the one "clicked"
"use strict";
const fs = require("fs");
const path = require("path");
const { Client } = require("pg");

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

// The token of the newest activation email to address (the user's click).
function newestActivationToken(outbox, address) {
  const files = fs.readdirSync(outbox).filter((f) => f.endsWith(".eml")).sort().reverse();
  for (const f of files) {
    const raw = fs.readFileSync(path.join(outbox, f), "utf8");
    const to = /^To:.*$/im.exec(raw);
    if (!to || !to[0].includes(`<${address}>`) && !to[0].endsWith(` ${address}`)) continue;
    const m = /\/activate\?token=([A-Za-z0-9_-]+)/.exec(plainText(raw));
    if (m) return m[1];
  }
  throw new Error(`no activation email to ${address} in ${outbox}`);
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

    // 4. The user clicks the newest email's button: consume its token.
    const token = newestActivationToken(process.env.EXAMPLE_OUTBOX, address);
    const consume = "SELECT outcome, account, action FROM mailroom.consume($1, $2)";
    const first = (await db.query(consume, [token, null])).rows[0];
    console.log("consume:", first.outcome, first.account, first.action);
    const again = (await db.query(consume, [token, null])).rows[0];
    console.log("consume again:", again.outcome);
    const { status } = (await db.query("SELECT status FROM mailroom.accounts WHERE id = $1",
                                       [account])).rows[0];
    console.log("account status:", status);
    if (first.outcome !== "ok" || again.outcome !== "consumed" || status !== "active") {
      throw new Error(`unexpected: ${first.outcome}, ${again.outcome}, ${status}`);
    }
  } finally {
    await db.end();
  }
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
