#!/usr/bin/python3
"""Runs every SQL and shell block of docs/integration.md, then of examples/frontend/README.md,
in order, against a fresh PostgreSQL 15 and the real services, as the role each names.

Conventions (the line before a fenced block, an HTML comment, invisible when rendered):

  <!-- not run: REASON -->           the block is not run (counted as skipped, with REASON)
  <!-- run by clients/ tests -->     a verifier block that the tests of clients/ run
  <!-- as ROLE: $1 = EXPR, $2 = EXPR | $1 = EXPR -->
                                     a ```sql block, run statement by statement as ROLE
                                     (`postgres`, the superuser; `mailroom_owner`; `app`); the
                                     parameter lists, separated by `|`, belong to the block's
                                     statements in order (a statement without parameters needs
                                     none); each `$N` of a statement is replaced by its EXPR,
                                     an SQL expression, in parentheses
  <!-- run until: TEXT -->           a ```sh block that starts a server: it runs until TEXT
                                     appears in its output, then it is stopped

In EXPR, `{id}` is the id the last `RETURNING id` gave, `{token:ACTION}` and `{code:ACTION}`
the token and code of the newest email of ACTION that the sender wrote since that action was
last requested (the test waits for it), as SQL literals. Before a statement that asks for an
email (a signup, `mailroom.request`), the test waits until every email asked for before it has
been delivered, as a user waits for an email before asking for another.

Shell blocks (```sh, ```bash) run with `bash -euo pipefail`, as written, in a directory that
holds `key.hex` (the collector's signing key) and the repository's `examples/` and `clients/`,
with `collector` and `sender` on PATH; `@db/` in them is the test's server (127.0.0.1 and its
port), every role logs in without a password (a `PASSWORD '...'` is accepted and ignored), and
psql stops at the first error (PSQLRC sets ON_ERROR_STOP), so a failing statement fails the
block. After the block that runs `collector migrate`, the test starts a collector (as
`mailroom_owner`, default settings) and a sender (file transport), as section 1 describes.

Blocks in other languages (python, js, go, ...) are skipped with a note unless marked as run by
clients/'s tests. A ```sql or ```sh block with no comment fails the test: every block either
runs or says why not. Prints "N blocks run, M skipped"; exits 1 when any block failed.
"""

import os
import re
import signal
import subprocess
import sys
import time

RUN = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mailroom")
sys.path.insert(0, os.path.join(RUN, "testing"))
import py_stack  # noqa: E402

DOCS = ["docs/integration.md", "examples/frontend/README.md"]
SHELL = ("sh", "bash", "shell")
WAIT = 60

FENCE = re.compile(r"^```(\S*)\s*$")
COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->\s*$")


def blocks(path):
    """(line, language, directive or None, text) of every fenced block of `path`."""
    with open(path) as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1).lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        directive = None
        if start > 0:
            c = COMMENT.match(lines[start - 1])
            if c:
                directive = c.group(1)
        out.append((start + 1, lang, directive, "\n".join(lines[start + 1:j]) + "\n"))
        i = j + 1
    return out


