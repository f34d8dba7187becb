#!/usr/bin/python3
"""A reference front end for mailroom's links, on Python's standard library only.

The shape that survives corporate link scanners (docs/integration.md, section 5):

  GET/HEAD /activate?token=T   checks the signature, shows a button; changes nothing
  GET/HEAD /recover?token=T    checks the token's spelling, shows a code field and a button
  GET/HEAD /action/NAME?token=T[&code=C]
                               every other action (login_code, email_change, invitation, the
                               application's own): checks the signature (with the link's code
                               when it has one), shows a button, or a code field when the
                               action's code is not in the link; changes nothing
  POST /activate, /recover, /action/NAME
                               (token, code) -> mailroom.consume: the click
  GET/HEAD /login              sign in with a code typed on this device (the email was read on
                               another): a form for the address and the code
  POST /login                  (address, code) -> mailroom.consume_code
  POST /login/send             (address) -> mailroom.request(account, 'login_code')
  POST /resend                 (account, action[, address]) -> mailroom.request
  GET /emails?account=N        the rows of mailroom.account_emails, and a button for each email
                               mailroom.request would accept for the account (action_rules)
  GET /static/style.css        the pages' one resource

It reaches PostgreSQL through `psql` as the application's role; every value travels as a psql
variable (`-v token=...`, used as :'token'), never inside the SQL text. Configuration:

  MAILROOM_FRONTEND_ADDRESS       host:port to listen on (default 127.0.0.1:8080)
  MAILROOM_FRONTEND_DATABASE_URL  the application's role's PostgreSQL URL (required)
  MAILROOM_SECRET_KEY             the collector's signing key, 64 hex characters (required)
  MAILROOM_VERIFY_KEYS            older keys, comma-separated (after a rotation)

A reference, not a hardened production service: /resend and /emails take an account id from
anyone who can reach them (a real application puts them behind the user's session).
"""

import csv
import html
import io
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HERE = os.path.dirname(os.path.abspath(__file__))
# The verifier is used from its place in the repository (clients/python), not copied here.
sys.path.insert(0, os.path.join(_HERE, "..", "..", "clients", "python"))
from mailroom_verify import (InvalidToken, KeyConfigError, action_domain,  # noqa: E402
                             parse_keys, verify_token, well_formed)

MAX_BODY = 4096          # a form of a token and a code is far smaller
PSQL_TIMEOUT_SECONDS = 10
STYLE_PATH = os.path.join(_HERE, "static", "style.css")

# The link paths of the two first actions; every other action's link is /action/NAME.
LINKS = {"/activate": "activation", "/recover": "password_recovery"}
# Each action's page: its title and what the user does (without, then with a code field).
PAGES = {
    "activation": ("Activate your account", "Press the button to activate your account."),
    "password_recovery": ("Choose a new password",
                          "Type the 5-digit code from the email, then press the button."),
    "login_code": ("Sign in", "Press the button to sign in.",
                   "Type the sign-in code from the email, then press the button."),
    "email_change": ("Confirm your new email address",
                     "Press the button to confirm your new email address."),
    "invitation": ("Accept the invitation",
                   "Press the button to accept the invitation and activate your account."),
}
DEFAULT_PAGE = ("Continue", "Press the button to continue.",
                "Type the code from the email, then press the button.")
# The built-in actions whose tokens sign no code: a code is never asked for.
NO_CODE = frozenset(("activation", "email_change", "invitation"))
# The built-in notices: their emails carry no token, so they have no link.
NOTICES = frozenset(("password_changed", "email_changed", "account_suspended",
                     "account_reactivated"))
# The account an address belongs to (the application's own table; its exact spelling first),
# for the sign-in code typed on another device (mailroom.consume_code) and its request: an
# unknown address and a wrong code look alike.
ACCOUNT_BY_ADDRESS = (
    "(SELECT a.id FROM mailroom.accounts a"
    "  WHERE lower(trim(a.email)) = lower(trim(:'address'))"
    "  ORDER BY a.email = trim(:'address') DESC, a.id LIMIT 1) a")
