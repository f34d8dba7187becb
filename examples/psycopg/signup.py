#!/usr/bin/python3
"""mailroom from Python with psycopg 3: the account emails of docs/integration.md in its order.

A signup, a resend, what happened, the activation's click; a password recovery (its link, a
wrong code, then the right one); a sign-in code typed on another device (mailroom.consume_code);
an address change confirmed from the new address. Each link is checked with the verifier of
clients/python (mailroom_verify) before its token reaches mailroom.consume, as a front end's
GET does; every answer is checked against the one the guide gives.

Every call is schema-qualified (mailroom.request, not request) and every value is a parameter
bound by the driver (%s), never part of the statement's text. Each statement runs in
autocommit: mailroom.consume's outcome (a wrong code too) is committed whatever comes next.

Environment:
  DATABASE_URL     the application's role (SELECT mailroom.grant_application('app'))
  EXAMPLE_EMAIL    the address to sign up (default ada@example.test)
  EXAMPLE_OUTBOX   the sender's MAILROOM_FILE_DIR (file transport): stands in for the user's
                   mailbox; the newest email of an action to an address is the one "clicked"
  MAILROOM_SECRET_KEY, MAILROOM_VERIFY_KEYS
                   the collector's signing key (and older ones): the verifier's keys
"""

import email
import email.policy
import glob
import os
import re
import sys
import time

import psycopg
from mailroom_verify import InvalidToken, parse_keys, verify_token, well_formed


def wait_sent(conn, account, token_id=None, seconds=30):
    """The account's emails once `token_id` (or, without one, any activation) is sent."""
    deadline = time.monotonic() + seconds
    while True:
        rows = conn.execute(
            "SELECT token_id, action, state, state_at, reason FROM mailroom.account_emails"
            " WHERE account = %s ORDER BY requested_at DESC, token_id DESC", (account,)).fetchall()
        if any(r[2] == "sent" and (token_id is None or r[0] == token_id) for r in rows):
            return rows
        if time.monotonic() > deadline:
            sys.exit("no email sent in %d s: %s" % (seconds, rows))
        time.sleep(0.2)


def newest_link(outbox, address, path):
    """The token and code of the newest email to `address` whose link goes to `path` (the
    user's click): the code of the link, else the one the text shows for typing (or None)."""
    for name in sorted(glob.glob(os.path.join(outbox, "*.eml")), reverse=True):
        with open(name, "rb") as f:
            msg = email.message_from_binary_file(f, policy=email.policy.default)
        if msg["To"].addresses[0].addr_spec != address:
            continue
        text = msg.get_body(("plain",)).get_content()
        m = re.search(re.escape(path) + r"\?token=([A-Za-z0-9_-]+)(?:&code=([0-9]+))?", text)
        if m:
            typed = re.findall(r"(?<![0-9])[0-9]{5,12}(?![0-9])", re.sub(r"https?://\S+", " ", text))
            return m.group(1), m.group(2) or (typed[0] if typed else None)
    sys.exit("no email to %s with a link to %s in %s" % (address, path, outbox))


def expect(what, got, want):
    """Prints `what: got` and stops unless it is the answer the guide gives."""
    print("%s: %s" % (what, got))
    if got != want:
        sys.exit("%s: %s, not %s" % (what, got, want))


def ask(conn, account, action, address=None):
    """mailroom.request; the new token's id once its email is sent (the user waits for it)."""
    decision, token_id, _, reason = conn.execute(
        "SELECT decision, token_id, retry_at, reason FROM mailroom.request(%s, %s, %s)",
        (account, action, address)).fetchone()
    expect("request %s" % action, (decision, reason), ("queued", None))
    wait_sent(conn, account, token_id)
    return token_id


def consume(conn, token, code=None):
    return conn.execute("SELECT outcome, account, action FROM mailroom.consume(%s, %s)",
                        (token, code)).fetchone()


def main():
    address = os.environ.get("EXAMPLE_EMAIL", "ada@example.test")
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        # 1. Sign up: the trigger queues the activation email.
        (account,) = conn.execute(
            "INSERT INTO mailroom.accounts (email, login, locale) VALUES (%s, %s, %s) RETURNING id",
            (address, "ada", "en")).fetchone()
        print("signed up: account", account)
        wait_sent(conn, account)

        # 2. "Didn't get the email?": send it again.
        decision, token_id, retry_at, reason = conn.execute(
            "SELECT decision, token_id, retry_at, reason FROM mailroom.request(%s, %s)",
            (account, "activation")).fetchone()
        print("resend:", decision, token_id, retry_at, reason)
        if decision != "queued":
            sys.exit("resend not queued: %s %s" % (decision, reason))

        # 3. What happened to each email of the account.
        for row in wait_sent(conn, account, token_id):
            print("email:", *row)

        # 4. The user clicks the newest email's button: its GET verifies the token, the POST
        # consumes it.
        outbox = os.environ["EXAMPLE_OUTBOX"]
        keys = parse_keys(os.environ["MAILROOM_SECRET_KEY"], os.environ.get("MAILROOM_VERIFY_KEYS"))
        token, _ = newest_link(outbox, address, "/activate")
        verify_token(token, "activation", keys)
        expect("consume", consume(conn, token), ("ok", account, "activation"))
        expect("consume again", consume(conn, token)[0], "consumed")
        (status,) = conn.execute("SELECT status FROM mailroom.accounts WHERE id = %s",
                                 (account,)).fetchone()
        expect("account status", status, "active")

        # 5. Password recovery: the GET checks the spelling only (the code is not typed yet);
        # the POST hands the typed code to mailroom.consume, a wrong one too (it is counted).
        ask(conn, account, "password_recovery")
        token, code = newest_link(outbox, address, "/recover")
        expect("recovery link well formed", well_formed(token, "password_recovery"), True)
        wrong = "%05d" % ((int(code) + 1) % 100000)
        try:
            verify_token(token, "password_recovery", keys, wrong)
            sys.exit("a wrong code verified")
        except InvalidToken:
            pass  # the signature says so, and still the database counts it
        expect("recovery with a wrong code", consume(conn, token, wrong)[0], "wrong_code")
        verify_token(token, "password_recovery", keys, code)
        expect("recovery", consume(conn, token, code), ("ok", account, "password_recovery"))

        # 6. A sign-in code read on a phone, typed on the laptop: the account and the code.
        ask(conn, account, "login_code")
        token, code = newest_link(outbox, address, "/action/login_code")
        verify_token(token, "login_code", keys, code)
        sign_in = "SELECT outcome, account, action FROM mailroom.consume_code(%s, %s, %s)"
        expect("sign-in code", conn.execute(sign_in, (account, "login_code", code)).fetchone(),
               ("ok", account, "login_code"))
        expect("sign-in code again", conn.execute(sign_in, (account, "login_code", code)).fetchone()[0],
               "consumed")

        # 7. An address change: the confirmation goes to the new address.
        new_address = "new." + address
        ask(conn, account, "email_change", new_address)
        token, _ = newest_link(outbox, new_address, "/action/email_change")
        verify_token(token, "email_change", keys)
        expect("email change", consume(conn, token), ("ok", account, "email_change"))
        (now,) = conn.execute("SELECT email FROM mailroom.accounts WHERE id = %s",
                              (account,)).fetchone()
        expect("account email", now, new_address)
    print("every answer as the guide says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
