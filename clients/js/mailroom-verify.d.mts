// Types for mailroom-verify.mjs (the ES module; mailroom-verify.d.cts is the same for the
// CommonJS entry, generated from this file by build-cjs.mjs).

/** The two first actions, whose domain strings and code rules are their own. */
export declare const ACTIONS: Readonly<
  Record<"activation" | "password_recovery", Readonly<{ domain: string; signsCode: boolean }>>
>;
/** The built-in actions that carry a token. */
export type BuiltinAction =
  | "activation"
  | "password_recovery"
  | "login_code"
  | "email_change"
  | "invitation";
/**
 * An action's name: a built-in one, or one of the application's own matching
 * [a-z][a-z0-9_]{0,62} (checked at run time: TypeError otherwise).
 */
export type Action = BuiltinAction | (string & {});
/** "/activate", "/recover" or "/action/" + name + "/"; TypeError for a name that is not an action's. */
export declare function actionDomain(action: Action): string;
export declare const TOKEN_CHARS: 86;

/** A token that does not verify; the message never contains the token. */
export declare class InvalidTokenError extends Error {
  readonly kind: "malformed" | "mismatch";
}
/** A key list that cannot be used; the message names the variable, never the key. */
export declare class KeyConfigError extends Error {}

/** MAILROOM_SECRET_KEY (64 hex) first, then MAILROOM_VERIFY_KEYS (comma-separated), as 32-byte keys. */
export declare function parseKeys(current: string, older?: string | null): Uint8Array[];

/**
 * Whether the token has the signer's one spelling (86 base64url characters, no padding, the
 * last character's 4 unused bits zero): no signature, no key, no code. What a front end checks
 * on a recovery link's GET, before the user has typed the code. TypeError for a name that is
 * not an action's.
 */
export declare function wellFormed(token: string, action: Action): boolean;

/**
 * Node (node:crypto): the token's 32-byte secret, or throws InvalidTokenError. `code`: the
 * 5-digit recovery code, the 5 to 12 digits of another action that carries one, else none
 * (activation ignores one).
 */
export declare function verifyTokenSync(
  token: string, action: Action, keys: readonly Uint8Array[], code?: string | null,
): Uint8Array;

/** WebCrypto (crypto.subtle): resolves to the 32-byte secret, or rejects with InvalidTokenError. */
export declare function verifyToken(
  token: string, action: Action, keys: readonly Uint8Array[], code?: string | null,
): Promise<Uint8Array>;