CONSUME_CODE_SQL = ("SELECT c.outcome, c.account, c.action FROM " + ACCOUNT_BY_ADDRESS +
                    " CROSS JOIN LATERAL mailroom.consume_code(a.id, 'login_code', :'code') c")
REQUEST_CODE_SQL = ("SELECT r.decision FROM " + ACCOUNT_BY_ADDRESS +
                    " CROSS JOIN LATERAL mailroom.request(a.id, 'login_code') r")


def link_action(path):
    """The action a link path is for ("/recover" -> password_recovery, "/action/login_code" ->
    login_code), or None for a path that is not a link's."""
    if path in LINKS:
        return LINKS[path]
    if path.startswith("/action/"):
        name = path[len("/action/"):]
        try:
            action_domain(name)
        except ValueError:
            return None
        # The two first actions' links are /activate and /recover; notices have none.
        if name not in LINKS.values() and name not in NOTICES:
            return name
    return None


def page_words(action):
    words = PAGES.get(action, DEFAULT_PAGE)
    return words[0], words[1], words[2] if len(words) > 2 else words[1]


def code_pattern(action):
    """The code field's HTML pattern and length: 5 digits for a recovery, else 5 to 12."""
    return ("[0-9]{5}", 5) if action == "password_recovery" else ("[0-9]{5,12}", 12)

# What /emails offers to send again: the actions with a link whose required account status is
# the account's (mailroom.action_rules, which mailroom.request checks the same way), so that an
# active account is not offered its activation. email_change needs a new address (a form of its
# own); notices are the application's to request when their event happens.
OFFERS_SQL = ("SELECT r.name FROM mailroom.accounts a JOIN mailroom.action_rules r"
              "   ON r.carries_secret AND (r.account_status IS NULL OR r.account_status = a.status)"
              " WHERE a.id = :'account'::bigint AND r.name <> 'email_change'"
              " ORDER BY r.name = 'activation' DESC, r.name")
RESEND_LABELS = {
    "activation": "Send the activation email again",
    "password_recovery": "Send a password recovery email",
    "login_code": "Send a sign-in code",
    "invitation": "Send the invitation again",
}

# mailroom.consume's outcomes, as the user reads them (title, message).
OUTCOMES = {
    ("ok", "activation"): ("Your account is active", "Your account is active: you can sign in."),
    ("ok", "password_recovery"): (
        "Choose a new password",
        "The code is right: choose a new password. (Your application lets the user set it here,"
        " in the session the click has started.)"),
    ("ok", "login_code"): (
        "You are signed in",
        "You are signed in. (Your application starts the user's session here.)"),
    ("ok", "email_change"): (
        "Your new email address is confirmed",
        "Your new email address is confirmed: your account's emails go to it from now on. A"
        " notice went to the old address."),
    ("ok", "invitation"): (
        "Welcome",
        "You accepted the invitation: your account is active. (Your application lets the user"
        " choose a password here.)"),
    "ok": ("Done", "Done: the link was used."),
    "invalid": ("This link is not valid", "This link is not valid. Ask for a new email."),
    "expired": ("This link has expired", "This link has expired. Ask for a new email."),
    "superseded": ("A newer email replaced this one",
                   "A newer email replaced this one: use the link in the latest email."),
    "consumed": ("This link was already used", "This link was already used."),
    "wrong_code": ("Wrong code", "The code is not the one in the email. Try again."),
    "locked": ("Too many wrong codes",
               "Too many wrong codes were given for this link: it no longer works. Ask for a"
               " new email."),
    "account_state": ("Nothing to do", "This account cannot do that now (it is already active,"
                      " or suspended)."),
    "address_taken": ("This address is taken",
                      "Another account uses this email address now: the change was not made."),
}

