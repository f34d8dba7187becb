// Generated from mailroom-verify.mjs by build-cjs.mjs: edit that file and run `node build-cjs.mjs`.
"use strict";
// Verifies mailroom's account-email tokens with the platform's own crypto only:
//   verifyTokenSync  – Node (node:crypto, crypto.timingSafeEqual);
//   verifyToken      – async, WebCrypto (crypto.subtle): Deno, Cloudflare Workers, Bun, Node ≥ 20.
//   wellFormed       – the token's spelling alone, no key or code (a recovery link's GET).
// A token is base64url_without_padding(secret[32] ‖ HMAC-SHA256(key, msg)), 86 characters;
// msg = the action's domain string ‖ secret (‖ the code for actions that sign one):
// "/activate" ‖ secret for activation, "/recover" ‖ secret ‖ code (5 digits) for
// password_recovery, "/action/" ‖ name ‖ "/" ‖ secret (‖ code, 5 to 12 digits, when one is
// given) for every other action, built in (login_code, email_change, invitation) or the
// application's own (a name matching [a-z][a-z0-9_]{0,62}).
// The HMAC key is a server secret: run this where the key may live, never in a browser page.

// The two first actions keep their own domain strings and code rules: activation signs no
// code (one given is ignored), password_recovery always signs a 5-digit one.
const ACTIONS = Object.freeze({
  activation: Object.freeze({ domain: "/activate", signsCode: false }),
  password_recovery: Object.freeze({ domain: "/recover", signsCode: true }),
});
const ACTION_NAME = /^[a-z][a-z0-9_]{0,62}$/;
const OTHER_CODE = /^[0-9]{5,12}$/;

/**
 * The domain string a token of `action` signs before its secret: "/activate", "/recover" or
 * "/action/" + name + "/". Throws TypeError for a name that is not an action's.
 */
function actionDomain(action) {
  if (typeof action === "string" && Object.hasOwn(ACTIONS, action)) return ACTIONS[action].domain;
  if (typeof action !== "string" || !ACTION_NAME.test(action)) {
    throw new TypeError("not an action name (want [a-z][a-z0-9_]{0,62})");
  }
  return `/action/${action}/`;
}

// The code the token of `action` signs ("" for none), or throws InvalidTokenError (malformed).
function signedCode(action, code) {
  if (action === "activation") return ""; // signs no code: one given is ignored
  if (action === "password_recovery") {
    if (!(typeof code === "string" && /^[0-9]{5}$/.test(code))) {
      throw new InvalidTokenError("malformed", "recovery code must be exactly 5 ASCII digits");
    }
    return code;
  }
  if (code === undefined || code === null || code === "") return ""; // none carried or given
  if (!(typeof code === "string" && OTHER_CODE.test(code))) {
    throw new InvalidTokenError("malformed", "code must be 5 to 12 ASCII digits");
  }
  return code;
}

const TOKEN_CHARS = 86; // base64url of 64 bytes, unpadded
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// node:crypto without a static import, so that browsers and bundlers never see it.
const nodeCrypto = globalThis.process?.getBuiltinModule?.("node:crypto") ?? null;

/** A token that does not verify. `kind`: "malformed" or "mismatch". Never holds the token. */
class InvalidTokenError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "InvalidTokenError";
    this.kind = kind;
  }
}

/** A key list that cannot be used; the message names the variable, never the key. */
class KeyConfigError extends Error {
  constructor(message) {
    super(message);
    this.name = "KeyConfigError";
  }
}

