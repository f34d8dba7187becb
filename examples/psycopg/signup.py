#!/usr/bin/python3
"""mailroom from Python with psycopg 3: signup, resend, what happened, consume.

Every call is schema-qualified (mailroom.request, not request) and every value is a parameter
bound by the driver (%s), never part of the statement's text. Each statement runs in
autocommit: mailroom.consume's outcome (a wrong code too) is committed whatever comes next.

Environment:
  DATABASE_URL     the application's role (SELECT mailroom.grant_application('app'))
  EXAMPLE_EMAIL    the address to sign up (default ada@example.test)
  EXAMPLE_OUTBOX   the sender's MAILROOM_FILE_DIR (file transport): stands in for the user's
                   mailbox; the newest activation email to the address is the one "clicked"
"""

import email
import email.policy
import glob
import os
import re
import sys
import time

import psycopg


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


def newest_activation_token(outbox, address):
    """The token of the newest activation email to `address` (the user's click)."""
    for path in sorted(glob.glob(os.path.join(outbox, "*.eml")), reverse=True):
        with open(path, "rb") as f:
            msg = email.message_from_binary_file(f, policy=email.policy.default)
        if msg["To"].addresses[0].addr_spec != address:
            continue
        m = re.search(r"/activate\?token=([A-Za-z0-9_-]+)", msg.get_body(("plain",)).get_content())
        if m:
            return m.group(1)
    sys.exit("no activation email to %s in %s" % (address, outbox))


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

        # 4. The user clicks the newest email's button: consume its token.
        token = newest_activation_token(os.environ["EXAMPLE_OUTBOX"], address)
        outcome, acct, action = conn.execute(
            "SELECT outcome, account, action FROM mailroom.consume(%s, %s)", (token, None)).fetchone()
        print("consume:", outcome, acct, action)
        again, _, _ = conn.execute(
            "SELECT outcome, account, action FROM mailroom.consume(%s, %s)", (token, None)).fetchone()
        print("consume again:", again)
        (status,) = conn.execute("SELECT status FROM mailroom.accounts WHERE id = %s",
                                 (account,)).fetchone()
        print("account status:", status)
        if (outcome, again, status) != ("ok", "consumed", "active"):
            sys.exit("unexpected: %s, %s, %s" % (outcome, again, status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