RESEND_DECISIONS = {
    "queued": "A new email is on its way.",
    "rate_limited": "Too many emails were asked for: try again after {retry_at}.",
    "suppressed": "We cannot reach this address ({reason}).",
    "refused": "Nothing was sent ({reason}).",
}


class ConfigError(Exception):
    """A configuration variable that cannot be used; the message names it, never a secret."""


class Config:
    def __init__(self, host, port, database_url, keys, psql):
        self.host, self.port = host, port
        self.database_url, self.keys, self.psql = database_url, keys, psql


def load_config(env):
    """Reads and checks every variable once; raises ConfigError naming the first bad one."""
    address = env.get("MAILROOM_FRONTEND_ADDRESS") or "127.0.0.1:8080"
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError("MAILROOM_FRONTEND_ADDRESS: expected host:port, got %r" % address)
    url = env.get("MAILROOM_FRONTEND_DATABASE_URL") or ""
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("MAILROOM_FRONTEND_DATABASE_URL: required, a postgresql:// URL of the"
                          " application's role")
    if not env.get("MAILROOM_SECRET_KEY"):
        raise ConfigError("MAILROOM_SECRET_KEY: required but not set")
    try:
        keys = parse_keys(env["MAILROOM_SECRET_KEY"], env.get("MAILROOM_VERIFY_KEYS"))
    except KeyConfigError as e:
        raise ConfigError(str(e))
    psql = shutil.which("psql")
    if not psql:
        raise ConfigError("PATH: psql (PostgreSQL's client) not found")
    return Config(host.strip("[]"), int(port), url, keys, psql)


class DatabaseError(Exception):
    """psql failed: the database is down, the role lacks a right, or a statement failed."""


class Database:
    """Runs one statement per call through psql, in autocommit, as the URL's role."""

    def __init__(self, url, psql):
        # The password goes to psql through its environment, not its command line (which any
        # local user can read in ps).
        parts = urllib.parse.urlsplit(url)
        self.env = dict(os.environ)
        if parts.password is not None:
            self.env["PGPASSWORD"] = urllib.parse.unquote(parts.password)
            netloc = parts.netloc.rsplit("@", 1)
            user = netloc[0].split(":", 1)[0]
            url = urllib.parse.urlunsplit(parts._replace(netloc=user + "@" + netloc[1]))
        self.url, self.psql = url, psql

    def query(self, sql, **variables):
        """The rows (lists of strings, NULL as None) of `sql`, which names each variable as
        :'name'. psql reads the statement from stdin: -c would not substitute variables."""
        args = [self.psql, "-X", "-q", "-t", "--csv", "-v", "ON_ERROR_STOP=1",
                "-P", "null=\\N", "-d", self.url]
        for name, value in variables.items():
            args += ["-v", "%s=%s" % (name, value)]
        try:
            done = subprocess.run(args, input=sql, capture_output=True, text=True,
                                  env=self.env, timeout=PSQL_TIMEOUT_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DatabaseError(type(e).__name__)
        if done.returncode != 0:
            # psql's message may quote a statement's values: keep only its first words.
            first = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[0]
            raise DatabaseError(first.split(":", 2)[-1].strip()[:120])
        rows = list(csv.reader(io.StringIO(done.stdout)))
        return [[None if v == "\\N" else v for v in row] for row in rows]


def page(title, body, outcome=None):
    """A whole page: escaped title, the caller's (already escaped) body, one local stylesheet.
    `outcome` is written as data-outcome for tests and monitoring."""
    marker = ' data-outcome="%s"' % html.escape(outcome) if outcome else ""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n"
            "<meta name=\"robots\" content=\"noindex\">\n"
            "<title>%s</title>\n<link rel=\"stylesheet\" href=\"/static/style.css\">\n"
            "</head><body><main%s>\n<h1>%s</h1>\n%s\n</main></body></html>\n"
            % (html.escape(title), marker, html.escape(title), body))