function parseKey(text, where) {
  if (!/^[0-9a-fA-F]{64}$/.test(text)) {
    throw new KeyConfigError(
      `${where}: must be 64 hex characters (32 bytes), got ${text.length} characters` +
        (text.length === 64 ? " with a non-hex one" : ""),
    );
  }
  const key = new Uint8Array(32);
  for (let i = 0; i < 32; i++) key[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return key;
}

/**
 * The verification keys as 32-byte arrays: `current` (MAILROOM_SECRET_KEY) first, then the
 * comma-separated `older` ones (MAILROOM_VERIFY_KEYS). Throws KeyConfigError.
 */
function parseKeys(current, older = "") {
  const keys = [parseKey(current ?? "", "MAILROOM_SECRET_KEY")];
  (older ?? "").split(",").forEach((part, i) => {
    if (part.trim()) keys.push(parseKey(part.trim(), `MAILROOM_VERIFY_KEYS key ${i + 1}`));
  });
  return keys;
}

// The signer's one spelling: 86 base64url characters, no padding or whitespace, the last
// character's 4 unused low bits zero (otherwise 16 strings would verify for one token).
function spelledRight(token) {
  if (typeof token !== "string" || token.length !== TOKEN_CHARS) return false;
  for (const c of token) if (ALPHABET.indexOf(c) < 0) return false;
  return (ALPHABET.indexOf(token[TOKEN_CHARS - 1]) & 0x0f) === 0;
}

// The 64 bytes of a token of the signer's spelling. Decoded by hand: atob and Buffer both
// accept other spellings.
function decode(token) {
  if (!spelledRight(token)) {
    throw new InvalidTokenError("malformed", "token is not the unpadded base64url of 64 bytes");
  }
  const raw = new Uint8Array(64);
  let acc = 0, bits = 0, n = 0;
  for (const c of token) {
    acc = ((acc << 6) | ALPHABET.indexOf(c)) & 0xfff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (n < 64) raw[n++] = (acc >> bits) & 0xff;
    }
  }
  return raw;
}

/**
 * Whether `token` has the signer's one spelling (86 base64url characters, no padding, the last
 * character's 4 unused bits zero), for an action by its name. Checks no signature and needs no
 * key or code: what a front end checks on a recovery link's GET, before the user has typed the
 * code (verifyTokenSync refuses a recovery token without its code as malformed). Throws
 * TypeError for a name that is not an action's, like the verifiers.
 */
function wellFormed(token, action) {
  actionDomain(action);
  return spelledRight(token);
}

// Everything but the MAC comparison, shared by both flavours.
function prepare(token, action, keys, code) {
  const domain = actionDomain(action);
  const raw = decode(token);
  const signed = signedCode(action, code);
  if (!Array.isArray(keys) || keys.length === 0 || keys.some((k) => k?.length !== 32)) {
    throw new TypeError("keys must be a non-empty array of 32-byte keys");
  }
  const enc = new TextEncoder();
  const head = enc.encode(domain), tail = enc.encode(signed);
  const secret = raw.slice(0, 32), mac = raw.slice(32);
  const msg = new Uint8Array(head.length + 32 + tail.length);
  msg.set(head, 0);
  msg.set(secret, head.length);
  msg.set(tail, head.length + 32);
  return { secret, mac, msg };
}

const mismatch = () => new InvalidTokenError("mismatch", "signature does not match any key");

/**
 * Node: returns the token's 32-byte secret when one of `keys` signed it for `action` (and
 * `code`, for an action that carries one: password_recovery always, any other but activation
 * when `code` is given); throws InvalidTokenError otherwise, TypeError for a name that is not
 * an action's or bad keys. Every key is tried, compared with crypto.timingSafeEqual.
 */
function verifyTokenSync(token, action, keys, code) {
  if (!nodeCrypto) throw new Error("verifyTokenSync needs Node's node:crypto; use verifyToken");
  const { secret, mac, msg } = prepare(token, action, keys, code);
  let match = false;
  for (const key of keys) {
    const expected = nodeCrypto.createHmac("sha256", key).update(msg).digest();
    match = nodeCrypto.timingSafeEqual(expected, mac) || match;
  }
  if (!match) throw mismatch();
  return secret;
}

/**
 * WebCrypto: the same check as verifyTokenSync, resolving to the secret or rejecting with
 * InvalidTokenError. Every key is tried with crypto.subtle.verify (HMAC), which compares in
 * constant time.
 */
async function verifyToken(token, action, keys, code) {
  const { secret, mac, msg } = prepare(token, action, keys, code);
  const subtle = globalThis.crypto.subtle;
  const results = await Promise.all(
    keys.map(async (raw) => {
      const key = await subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, [
        "verify",
      ]);
      return subtle.verify("HMAC", key, mac, msg);
    }),
  );
  if (!results.includes(true)) throw mismatch();
  return secret;
}

module.exports = { ACTIONS, InvalidTokenError, KeyConfigError, TOKEN_CHARS, actionDomain, parseKeys, verifyToken, verifyTokenSync, wellFormed };
