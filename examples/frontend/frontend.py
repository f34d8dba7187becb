#!/usr/bin/python3
"""A reference front end for mailroom's links, on Python's standard library only.

The shape that survives corporate link scanners (docs/integration.md, section 5):

  GET/HEAD /activate?token=T   checks the signature, shows a button; changes nothing
  GET/HEAD /recover?token=T    checks the token's spelling, shows a code field and a button
  POST /activate, /recover     (token, code) -> mailroom.consume: the click
  POST /resend                 (account, action) -> mailroom.request
  GET /emails?account=N        the rows of mailroom.account_emails
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
from mailroom_verify import InvalidToken, KeyConfigError, parse_keys, verify_token  # noqa: E402

MAX_BODY = 4096          # a form of a token and a code is far smaller
PSQL_TIMEOUT_SECONDS = 10
STYLE_PATH = os.path.join(_HERE, "static", "style.css")

# What each link page is for: the path, the action its token signs, the page's wording.
LINKS = {
    "/activate": ("activation", "Activate your account",
                  "Press the button to activate your account."),
    "/recover": ("password_recovery", "Choose a new password",
                 "Type the 5-digit code from the email, then press the button."),
}

# mailroom.consume's outcomes, as the user reads them (title, message).
OUTCOMES = {
    ("ok", "activation"): ("Your account is active", "Your account is active: you can sign in."),
    ("ok", "password_recovery"): (
        "Choose a new password",
        "The code is right: choose a new password. (Your application lets the user set it here,"
        " in the session the click has started.)"),
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
        if path in LINKS:
            return self.link_page(path, head)
        if path == "/static/style.css":
            return self.send(200, self.style, "text/css; charset=utf-8", head,
                             cache="public, max-age=3600")
        if path == "/emails":
            return self.emails_page(head)
        if path == "/":
            return self.send(200, page("mailroom front end", paragraph(
                "Open the link of an activation or password recovery email.")), head=head)
        self.send(404, page("Not found", paragraph("There is no such page.")), head=head)

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        fields = self.form()
        if fields is None:
            self.close_connection = True
            return self.send(413, page("Bad request", paragraph("The form is too large.")))
        if path in LINKS:
            return self.click(path, fields)
        if path == "/resend":
            return self.resend(fields)
        self.send(404, page("Not found", paragraph("There is no such page.")))

    # GET and HEAD of a link: look, never touch. A scanner's GET, HEAD or resource fetch must
    # leave the token as it was, so this path never calls the database.
    def link_page(self, path, head):
        action, title, prompt = LINKS[path]
        token = (self.query_params().get("token") or [""])[0]
        if not self.signature_plausible(token, action):
            return self.send(404, page("This link is not valid", paragraph(
                "This link is not valid. Check that you copied all of it, or ask for a new"
                " email."), outcome="invalid"), head=head)
        code_field = ""
        if action == "password_recovery":
            code_field = ('<label for="code">Code from the email</label>\n'
                          '<input type="text" id="code" name="code" inputmode="numeric"'
                          ' pattern="[0-9]{5}" maxlength="5" autocomplete="one-time-code"'
                          ' required>\n')
        body = ('%s\n<form method="post" action="%s">\n'
                '<input type="hidden" name="token" value="%s">\n%s'
                '<button type="submit">%s</button>\n</form>'
                % (paragraph(prompt), path, html.escape(token, quote=True), code_field,
                   html.escape(title)))
        self.send(200, page(title, body, outcome="confirm"), head=head)

    def signature_plausible(self, token, action):
        """The GET's check, without the database. An activation's signature is checked whole.
        A recovery's signature covers the code the user has not typed yet, so only the token's
        spelling can be checked here (the verifier refuses a malformed token before it looks
        at the code); its signature is checked with the code on the POST."""
        if action == "activation":
            try:
                verify_token(token, action, self.config.keys)
                return True
            except InvalidToken:
                return False
        try:
            verify_token(token, action, self.config.keys, "00000")
        except InvalidToken as e:
            return e.kind != "malformed"
        return True

    # POST of a link's form: the user's click.
    def click(self, path, fields):
        action = LINKS[path][0]
        token, code = fields.get("token", ""), fields.get("code", "").strip()
        if action == "activation":
            code = ""  # an activation's form has no code
            try:
                verify_token(token, action, self.config.keys)
            except InvalidToken:
                return self.outcome_page("invalid", action)
        else:
            try:
                verify_token(token, action, self.config.keys, code)
            except InvalidToken as e:
                if e.kind == "malformed":
                    if not self.signature_plausible(token, action):
                        return self.outcome_page("invalid", action)
                    # Not 5 digits: no code mailroom sends; ask again, count nothing.
                    return self.send(200, page("Wrong code", paragraph(
                        "The code has 5 digits: type it as the email shows it.", "refusal")
                        + self.retry_form(path, token), outcome="wrong_code"))
                # A mismatch is a wrong code (or a forged token): the database must see it,
                # so that wrong codes are counted and lock the token, rather than being
                # refused here where an attacker could try all 100,000 for free.
        try:
            rows = self.db.query(
                "SELECT outcome, account, action FROM mailroom.consume(:'token', NULLIF(:'code', ''))",
                token=token, code=code)
        except DatabaseError as e:
            self.log("consume_failed", error=urllib.parse.quote(str(e)))
            return self.send(503, page("Try again", paragraph(
                "We could not check this link just now. Try again in a minute.")))
        outcome = rows[0][0] if rows and rows[0] else "invalid"
        extra = self.retry_form(path, token) if outcome == "wrong_code" else ""
        self.outcome_page(outcome, rows[0][2] if rows and rows[0][2] else action, extra)

    def retry_form(self, path, token):
        return ('<form method="post" action="%s">\n'
                '<input type="hidden" name="token" value="%s">\n'
                '<label for="code">Code from the email</label>\n'
                '<input type="text" id="code" name="code" inputmode="numeric" maxlength="5"'
                ' required>\n<button type="submit">Try again</button>\n</form>'
                % (path, html.escape(token, quote=True)))

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
        resend = ('<form method="post" action="/resend">\n'
                  '<input type="hidden" name="account" value="%s">\n'
                  '<input type="hidden" name="action" value="activation">\n'
                  '<button type="submit">Send the activation email again</button>\n</form>'
                  % html.escape(account, quote=True))
        self.send(200, page("Your emails", table + "\n" + resend), head=head)

    def resend(self, fields):
        account, action = fields.get("account", ""), fields.get("action", "activation")
        if (not account.isdigit() or len(account) > 18
                or action not in ("activation", "password_recovery")):
            return self.send(400, page("Bad request", paragraph(
                "account must be an account id, action activation or password_recovery")))
        try:
            rows = self.db.query(
                "SELECT decision, token_id, retry_at, reason"
                "  FROM mailroom.request(:'account'::bigint, :'action')",
                account=account, action=action)
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