def paragraph(text, css=None):
    cls = ' class="%s"' % css if css else ""
    return "<p%s>%s</p>" % (cls, html.escape(text))


class Handler(BaseHTTPRequestHandler):
    server_version = "mailroom-frontend"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = 15  # a client that stalls mid-request is dropped

    # Set by main().
    config = None
    db = None
    style = b""

    # --- plumbing -------------------------------------------------------------------------

    def log_message(self, fmt, *args):  # replaced by log_request's one line
        pass

    def log_request(self, code="-", size="-"):
        # The path only: a link's query holds its token, and a form its code.
        path = urllib.parse.urlsplit(self.path).path
        sys.stderr.write("%s level=info msg=request method=%s path=%s status=%s\n"
                         % (time.strftime("%Y-%m-%dT%H:%M:%S"), self.command,
                            urllib.parse.quote(path[:100]), code))

    def log(self, msg, **fields):
        extra = "".join(" %s=%s" % (k, v) for k, v in fields.items())
        sys.stderr.write("%s level=warning msg=%s%s\n"
                         % (time.strftime("%Y-%m-%dT%H:%M:%S"), msg, extra))

    def send(self, status, body, content_type="text/html; charset=utf-8", head=False,
             cache="no-store"):
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", cache)
        # The token is in the page's URL: never send it on as a Referer.
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy",
                         "default-src 'none'; style-src 'self'; form-action 'self';"
                         " frame-ancestors 'none'; base-uri 'none'")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Robots-Tag", "noindex")
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def query_params(self):
        return urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query,
                                     keep_blank_values=True)

    def form(self):
        """The POSTed form's fields (first value of each), or None when it cannot be read."""
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            return None
        if not 0 <= length <= MAX_BODY:
            return None
        raw = self.rfile.read(length).decode("utf-8", "replace")
        return {k: v[0] for k, v in urllib.parse.parse_qs(raw, keep_blank_values=True).items()}

    # --- routes ---------------------------------------------------------------------------

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head=False):
        path = urllib.parse.urlsplit(self.path).path
        if link_action(path):
            return self.link_page(path, head)
        if path == "/login":
            return self.send(200, page("Sign in with a code", self.login_forms()), head=head)
        if path == "/static/style.css":
            return self.send(200, self.style, "text/css; charset=utf-8", head,
                             cache="public, max-age=3600")
        if path == "/emails":
            return self.emails_page(head)
        if path == "/":
            return self.send(200, page("mailroom front end", paragraph(
                "Open the link of an email from us, or sign in with a code.")
                + '\n<p><a href="/login">Sign in with a code</a></p>'), head=head)
        self.send(404, page("Not found", paragraph("There is no such page.")), head=head)

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        fields = self.form()
        if fields is None:
            self.close_connection = True
            return self.send(413, page("Bad request", paragraph("The form is too large.")))
        if link_action(path):
            return self.click(path, fields)
        if path == "/login":
            return self.login(fields)
        if path == "/login/send":
            return self.send_login_code(fields)
        if path == "/resend":
            return self.resend(fields)
        self.send(404, page("Not found", paragraph("There is no such page.")))

    # GET and HEAD of a link: look, never touch. A scanner's GET, HEAD or resource fetch must
    # leave the token as it was, so this path never calls the database.
    def link_page(self, path, head):
        action = link_action(path)
        params = self.query_params()
        token = (params.get("token") or [""])[0]
        code = (params.get("code") or [""])[0]
        state = self.link_state(token, action, code)
        if state == "invalid":
            return self.send(404, page("This link is not valid", paragraph(
                "This link is not valid. Check that you copied all of it, or ask for a new"
                " email."), outcome="invalid"), head=head)
        title, prompt, code_prompt = page_words(action)
        if state == "complete":
            # The link's code (a sign-in link carries it) goes on with the click.
            fields = self.hidden("code", code) if code else ""
        else:
            prompt, fields = code_prompt, self.code_field(action)
        body = ('%s\n<form method="post" action="%s">\n%s%s'
                '<button type="submit">%s</button>\n</form>'
                % (paragraph(prompt), path, self.hidden("token", token), fields,
                   html.escape(title)))
        self.send(200, page(title, body, outcome="confirm"), head=head)

    @staticmethod
    def hidden(name, value):
        return '<input type="hidden" name="%s" value="%s">\n' % (name, html.escape(value, quote=True))

    @staticmethod
    def code_field(action):
        pattern, length = code_pattern(action)
        return ('<label for="code">Code from the email</label>\n'
                '<input type="text" id="code" name="code" inputmode="numeric"'
                ' pattern="%s" maxlength="%d" autocomplete="one-time-code" required>\n'
                % (pattern, length))

    def link_state(self, token, action, code):
        """The GET's check, without the database: "complete" (the signature checked whole, with
        the link's code if it has one), "needs_code" (the signature covers a code the user has
        not typed yet: only the token's spelling can be checked here; the signature is checked
        with the code on the POST) or "invalid"."""
        try:
            if action in NO_CODE:
                verify_token(token, action, self.config.keys)
                return "complete"
            if action != "password_recovery":
                verify_token(token, action, self.config.keys, code or None)
                return "complete"
        except InvalidToken as e:
            # Without a code, a mismatch may be an action whose code is still to be typed.
            if code or action in NO_CODE or e.kind == "malformed":
                return "invalid"
        return "needs_code" if self.spelled_right(token, action) else "invalid"

    def spelled_right(self, token, action):
        """Whether the token is the signer's spelling of 64 bytes: the verifier's spelling
        check, which needs no key and no code (the user has not typed it yet)."""
        return well_formed(token, action)

    # POST of a link's form: the user's click.
    def click(self, path, fields):
        action = link_action(path)
        token, code = fields.get("token", ""), fields.get("code", "").strip()
        if action in NO_CODE:
            code = ""  # these actions' forms have no code
            try:
                verify_token(token, action, self.config.keys)
            except InvalidToken:
                return self.outcome_page("invalid", action)
        else:
            try:
                verify_token(token, action, self.config.keys, code or None)
            except InvalidToken as e:
                if not self.spelled_right(token, action):
                    return self.outcome_page("invalid", action)
                if e.kind == "malformed" or not code:
                    # Not a code mailroom sends, or none: ask again, count nothing.
                    return self.send(200, page("Wrong code", paragraph(
                        "Type the code as the email shows it.", "refusal")
                        + self.retry_form(path, token, action), outcome="wrong_code"))
                # A mismatch is a wrong code (or a forged token): the database must see it,
                # so that wrong codes are counted and lock the token, rather than being
                # refused here where an attacker could try every code for free.
        try:
            rows = self.db.query(
                "SELECT outcome, account, action FROM mailroom.consume(:'token', NULLIF(:'code', ''))",
                token=token, code=code)
        except DatabaseError as e:
            self.log("consume_failed", error=urllib.parse.quote(str(e)))
            return self.send(503, page("Try again", paragraph(
                "We could not check this link just now. Try again in a minute.")))
        outcome = rows[0][0] if rows and rows[0] else "invalid"
        extra = self.retry_form(path, token, action) if outcome == "wrong_code" else ""
        self.outcome_page(outcome, rows[0][2] if rows and rows[0][2] else action, extra)

    def retry_form(self, path, token, action):
        pattern, length = code_pattern(action)
        return ('<form method="post" action="%s">\n%s'
                '<label for="code">Code from the email</label>\n'
                '<input type="text" id="code" name="code" inputmode="numeric" maxlength="%d"'
                ' required>\n<button type="submit">Try again</button>\n</form>'
                % (path, self.hidden("token", token), length))

    # The sign-in code typed on this device while the email was read on another: the address
    # says which account, the code is checked against its pending sign-in token (wrong codes
    # counted and locking it, as for a link).
    def login_forms(self, address=""):
        value = html.escape(address, quote=True)
        return ('<form method="post" action="/login">\n'
                '<label for="address">Email address</label>\n'
                '<input type="email" id="address" name="address" value="%s" maxlength="254"'
                ' autocomplete="email" required>\n'
                '<label for="code">Sign-in code from the email</label>\n'
                '<input type="text" id="code" name="code" inputmode="numeric"'
                ' pattern="[0-9]{6,12}" maxlength="12" autocomplete="one-time-code" required>\n'
                '<button type="submit">Sign in</button>\n</form>\n'
                '<form method="post" action="/login/send">\n'
                '<label for="send-address">No code yet?</label>\n'
                '<input type="email" id="send-address" name="address" value="%s" maxlength="254"'
                ' autocomplete="email" required>\n'
                '<button type="submit">Email me a sign-in code</button>\n</form>'
                % (value, value))

    def login(self, fields):
        address, code = fields.get("address", "").strip(), fields.get("code", "").strip()
        if not address or len(address) > 254:
            return self.send(400, page("Bad request", paragraph("Give your email address.")))
        if not (6 <= len(code) <= 12 and all("0" <= c <= "9" for c in code)):
            # Not a code mailroom sends: ask again, count nothing.
            return self.send(200, page("Wrong code", paragraph(
                "The sign-in code has at least 6 digits: type it as the email shows it.",
                "refusal") + self.login_forms(address), outcome="wrong_code"))
        try:
            rows = self.db.query(CONSUME_CODE_SQL, address=address, code=code)
        except DatabaseError as e:
            self.log("consume_code_failed", error=urllib.parse.quote(str(e)))
            return self.send(503, page("Try again", paragraph(
                "We could not check this code just now. Try again in a minute.")))
        outcome = rows[0][0] if rows and rows[0] else "invalid"
        if outcome == "invalid":
            title, message = ("This code is not valid",
                              "This code is not valid for this address. Ask for a new one.")
            return self.send(200, page(title, paragraph(message, "refusal")
                                       + self.login_forms(address), outcome=outcome))
        extra = self.login_forms(address) if outcome == "wrong_code" else ""
        self.outcome_page(outcome, "login_code", extra)

    def send_login_code(self, fields):
        address = fields.get("address", "").strip()
        if not address or len(address) > 254:
            return self.send(400, page("Bad request", paragraph("Give your email address.")))
        try:
            rows = self.db.query(REQUEST_CODE_SQL, address=address)
        except DatabaseError as e:
            self.log("request_failed", error=urllib.parse.quote(str(e)))
            return self.send(503, page("Try again", paragraph("Try again in a minute.")))
        # The same page whatever happened, so that it does not tell which addresses have an
        # account (the decision is in mailroom.account_emails for the account's owner).
        self.log("login_code_requested", decision=(rows[0][0] if rows and rows[0] else "none"))
        self.send(200, page("Check your email", paragraph(
            "If an account has this address, a sign-in code is on its way to it.")
            + self.login_forms(address), outcome="requested"))

    def outcome_page(self, outcome, action, extra=""):
        title, message = OUTCOMES.get((outcome, action)) or OUTCOMES.get(outcome) or (
            "Something went wrong", "This link could not be used.")
        css = None if outcome == "ok" else "refusal"
        self.send(200, page(title, paragraph(message, css) + extra, outcome=outcome))

    # "Didn't get the email?": what happened to each email, and a button to send it again.
    def emails_page(self, head):
        account = (self.query_params().get("account") or [""])[0]
        if not account.isdigit() or len(account) > 18:
            return self.send(400, page("Bad request", paragraph(
                "account must be an account id")), head=head)
        try:
            rows = self.db.query(
                "SELECT token_id, action, requested_at, state, state_at, address, reason"
                "  FROM mailroom.account_emails WHERE account = :'account'::bigint"
                " ORDER BY requested_at DESC, token_id DESC NULLS FIRST LIMIT 50",
                account=account)
        except DatabaseError as e:
            self.log("account_emails_failed", error=urllib.parse.quote(str(e)))
            return self.send(503, page("Try again", paragraph("Try again in a minute.")),
                             head=head)
        heads = ("email", "action", "requested at", "state", "since", "address", "reason")
        table = "<table>\n<tr>%s</tr>\n" % "".join("<th>%s</th>" % h for h in heads)
        for row in rows:
            table += "<tr>%s</tr>\n" % "".join(
                "<td>%s</td>" % html.escape(v or "") for v in row)
        table += "</table>"
        if not rows:
            table = paragraph("No email for this account.")
        try:
            offers = [row[0] for row in self.db.query(OFFERS_SQL, account=account) if row]
        except DatabaseError as e:
            self.log("action_rules_failed", error=urllib.parse.quote(str(e)))
            offers = []
        resend = "".join(
            '<form method="post" action="/resend">\n'
            '<input type="hidden" name="account" value="%s">\n'
            '<input type="hidden" name="action" value="%s">\n'
            '<button type="submit">%s</button>\n</form>\n'
            % (html.escape(account, quote=True), html.escape(name, quote=True),
               html.escape(RESEND_LABELS.get(name, "Send the %s email again" % name)))
            for name in offers)
        self.send(200, page("Your emails", table + "\n" + resend), head=head)

    def resend(self, fields):
        account, action = fields.get("account", ""), fields.get("action", "activation")
        address = fields.get("address", "").strip()  # email_change: the new address
        try:
            action_domain(action)
            known = True
        except ValueError:
            known = False
        if not account.isdigit() or len(account) > 18 or not known or len(address) > 254:
            return self.send(400, page("Bad request", paragraph(
                "account must be an account id, action an action's name (such as activation,"
                " password_recovery, login_code or email_change with an address)")))
        try:
            rows = self.db.query(
                "SELECT decision, token_id, retry_at, reason"
                "  FROM mailroom.request(:'account'::bigint, :'action', NULLIF(:'address', ''))",
                account=account, action=action, address=address)
        except DatabaseError as e:
            self.log("request_failed", error=urllib.parse.quote(str(e)))
            return self.send(503, page("Try again", paragraph("Try again in a minute.")))
        decision, _, retry_at, reason = (rows[0] + [None] * 4)[:4] if rows else (
            "refused", None, None, "no answer")
        text = RESEND_DECISIONS.get(decision, "Nothing was sent.").format(
            retry_at=retry_at or "a while", reason=reason or "no reason given")
        css = None if decision == "queued" else "refusal"
        link = '<p><a href="/emails?account=%s">Your emails</a></p>' % html.escape(account)
        self.send(200, page("Send it again", paragraph(text, css) + link, outcome=decision))


def _stop(signum, frame):
    raise KeyboardInterrupt  # SIGTERM ends serve_forever like Ctrl-C


def main(env=None):
    env = os.environ if env is None else env
    try:
        config = load_config(env)
    except ConfigError as e:
        print("frontend: %s" % e, file=sys.stderr)
        return 2
    try:
        with open(STYLE_PATH, "rb") as f:
            Handler.style = f.read()
    except OSError as e:
        print("frontend: %s: %s" % (STYLE_PATH, e.strerror), file=sys.stderr)
        return 2
    Handler.config = config
    Handler.db = Database(config.database_url, config.psql)
    try:
        server = ThreadingHTTPServer((config.host, config.port), Handler)
    except OSError as e:
        print("frontend: MAILROOM_FRONTEND_ADDRESS: cannot listen on %s:%d: %s"
              % (config.host, config.port, e.strerror), file=sys.stderr)
        return 2
    server.daemon_threads = True
    host, port = server.server_address[:2]
    sys.stderr.write("%s level=info msg=listening address=%s:%d\n"
                     % (time.strftime("%Y-%m-%dT%H:%M:%S"), host, port))
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
