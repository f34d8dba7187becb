#!/usr/bin/python3
"""The link-scanner test: the reference front end against the real stack.

A throwaway PostgreSQL, `collector migrate`, an application role with exactly
mailroom.grant_application's rights, a collector and a sender (file transport, links pointing at
the front end), one account per built-in template of activation and password recovery (every
locale of sender/render/templates/). For every link of every delivered email (text and HTML
parts) it plays a corporate link scanner: GET, HEAD, a GET that follows redirects and loads the
page's resources. Then no token may be consumed and no account changed. Then the real clicks
(POST, with the email's code for a recovery) succeed once and say "consumed" the second time.

The links of every other action (/action/NAME: login_code with and without its code in the
link, email_change, invitation, two actions of an application's own) are scanned the same way
with tokens the test signs itself, and their clicks reach mailroom.consume. The sign-in code
typed on another device (/login) is refused without a database call when it is not a code; when
the database has mailroom.consume_code and every action (mailroom.actions), a sign-in code and
an address change are requested, delivered, scanned and used end to end.

Everything binds 127.0.0.1 and is stopped on exit. Runs under `bazel test` (sh_test) or by hand
after `bazel build //examples/frontend:scanner_test`.
"""

import base64
import email
import email.policy
import glob
import hashlib
import hmac
import html.parser
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

RUN = os.path.join(os.environ.get("TEST_SRCDIR")
                   or os.path.join(os.getcwd(), "bazel-bin/examples/frontend/scanner_test.runfiles"),
                   "mailroom")
COLLECTOR = os.path.join(RUN, "collector/collector")
SENDER = os.path.join(RUN, "sender/sender")
FRONTEND = os.path.join(RUN, "examples/frontend/frontend.py")
TEMPLATES = os.path.join(RUN, "sender/render/templates")
PGBIN = "/usr/lib/postgresql/15/bin"
PYTHON = "/usr/bin/python3"
WAIT_SECONDS = 60

failures = []


def check(ok, what, detail=""):
    print("%s %s%s" % ("PASS" if ok else "FAIL", what, "" if ok else ": %s" % detail), flush=True)
    if not ok:
        failures.append(what)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, seconds=WAIT_SECONDS, alive=()):
    """Polls `predicate` until it is true; fails (raises) after `seconds` or when one of the
    `alive` processes exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        for name, proc in alive:
            if proc.poll() is not None:
                raise RuntimeError("%s exited (%s) while waiting for %s" % (name, proc.returncode, what))
        time.sleep(0.05)
    raise RuntimeError("timed out after %d s waiting for %s" % (seconds, what))


class Stack:
    """PostgreSQL, collector, sender and front end in a temp dir; stop() undoes everything."""

    def __init__(self):
        self.work = tempfile.mkdtemp(prefix="frontend-scanner-test.", dir="/tmp")
        os.chmod(self.work, 0o755)
        self.procs = []
        self.pg_started = False
        self.root = os.getuid() == 0

    def as_pg(self, *args):
        cmd = (["runuser", "-u", "postgres", "--"] if self.root else []) + list(args)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=self.work)

    def start_postgres(self):
        pg = os.path.join(self.work, "pg")
        os.mkdir(pg)
        if self.root:
            shutil.chown(pg, "postgres", "postgres")
        port = free_port()
        self.as_pg(PGBIN + "/initdb", "-D", pg, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                   "--locale=C.UTF-8", "--no-sync")
        self.as_pg(PGBIN + "/pg_ctl", "-D", pg, "-l", pg + "/log", "-w", "-o",
                   "-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off" % (port, pg), "start")
        self.pg_started = True
        self.owner_url = "postgresql://postgres@127.0.0.1:%d/postgres" % port
        self.app_url = "postgresql://app@127.0.0.1:%d/postgres" % port

    def start(self, name, args, env):
        log = open(os.path.join(self.work, name + ".log"), "w")
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.work)
        self.procs.append((name, proc))
        return proc

    def log(self, name):
        with open(os.path.join(self.work, name + ".log")) as f:
            return f.read()

    def stop(self):
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.pg_started:
            try:
                self.as_pg(PGBIN + "/pg_ctl", "-D", os.path.join(self.work, "pg"), "-m",
                           "immediate", "-w", "stop")
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.work, ignore_errors=True)


def psql(url, sql, **variables):
    """Rows of `sql` (psql, variables as :'name'), as lists of strings."""
    args = ["psql", "-X", "-q", "-t", "-A", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d", url]
    for k, v in variables.items():
        args += ["-v", "%s=%s" % (k, v)]
    out = subprocess.run(args, input=sql, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def builtin_templates():
    """(action, locale or None) for every built-in template set, from sender/render/templates/."""
    sets = []
    for path in sorted(glob.glob(os.path.join(TEMPLATES, "*.subject"))):
        parts = os.path.basename(path).split(".")[:-1]
        sets.append((parts[0], parts[1] if len(parts) > 1 else None))
    return sets


class Resources(html.parser.HTMLParser):
    """What a scanner that renders the page would load: stylesheets/icons, images, scripts,
    frames."""

    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])
        elif tag in ("img", "script", "iframe", "source") and a.get("src"):
            self.urls.append(a["src"])


class Forms(html.parser.HTMLParser):
    """The page's forms: method, action and the hidden inputs' values."""

    def __init__(self):
        super().__init__()
        self.forms = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms.append({"method": (a.get("method") or "get").lower(),
                               "action": a.get("action"), "fields": {}, "inputs": []})
        elif tag == "input" and self.forms:
            self.forms[-1]["inputs"].append(a.get("name"))
            if a.get("type") == "hidden":
                self.forms[-1]["fields"][a.get("name")] = a.get("value") or ""


def raw_request(method, url, body=None, headers=None):
    """One request, no redirect followed: (status, headers, body text)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        path = u.path + ("?" + u.query if u.query else "")
        hdrs = {"User-Agent": "Mozilla/5.0 (link-scanner test)"}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def outcome_of(body):
    m = re.search(r'data-outcome="([a-z_]+)"', body)
    return m.group(1) if m else None


