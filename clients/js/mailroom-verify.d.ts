// Types for mailroom-verify.mjs.

/** The actions a token can be signed for, and what each signs. */
export declare const ACTIONS: Readonly<
  Record<"activation" | "password_recovery" | (string & {}), Readonly<{ domain: string; signsCode: boolean }>>
>;
export type Action = "activation" | "password_recovery";
export declare const TOKEN_CHARS: 86;

/** A token that does not verify; the message never contains the token. */
export declare class InvalidTokenError extends Error {
  readonly kind: "malformed" | "mismatch";
}
/** A key list that cannot be used; the message names the variable, never the key. */
export declare class KeyConfigError extends Error {}

/** MAILROOM_SECRET_KEY (64 hex) first, then MAILROOM_VERIFY_KEYS (comma-separated), as 32-byte keys. */
export declare function parseKeys(current: string, older?: string): Uint8Array[];

/** Node (node:crypto): the token's 32-byte secret, or throws InvalidTokenError. */
export declare function verifyTokenSync(
  token: string, action: Action, keys: readonly Uint8Array[], code?: string | null,
): Uint8Array;

/** WebCrypto (crypto.subtle): resolves to the 32-byte secret, or rejects with InvalidTokenError. */
export declare function verifyToken(
  token: string, action: Action, keys: readonly Uint8Array[], code?: string | null,
): Promise<Uint8Array>;
