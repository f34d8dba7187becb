"""The whole stack for Python-driven tests: a throwaway PostgreSQL 15, the roles of
docs/integration.md section 1, `collector migrate`, a collector and a sender with the file
transport. Used by the documentation's block test and the driver examples' tests.

Everything binds 127.0.0.1 on free ports, lives in one temp dir and is stopped by stop().
"""

import email
import email.policy
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

PGBIN = "/usr/lib/postgresql/15/bin"
SENDER_TOKEN = "py-stack-sender-token-0123456789abcdef"


def runfiles():
    """The workspace's runfiles root (Bazel's TEST_SRCDIR/mailroom, or bazel-bin's by hand)."""
    src = os.environ.get("TEST_SRCDIR")
    if src:
        return os.path.join(src, "mailroom")
    raise RuntimeError("run me with bazel test (TEST_SRCDIR is not set)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, seconds=60, procs=()):
    """Polls `predicate` until it returns something true, which it returns; raises after
    `seconds`, or at once when one of `procs` (name, Popen) has exited."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        for name, proc in procs:
            if proc.poll() is not None:
                raise RuntimeError("%s exited (%s) while waiting for %s" % (name, proc.returncode, what))
        time.sleep(0.05)
    raise RuntimeError("timed out after %d s waiting for %s" % (seconds, what))


class Stack:
    """A throwaway PostgreSQL and, on request, mailroom's services, all under `work`."""

    def __init__(self, prefix="py-stack."):
        self.work = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        os.chmod(self.work, 0o755)
        self.root = os.getuid() == 0
        self.procs = []
        self.pg_dir = None
        self.port = None
        self.key = os.urandom(32).hex()
        self.outbox = os.path.join(self.work, "outbox")
        os.mkdir(self.outbox)
        run = runfiles()
        self.collector_bin = os.path.join(run, "collector/collector")
        self.sender_bin = os.path.join(run, "sender/sender")

    # PostgreSQL ---------------------------------------------------------------------------

    def _as_pg(self, *args):
        cmd = (["runuser", "-u", "postgres", "--"] if self.root else []) + list(args)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=self.work)

    def start_postgres(self):
        """initdb + start; the superuser is `postgres`, every login is trusted (passwords are
        accepted and ignored); the database `app` exists, empty."""
        self.pg_dir = os.path.join(self.work, "pg")
        os.mkdir(self.pg_dir)
        if self.root:
            shutil.chown(self.pg_dir, "postgres", "postgres")
        self.port = free_port()
        self._as_pg(PGBIN + "/initdb", "-D", self.pg_dir, "-U", "postgres", "-A", "trust", "-E",
                    "UTF8", "--locale=C.UTF-8", "--no-sync")
        self._as_pg(PGBIN + "/pg_ctl", "-D", self.pg_dir, "-l", self.pg_dir + "/log", "-w", "-o",
                    "-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off" % (self.port, self.pg_dir),
                    "start")
        self.psql("postgres", "CREATE DATABASE app", db="postgres")

    def url(self, role, db="app"):
        return "postgresql://%s@127.0.0.1:%d/%s" % (role, self.port, db)

    def psql(self, role, sql, db="app"):
        """Runs `sql` as `role`; the rows as lists of strings. Raises with psql's error."""
        args = ["psql", "-X", "-q", "-t", "-A", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d",
                self.url(role, db)]
        done = subprocess.run(args, input=sql, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError("psql as %s: %s" % (role, done.stderr.strip()))
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    def install(self):
        """Section 1 of docs/integration.md: the two roles, the migrations as mailroom_owner,
        the application's interface for `app`."""
        self.psql("postgres", "CREATE ROLE mailroom_owner LOGIN;"
                              " GRANT CONNECT, CREATE ON DATABASE app TO mailroom_owner;"
                              " CREATE ROLE app LOGIN; GRANT CONNECT ON DATABASE app TO app;")
        subprocess.run([self.collector_bin, "migrate"], check=True, capture_output=True,
                       env=dict(self.clean_env(), MAILROOM_DATABASE_URL=self.url("mailroom_owner")))
        self.psql("mailroom_owner", "SELECT mailroom.grant_application('app')")

    # Services -----------------------------------------------------------------------------

    @staticmethod
    def clean_env():
        return {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}

    def start_process(self, name, args, env, cwd=None):
        log = open(os.path.join(self.work, name + ".log"), "w")
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd or self.work,
                                start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def log(self, name):
        try:
            with open(os.path.join(self.work, name + ".log")) as f:
                return f.read()
        except OSError:
            return ""

    def start_services(self, link_base="http://localhost:8080"):
        """A collector (as mailroom_owner, default batching) and a sender (file transport into
        `outbox`), as a user would start them; returns once the collector listens."""
        grpc_port = free_port()
        self.start_process("collector", [self.collector_bin], dict(
            self.clean_env(), MAILROOM_DATABASE_URL=self.url("mailroom_owner"),
            MAILROOM_SECRET_KEY=self.key,
            MAILROOM_SUBSCRIBER_TOKENS=SENDER_TOKEN + "@mailroom:sender",
            MAILROOM_LISTEN_ADDRESS="127.0.0.1:%d" % grpc_port, MAILROOM_METRICS_ADDRESS="off"))
        self.start_process("sender", [self.sender_bin], dict(
            self.clean_env(), MAILROOM_COLLECTOR_ADDRESS="127.0.0.1:%d" % grpc_port,
            MAILROOM_COLLECTOR_TOKEN=SENDER_TOKEN, MAILROOM_TRANSPORT="file",
            MAILROOM_FILE_DIR=self.outbox, MAILROOM_FROM="Example <no-reply@example.test>",
            MAILROOM_PRODUCT_NAME="Example", MAILROOM_LINK_BASE_URL=link_base,
            MAILROOM_METRICS_ADDRESS="off", MAILROOM_HEALTH_ADDRESS="off"))
        wait_for("the collector to listen", lambda: _accepts(grpc_port), procs=self.procs)

    def emails(self):
        """Every email the sender wrote, oldest first: (path, Email)."""
        out = []
        for path in sorted(glob.glob(os.path.join(self.outbox, "*.eml"))):
            out.append((path, Email(path)))
        return out

    def stop(self):
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.pg_dir:
            try:
                self._as_pg(PGBIN + "/pg_ctl", "-D", self.pg_dir, "-m", "immediate", "-w", "stop")
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.work, ignore_errors=True)


def _accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Email:
    """One delivered email: its recipient, its action (from its link), token and code."""

    def __init__(self, path):
        with open(path, "rb") as f:
            msg = email.message_from_binary_file(f, policy=email.policy.default)
        self.to = msg["To"].addresses[0].addr_spec
        text = msg.get_body(("plain",)).get_content()
        self.text = text
        self.action = self.token = self.code = None
        m = re.search(r"https?://[^\s<>\"']+", text)
        if m:
            link = urllib.parse.urlsplit(m.group(0))
            query = urllib.parse.parse_qs(link.query)
            self.token = (query.get("token") or [None])[0]
            self.code = (query.get("code") or [None])[0]
            if link.path.endswith("/activate"):
                self.action = "activation"
            elif link.path.endswith("/recover"):
                self.action = "password_recovery"
            elif "/action/" in link.path:
                self.action = link.path.rsplit("/action/", 1)[1]
        if self.code is None and self.token:
            # A code typed by the user (a recovery's): the text's number outside its links.
            codes = re.findall(r"(?<!\d)(\d{5,12})(?!\d)", re.sub(r"https?://\S+", " ", text))
            self.code = codes[0] if codes else None