def scan(url):
    """A link scanner on one link. Returns the page the GET showed."""
    status, headers, body = raw_request("GET", url)
    check(status == 200 and outcome_of(body) == "confirm", "scanner GET %s shows the confirm page"
          % urllib.parse.urlsplit(url).path, "status %d outcome %s" % (status, outcome_of(body)))
    check(headers.get("Referrer-Policy") == "no-referrer", "link page sends Referrer-Policy no-referrer")
    status, headers, head_body = raw_request("HEAD", url)
    check(status == 200 and head_body == "", "scanner HEAD: 200 without a body",
          "status %d, %d bytes" % (status, len(head_body)))
    # A scanner with a browser's habits: follows redirects, then loads every resource.
    req = urllib.request.Request(url, headers={"User-Agent": "Mozilla/5.0 (scanner; follows)"})
    with urllib.request.urlopen(req, timeout=10) as r:
        final, page = r.geturl(), r.read().decode("utf-8", "replace")
    parser = Resources()
    parser.feed(page)
    check(bool(parser.urls), "the page references a resource a scanner can load")
    for ref in parser.urls:
        res = urllib.parse.urljoin(final, ref)
        check(urllib.parse.urlsplit(res).netloc == urllib.parse.urlsplit(url).netloc,
              "page resource %s is local" % ref, res)
        with urllib.request.urlopen(res, timeout=10) as r:
            check(r.status == 200, "scanner loads %s" % ref)
        raw_request("HEAD", res)
    return body


def post_form(base, page, extra=None):
    """Submits the page's POST form as a user would: its hidden fields plus `extra`."""
    forms = Forms()
    forms.feed(page)
    posts = [f for f in forms.forms if f["method"] == "post"]
    if not check(len(posts) == 1, "the confirm page has one POST form", str(forms.forms)):
        return None, ""
    fields = dict(posts[0]["fields"])
    fields.update(extra or {})
    status, _, body = raw_request(
        "POST", urllib.parse.urljoin(base, posts[0]["action"]), urllib.parse.urlencode(fields),
        {"Content-Type": "application/x-www-form-urlencoded"})
    return status, body