def split_top(text, sep):
    """Splits on `sep` outside quotes and parentheses."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def statements(sql):
    """The statements of a block: each ends with `;` at the end of a line (a comment may
    follow)."""
    out, cur = [], []
    for line in sql.splitlines():
        cur.append(line)
        if re.search(r";\s*(--.*)?$", line):
            out.append("\n".join(cur).strip())
            cur = []
    rest = "\n".join(cur).strip()
    if rest:
        out.append(rest)
    return [s for s in out if s and not all(l.strip().startswith("--") for l in s.splitlines())]


def literal(value):
    return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"


class Runner:
    def __init__(self, stack):
        self.stack = stack
        self.last_id = None
        self.requested = {}  # action -> set of email paths present when it was last requested
        self.services = False
        self.ran = self.skipped = 0
        self.failed = []
        self.home = os.path.join(stack.work, "home")
        os.mkdir(self.home)
        for name in ("examples", "clients"):
            os.symlink(os.path.join(RUN, name), os.path.join(self.home, name))
        with open(os.path.join(self.home, "key.hex"), "w") as f:
            f.write(stack.key + "\n")
        self.psqlrc = os.path.join(stack.work, "psqlrc")
        with open(self.psqlrc, "w") as f:
            f.write("\\set ON_ERROR_STOP on\n")
        bins = os.path.join(stack.work, "bin")
        os.mkdir(bins)
        os.symlink(stack.collector_bin, os.path.join(bins, "collector"))
        os.symlink(stack.sender_bin, os.path.join(bins, "sender"))
        self.env = dict(stack.clean_env(), PATH=bins + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                        PSQLRC=self.psqlrc, HOME=self.home,
                        MAILROOM_FRONTEND_ADDRESS="127.0.0.1:%d" % py_stack.free_port())

    # Placeholders ---------------------------------------------------------------------------

    def email_of(self, action):
        seen = self.requested.get(action, set())

        def newest():
            fresh = [e for p, e in self.stack.emails() if p not in seen and e.action == action]
            return fresh[-1] if fresh else None
        return py_stack.wait_for("an email of %s" % action, newest, WAIT, self.stack.procs)

    def expand(self, expr):
        def one(m):
            kind, action = m.group(1), m.group(2)
            if kind == "id":
                if self.last_id is None:
                    raise RuntimeError("{id} before any RETURNING id")
                return literal(self.last_id)
            e = self.email_of(action)
            return literal(e.token if kind == "token" else e.code)
        return re.sub(r"\{(id|token|code)(?::([a-z][a-z0-9_]*))?\}", one, expr)

    def settled(self):
        (n,), = self.stack.psql("mailroom_owner", """
            SELECT (SELECT count(*) FROM mailroom.account_emails
                     WHERE state IN ('queued', 'sending'))
                 + (SELECT count(*) FROM mailroom.accounts a WHERE a.status = 'provisioned'
                       AND NOT EXISTS (SELECT 1 FROM mailroom.account_emails e
                                        WHERE e.account = a.id))""")
        return n == "0"

    def note_requests(self, stmt):
        requests = re.findall(r"mailroom\.request\([^,]+,\s*'([a-z][a-z0-9_]*)'", stmt)
        signup = re.search(r"INSERT INTO mailroom\.accounts", stmt) and "'invited'" not in stmt
        if not (requests or signup):
            return
        # As a user who waits for an email before asking for another: what was requested
        # before is delivered first, so the newest email of an action is this request's.
        py_stack.wait_for("the emails requested before to be delivered", self.settled, WAIT,
                          self.stack.procs)
        present = {p for p, _ in self.stack.emails()}
        for action in requests:
            self.requested[action] = present
        if signup:
            self.requested["activation"] = present

    # Blocks ---------------------------------------------------------------------------------

    def sql_block(self, directive, text):
        m = re.match(r"as ([a-z_][a-z0-9_]*)\s*(?::\s*(.*))?$", directive)
        if not m:
            raise RuntimeError("not a directive this test knows: <!-- %s -->" % directive)
        role, params = m.group(1), m.group(2)
        stmts = statements(text)
        lists = split_top(params, "|") if params else []
        with_params = [s for s in stmts if re.search(r"\$\d", s)]
        if len(lists) != len(with_params):
            raise RuntimeError("%d statements with parameters, %d parameter lists"
                               % (len(with_params), len(lists)))
        lists = iter(lists)
        for stmt in stmts:
            values = {}
            if re.search(r"\$\d", stmt):
                for item in split_top(next(lists), ","):
                    k, _, v = item.partition("=")
                    values[k.strip()] = self.expand(v.strip())
            sql = re.sub(r"\$(\d+)", lambda n: "(%s)" % values["$" + n.group(1)], stmt)
            self.note_requests(stmt)
            rows = self.stack.psql(role, sql)
            print("  as %s: %s\n    -> %s" % (role, " ".join(sql.split()), rows), flush=True)
            if re.search(r"RETURNING id\b", stmt) and rows:
                self.last_id = rows[0][0]

    def sh_block(self, directive, text):
        script = text.replace("@db/", "@127.0.0.1:%d/" % self.stack.port)
        until = None
        if directive:
            m = re.match(r"run until: (.+)$", directive)
            if not m:
                raise RuntimeError("not a directive this test knows: <!-- %s -->" % directive)
            until = m.group(1)
        args = ["bash", "-euo", "pipefail", "-c", script]
        if until is None:
            done = subprocess.run(args, env=self.env, cwd=self.home, capture_output=True,
                                  text=True, timeout=300)
            print("  " + "\n  ".join((done.stdout + done.stderr).strip().splitlines()[-8:]),
                  flush=True)
            if done.returncode != 0:
                raise RuntimeError("exit %d" % done.returncode)
        else:
            name = "block-%d" % (self.ran + self.skipped)
            proc = self.stack.start_process(name, args, self.env, cwd=self.home)
            try:
                py_stack.wait_for("%r in its output" % until, lambda: until in self.stack.log(name),
                                  WAIT, [(name, proc)])
                print("  %r seen; stopped" % until, flush=True)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
        if "collector migrate" in text and not self.services:
            self.stack.start_services()
            self.services = True
            print("  (the test started a collector and a sender, file transport)", flush=True)

    def run(self, path):
        ran = skipped = 0
        for line, lang, directive, text in blocks(os.path.join(RUN, path)):
            where = "%s:%d (```%s)" % (path, line, lang)
            if directive and directive.startswith("not run:"):
                print("SKIP %s: %s" % (where, directive[len("not run:"):].strip()))
                skipped += 1
                continue
            if directive == "run by clients/ tests":
                print("SKIP %s: run by clients/'s tests" % where)
                skipped += 1
                continue
            if lang not in ("sql",) + SHELL:
                print("SKIP %s: a %s block (the verifiers' code, not run here)" % (where, lang or "plain"))
                skipped += 1
                continue
            if lang == "sql" and not directive:
                print("FAIL %s: a sql block needs <!-- as ROLE: ... --> or <!-- not run: ... -->" % where)
                self.failed.append(where)
                continue
            print("RUN  %s" % where, flush=True)
            try:
                (self.sql_block if lang == "sql" else self.sh_block)(directive, text)
                ran += 1
            except Exception as e:  # noqa: BLE001: report the block, go on with the next
                print("FAIL %s: %s" % (where, e), flush=True)
                self.failed.append(where)
        print("%s: %d blocks run, %d skipped" % (path, ran, skipped), flush=True)
        self.ran += ran
        self.skipped += skipped


def main():
    stack = py_stack.Stack(prefix="integration-blocks-test.")
    runner = None
    try:
        stack.start_postgres()
        runner = Runner(stack)
        for path in DOCS:
            runner.run(path)
    except Exception as e:  # noqa: BLE001
        print("FAIL setup: %s" % e)
        return 1
    finally:
        if runner and runner.failed:
            for name, _ in stack.procs:
                print("--- %s.log (last lines)\n%s" % (name, "\n".join(stack.log(name).splitlines()[-15:])))
        stack.stop()
    print("%d blocks run, %d skipped" % (runner.ran, runner.skipped))
    if runner.failed:
        print("%d blocks failed: %s" % (len(runner.failed), ", ".join(runner.failed)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