def sign(key_hex, action, secret, code=""):
    """A token by the signing contract (docs/integration.md): what the collector would send."""
    domain = {"activation": b"/activate", "password_recovery": b"/recover"}.get(
        action, b"/action/" + action.encode() + b"/")
    mac = hmac.new(bytes.fromhex(key_hex), domain + secret + code.encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(secret + mac.digest()).rstrip(b"=").decode()


def has_inputs(page, names):
    forms = Forms()
    forms.feed(page)
    return any(set(names) <= set(f["inputs"]) for f in forms.forms if f["method"] == "post")


def links_and_code(msg):
    """The links of the text and HTML parts (each a set) and the 5-digit code of the text."""
    text = msg.get_body(("plain",)).get_content()
    html_part = msg.get_body(("html",)).get_content()
    text_links = set(re.findall(r"https?://[^\s<>\"']+", text))
    html_links = set(u.replace("&amp;", "&") for u in re.findall(r'href="([^"]+)"', html_part))
    # The code is the text's 5-digit number outside its links (whose port may have 5 digits).
    codes = set(re.findall(r"(?<!\d)(\d{5})(?!\d)", re.sub(r"https?://\S+", " ", text)))
    return text_links, html_links, codes


def main():
    for path in (COLLECTOR, SENDER, FRONTEND):
        if not os.path.exists(path):
            print("FAIL: %s missing (bazel build //examples/frontend:scanner_test)" % path)
            return 1
    stack = Stack()
    try:
        return run(stack)
    except Exception as e:  # a setup step or a wait failed: show the logs
        check(False, "the test ran to its end", "%s: %s" % (type(e).__name__, e))
        for name, _ in stack.procs:
            print("--- %s.log (last lines)\n%s" % (name, "\n".join(stack.log(name).splitlines()[-15:])))
        return 1
    finally:
        stack.stop()


def bad_config():
    """Each bad setting: exit 2 and a message naming the variable, never the key."""
    key = "ab" * 32
    good = {"MAILROOM_FRONTEND_DATABASE_URL": "postgresql://app@127.0.0.1:1/postgres",
            "MAILROOM_SECRET_KEY": key, "MAILROOM_FRONTEND_ADDRESS": "127.0.0.1:0",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    cases = [("MAILROOM_FRONTEND_DATABASE_URL", None), ("MAILROOM_FRONTEND_DATABASE_URL", "app"),
             ("MAILROOM_SECRET_KEY", None), ("MAILROOM_SECRET_KEY", key[:-2] + "zz"),
             ("MAILROOM_VERIFY_KEYS", key + ",12"), ("MAILROOM_FRONTEND_ADDRESS", "8080"),
             ("MAILROOM_FRONTEND_ADDRESS", "127.0.0.1:99999")]
    for name, value in cases:
        env = dict(good)
        if value is None:
            env.pop(name)
        else:
            env[name] = value
        done = subprocess.run([PYTHON, FRONTEND], env=env, capture_output=True, text=True,
                              timeout=10)
        check(done.returncode == 2 and name.split()[0] in done.stderr and key[:16] not in done.stderr,
              "front end refuses %s=%s" % (name, (value or "")[:12]), "exit %d: %s" % (done.returncode, done.stderr))


def run(stack):
    bad_config()
    stack.start_postgres()
    owner, app = stack.owner_url, stack.app_url
    env = dict(os.environ, MAILROOM_DATABASE_URL=owner)
    subprocess.run([COLLECTOR, "migrate"], env=env, check=True, capture_output=True)
    psql(owner, "CREATE ROLE app LOGIN; SELECT mailroom.grant_application('app');")

    key = os.urandom(32).hex()
    token = "scanner-test-sender-token-0123456789"
    grpc_port, fe_port = free_port(), free_port()
    base = "http://127.0.0.1:%d" % fe_port
    collector = stack.start("collector", [COLLECTOR], dict(
        env, MAILROOM_SECRET_KEY=key, MAILROOM_SUBSCRIBER_TOKENS=token + "@mailroom:sender",
        MAILROOM_LISTEN_ADDRESS="127.0.0.1:%d" % grpc_port, MAILROOM_METRICS_ADDRESS="off",
        MAILROOM_BATCH_TIMEOUT="0"))
    outbox = os.path.join(stack.work, "outbox")
    os.mkdir(outbox)
    sender_env = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    sender = stack.start("sender", [SENDER], dict(
        sender_env, MAILROOM_COLLECTOR_ADDRESS="127.0.0.1:%d" % grpc_port,
        MAILROOM_COLLECTOR_TOKEN=token, MAILROOM_TRANSPORT="file", MAILROOM_FILE_DIR=outbox,
        MAILROOM_FROM="Example <no-reply@example.test>", MAILROOM_PRODUCT_NAME="Example",
        MAILROOM_LINK_BASE_URL=base, MAILROOM_METRICS_ADDRESS="off",
        MAILROOM_HEALTH_ADDRESS="off"))
    fe_env = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    frontend = stack.start("frontend", [PYTHON, FRONTEND], dict(
        fe_env, MAILROOM_FRONTEND_ADDRESS="127.0.0.1:%d" % fe_port,
        MAILROOM_FRONTEND_DATABASE_URL=app, MAILROOM_SECRET_KEY=key))
    alive = [("collector", collector), ("sender", sender), ("frontend", frontend)]
    wait_for("the front end to listen", lambda: "msg=listening" in stack.log("frontend"),
             alive=alive)

    # One account per built-in template set of activation and recovery. Signups and requests
    # go through the application's role; an active account is imported as the owner
    # (activated_at).
    every = builtin_templates()
    check(len(every) == 18 and len({a for a, _ in every}) == 9
          and all((a, "de") in every and (a, None) in every for a, _ in every),
          "built-in templates: 9 actions in 2 locales", every)
    sets = [(a, locale) for a, locale in every if a in ("activation", "password_recovery")]
    check(len(sets) >= 4, "built-in templates of activation and recovery found: %s" % sets)
    expected = {}  # address -> (action, locale)
    for i, (action, locale) in enumerate(sets):
        address = "user%d@example.test" % i
        expected[address] = (action, locale)
        if action == "activation":
            psql(app, "INSERT INTO mailroom.accounts (email, login, locale)"
                      " VALUES (:'email', :'login', NULLIF(:'locale', ''))",
                 email=address, login="user %d" % i, locale=locale or "")
        else:
            (acct,), = psql(owner, "INSERT INTO mailroom.accounts (email, login, locale, status,"
                                   " activated_at) VALUES (:'email', :'login', NULLIF(:'locale', ''),"
                                   " 'active', extract(epoch FROM now())::bigint - 86400)"
                                   " RETURNING id",
                            email=address, login="user %d" % i, locale=locale or "")
            (decision,), = psql(app, "SELECT decision FROM mailroom.request(:'a'::bigint,"
                                     " 'password_recovery')", a=acct)
            check(decision == "queued", "recovery requested for %s" % address, decision)

    wait_for("%d emails" % len(sets),
             lambda: len(glob.glob(os.path.join(outbox, "*.eml"))) >= len(sets), alive=alive)
    emails = []
    for path in sorted(glob.glob(os.path.join(outbox, "*.eml"))):
        with open(path, "rb") as f:
            emails.append(email.message_from_binary_file(f, policy=email.policy.default))
    check(len(emails) == len(sets), "one email per template set", len(emails))

    state_sql = ("SELECT a.id, a.status, coalesce(a.activated_at::text, '-'),"
                 " coalesce(t.consumed_at::text, '-'), t.wrong_codes"
                 " FROM mailroom.accounts a JOIN mailroom.tokens t ON t.account = a.id"
                 " ORDER BY a.id, t.id")
    before = psql(owner, state_sql)

    # The scanner: every link of every email, from both parts.
    secrets = []  # tokens and codes, which the front end's log must never show
    clicks = []   # (address, action, url, page, code)
    subjects = set()
    for msg in emails:
        address = msg["To"].addresses[0].addr_spec
        action, locale = expected.get(address, (None, None))
        subjects.add(str(msg["Subject"]))
        text_links, html_links, codes = links_and_code(msg)
        links = text_links | html_links
        want_path = "/activate" if action == "activation" else "/recover"
        check(len(links) == 1 and text_links == html_links,
              "%s (%s, %s): one link, in the text and the HTML part" % (address, action, locale),
              "text %s html %s" % (text_links, html_links))
        code = None
        if action == "password_recovery":
            check(len(codes) == 1, "%s: the text part carries one 5-digit code" % address, codes)
            code = next(iter(codes), None)
            secrets.append(code)
        for url in sorted(links):
            u = urllib.parse.urlsplit(url)
            check(url.startswith(base + want_path + "?token="), "%s: link goes to %s" % (address, want_path), url)
            secrets.append(urllib.parse.parse_qs(u.query)["token"][0])
            page = scan(url)
            scan(url)  # scanners come back
            clicks.append((address, action, url, page, code))
    check(len(subjects) == len(sets), "every template set rendered its own subject", subjects)

    (consumed,), = psql(owner, "SELECT count(*) FROM mailroom.tokens WHERE consumed_at IS NOT NULL")
    check(consumed == "0", "no token consumed by the scanner", "%s consumed" % consumed)
    check(psql(owner, state_sql) == before, "accounts and tokens unchanged by the scanner")

    # Links that are not mailroom's: refused without a database call.
    tok = next(s for s in secrets if s and len(s) == 86)  # a token, not a code
    forged = tok[:40] + ("A" if tok[40] != "A" else "B") + tok[41:]
    for bad in ("/activate?token=" + forged, "/activate?token=nonsense", "/activate",
                "/recover?token=short", "/activate?token=" + tok + "%20",
                "/recover?token=" + tok + "%3D"):  # padded: not the signer's one spelling
        status, _, body = raw_request("GET", base + bad)
        check(status == 404 and outcome_of(body) == "invalid" and "not valid" in body,
              "GET %s: this link is not valid" % bad[:30], "status %d" % status)

    # The real clicks: POST each form once (a recovery first with a wrong code, counted and
    # refused), then again.
    for address, action, url, page, code in clicks:
        if action == "password_recovery":
            wrong = "%05d" % ((int(code) + 1) % 100000)
            _, body = post_form(base, page, {"code": wrong})
            check(outcome_of(body) == "wrong_code", "%s: a wrong code is refused" % address,
                  outcome_of(body))
            _, body = post_form(base, page, {"code": "12a"})
            check(outcome_of(body) == "wrong_code", "%s: a malformed code is refused" % address,
                  outcome_of(body))
        status, body = post_form(base, page, {"code": code} if code else None)
        check(outcome_of(body) == "ok", "%s: the click consumes (%s)" % (address, action),
              "status %s outcome %s" % (status, outcome_of(body)))
        words = "your account is active" if action == "activation" else "choose a new password"
        check(words in body.lower(), "%s: the page says %r" % (address, words))
        _, body = post_form(base, page, {"code": code} if code else None)
        check(outcome_of(body) == "consumed", "%s: a second click says consumed" % address,
              outcome_of(body))
        (status_now,), = psql(owner, "SELECT status FROM mailroom.accounts WHERE email = :'e'",
                              e=address)
        check(status_now == "active", "%s: the account is active" % address, status_now)
    (wrong_codes,), = psql(owner, "SELECT coalesce(sum(wrong_codes), 0) FROM mailroom.tokens")
    recoveries = sum(1 for a, _ in sets if a == "password_recovery")
    check(wrong_codes == str(recoveries), "every wrong code (and no malformed one) was counted",
          "%s counted for %d recoveries" % (wrong_codes, recoveries))

    # "Didn't get the email?" and "send it again".
    (acct,), = psql(app, "INSERT INTO mailroom.accounts (email, login) VALUES"
                         " ('late@example.test', 'late') RETURNING id")
    # The signup's activation is listed once the collector has made its token.
    wait_for("the signup's token", lambda: psql(
        app, "SELECT count(*) FROM mailroom.account_emails WHERE account = :'a'::bigint",
        a=acct) != [["0"]], alive=alive)
    status, _, body = raw_request("GET", base + "/emails?account=%s" % acct)
    check(status == 200 and "<table>" in body and "activation" in body,
          "GET /emails lists the account's emails", "status %d" % status)

    def offered(body):
        return sorted(re.findall(r'name="action" value="([a-z_0-9]+)"', body))

    check(offered(body) == ["activation"], "GET /emails offers a new account its activation only",
          offered(body))
    status, _, body = raw_request("POST", base + "/resend", "account=%s&action=activation" % acct,
                                  {"Content-Type": "application/x-www-form-urlencoded"})
    check(outcome_of(body) in ("queued", "rate_limited"), "POST /resend shows the decision",
          outcome_of(body))
    clicked = [a for a, action, *_ in clicks if action == "activation"][0]
    (done_acct,), = psql(owner, "SELECT id FROM mailroom.accounts WHERE email = :'e'", e=clicked)
    status, _, body = raw_request("GET", base + "/emails?account=%s" % done_acct)
    check("consumed" in body, "GET /emails shows the clicked email as consumed")
    check(offered(body) == ["login_code", "password_recovery"],
          "GET /emails offers an active account what mailroom.request accepts for it, no"
          " activation", offered(body))
    status, _, body = raw_request("POST", base + "/resend", "account=%s" % done_acct,
                                  {"Content-Type": "application/x-www-form-urlencoded"})
    check(outcome_of(body) == "refused", "resending an active account's activation is refused",
          outcome_of(body))
    status, _, body = raw_request("GET", base + "/emails?account=1%27%3B--")
    check(status == 400, "GET /emails refuses an account that is not a number", status)

    secrets += every_action_links(base, key, owner)
    secrets += sign_in_by_code(stack, base, app, owner, outbox, alive)

    log = stack.log("frontend")
    leaked = [s for s in secrets if s and s in log]
    check(not leaked and "msg=request" in log, "the front end's log holds no token or code",
          "%d secrets in the log" % len(leaked))

    print("%d checks failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


def every_action_links(base, key, owner):
    """/action/NAME for every other action, with tokens signed here: scanned like an email's
    links (nothing changes), forged ones refused without the database, the clicks answered by
    mailroom.consume (these secrets were never issued: invalid). Returns the secrets used."""
    (tokens_before,), = psql(owner, "SELECT count(*) FROM mailroom.tokens")
    secrets = []
    cases = [  # action, code in the link, code typed, the page's words
        ("login_code", "482913", None, "sign in"),
        ("login_code", None, "48291377", "sign-in code"),
        ("email_change", None, None, "confirm your new email address"),
        ("invitation", None, None, "accept the invitation"),
        ("welcome_gift", "902144", None, "continue"),
        ("team_invite", None, None, "continue"),
    ]
    for action, link_code, typed, words in cases:
        secret = os.urandom(32)
        token = sign(key, action, secret, link_code or typed or "")
        secrets += [token, link_code, typed]
        url = base + "/action/%s?token=%s" % (action, token)
        if link_code:
            url += "&code=" + link_code
        page = scan(url)
        check(words in page.lower(), "/action/%s: the page says %r" % (action, words))
        check(has_inputs(page, ["token", "code"]) == bool(link_code or typed),
              "/action/%s: the form carries a code only for a code-bearing link" % action)
        visible_code = bool(re.search(r'<input type="text" id="code"', page))
        check(visible_code == bool(typed), "/action/%s: a code field only when the link has no"
              " code and the action signs one" % action, page)
        status, body = post_form(base, page, {"code": typed} if typed else None)
        check(status == 200 and outcome_of(body) == "invalid",
              "/action/%s: the click reaches mailroom.consume (never issued: invalid)" % action,
              "status %s outcome %s" % (status, outcome_of(body)))
        # The same token as another action, with another code or with its MAC changed.
        other = "invitation" if action != "invitation" else "email_change"
        status, _, body = raw_request("GET", base + "/action/%s?token=%s" % (other, token))
        check(status == 404 and outcome_of(body) == "invalid",
              "/action/%s: its token as %s is not valid" % (action, other), "status %d" % status)
        if action not in NO_CODE_ACTIONS:
            status, _, body = raw_request("GET", base + "/action/%s?token=%s&code=000000"
                                          % (action, token))
            check(status == 404 and outcome_of(body) == "invalid",
                  "/action/%s: its token with another code is not valid" % action,
                  "status %d" % status)
        flipped = base + "/action/%s?token=%s%s" % (action, token[:-2] + "AA",
                                                     "&code=" + link_code if link_code else "")
        status, _, body = raw_request("GET", flipped)
        if link_code or action in NO_CODE_ACTIONS:
            check(status == 404 and outcome_of(body) == "invalid",
                  "/action/%s: a changed MAC is not valid" % action, "status %d" % status)
        else:  # its code is still to be typed: only the spelling can be checked on the GET
            check(status == 200 and 'id="code"' in body,
                  "/action/%s: a changed MAC still asks for the code" % action,
                  "status %d" % status)
    # A typed code that is not one: asked again, no database call.
    token = sign(key, "login_code", os.urandom(32), "123456")
    status, body = raw_request("POST", base + "/action/login_code",
                               urllib.parse.urlencode({"token": token, "code": "12a456"}),
                               {"Content-Type": "application/x-www-form-urlencoded"})[::2]
    check(outcome_of(body) == "wrong_code", "a malformed sign-in code is asked again",
          outcome_of(body))
    for bad in ("/action/Login_code?token=" + token, "/action/../activate?token=" + token,
                "/action/password_changed?token=" + token):
        status, _, body = raw_request("GET", base + bad)
        check(status == 404, "GET %s: not a link of this front end" % bad[:32], status)
    (tokens_after,), = psql(owner, "SELECT count(*) FROM mailroom.tokens")
    check(tokens_after == tokens_before, "the other actions' links changed no token")
    return secrets


NO_CODE_ACTIONS = ("activation", "email_change", "invitation")


def installed(owner, what):
    (found,), = psql(owner, "SELECT %s IS NOT NULL" % what)
    return found == "t"


def wait_for_email(outbox, to, seen, alive):
    """The first email to `to` in the outbox that is not in `seen` (paths)."""
    found = []

    def arrived():
        for path in sorted(glob.glob(os.path.join(outbox, "*.eml"))):
            if path in seen:
                continue
            with open(path, "rb") as f:
                msg = email.message_from_binary_file(f, policy=email.policy.default)
            if msg["To"].addresses[0].addr_spec == to:
                seen.add(path)
                found.append(msg)
                return True
        return False

    wait_for("an email to %s" % to, arrived, alive=alive)
    return found[0]


def sign_in_by_code(stack, base, app, owner, outbox, alive):
    """/login: the sign-in code typed on another device. Returns the secrets used."""
    status, _, body = raw_request("GET", base + "/login")
    check(status == 200 and has_inputs(body, ["address", "code"]) and has_inputs(body, ["address"]),
          "GET /login shows the code form and the send form", "status %d" % status)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for bad in ("12345", "12a456", "1234567890123"):
        status, _, body = raw_request("POST", base + "/login",
                                      urllib.parse.urlencode({"address": "x@example.test",
                                                              "code": bad}), form)
        check(outcome_of(body) == "wrong_code", "POST /login %s: asked again" % bad,
              outcome_of(body))
    status, _, body = raw_request("POST", base + "/login/send", "address=nobody%40example.test",
                                  form)
    check(status == 200 and outcome_of(body) == "requested",
          "POST /login/send: the same page for an unknown address", "status %d" % status)
    if not (installed(owner, "to_regprocedure('mailroom.consume_code(bigint,text,text)')")
            and installed(owner, "to_regclass('mailroom.actions')")):
        status, _, body = raw_request("POST", base + "/login", "address=x%40example.test&code=123456",
                                      form)
        check(status == 503, "POST /login without mailroom.consume_code: try again", status)
        print("NOTE the database has no mailroom.consume_code or mailroom.actions: the sign-in"
              " code and the address change are not tested end to end", flush=True)
        return []
    return sign_in_end_to_end(base, app, owner, outbox, alive, form)


def sign_in_end_to_end(base, app, owner, outbox, alive, form):
    """A sign-in code and an address change, each requested, delivered, scanned and used."""
    secrets, seen = [], set(glob.glob(os.path.join(outbox, "*.eml")))
    address = "signin@example.test"
    (acct,), = psql(owner, "INSERT INTO mailroom.accounts (email, login, status, activated_at)"
                           " VALUES (:'e', 'signin', 'active', extract(epoch FROM now())::bigint)"
                           " RETURNING id", e=address)
    status, _, body = raw_request("POST", base + "/login/send",
                                  urllib.parse.urlencode({"address": address.upper()}), form)
    check(outcome_of(body) == "requested", "POST /login/send for an account", outcome_of(body))
    msg = wait_for_email(outbox, address, seen, alive)
    text = msg.get_body(("plain",)).get_content()
    codes = re.findall(r"^ +(\d{6,12})$", text, re.M)
    links = re.findall(r"https?://[^\s<>\"']+", text)
    if not check(len(codes) == 1 and len(links) == 1, "the sign-in email: one code on a line of"
                 " its own, one link", text):
        return secrets
    code, link = codes[0], links[0]
    secrets += [code, urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)["token"][0]]
    check(link.startswith(base + "/action/login_code?token=") and link.endswith("&code=" + code),
          "the sign-in link carries its code", link)
    page = scan(link)  # the scanner signs nobody in
    wrong = "%0*d" % (len(code), (int(code) + 1) % 10 ** len(code))
    status, _, body = raw_request("POST", base + "/login",
                                  urllib.parse.urlencode({"address": address, "code": wrong}), form)
    check(outcome_of(body) == "wrong_code", "POST /login with a wrong code", outcome_of(body))
    (wrong_codes,), = psql(owner, "SELECT wrong_codes FROM mailroom.tokens WHERE account = :'a'"
                                  " AND action::text = 'login_code'", a=acct)
    check(wrong_codes == "1", "the wrong code was counted", wrong_codes)
    status, _, body = raw_request("POST", base + "/login",
                                  urllib.parse.urlencode({"address": address, "code": code}), form)
    check(outcome_of(body) == "ok" and "signed in" in body, "POST /login with the code signs in",
          outcome_of(body))
    _, body = post_form(base, page)
    check(outcome_of(body) == "consumed", "the sign-in link after the code: consumed",
          outcome_of(body))

    # An address change: the confirmation goes to the new address; its click changes it.
    new = "moved@example.test"
    (decision,), = psql(app, "SELECT decision FROM mailroom.request(:'a'::bigint, 'email_change',"
                             " :'n')", a=acct, n=new)
    check(decision == "queued", "email_change requested", decision)
    msg = wait_for_email(outbox, new, seen, alive)
    text = msg.get_body(("plain",)).get_content()
    links = re.findall(r"https?://[^\s<>\"']+", text)
    check(len(links) == 1 and links[0].startswith(base + "/action/email_change?token=")
          and new in text, "the confirmation names the new address and has one link", text)
    if links:
        secrets.append(urllib.parse.parse_qs(urllib.parse.urlsplit(links[0]).query)["token"][0])
        page = scan(links[0])
        (email_now,), = psql(owner, "SELECT email FROM mailroom.accounts WHERE id = :'a'", a=acct)
        check(email_now == address, "the scanner changed no address", email_now)
        _, body = post_form(base, page)
        check(outcome_of(body) == "ok", "the click confirms the new address", outcome_of(body))
        (email_now,), = psql(owner, "SELECT email FROM mailroom.accounts WHERE id = :'a'", a=acct)
        check(email_now == new, "the account's address is the new one", email_now)
        notice = wait_for_email(outbox, address, seen, alive)
        body = notice.get_body(("plain",)).get_content()
        check(not re.search(r"https?://", body), "the notice to the old address has no link",
              body)
    return secrets


if __name__ == "__main__":
    sys.exit(main())
