#!/usr/bin/python3
"""Runs every SQL, shell, Python, JavaScript and Go block of docs/integration.md, then of
examples/frontend/README.md, in order, against a fresh PostgreSQL 15 and the real services, as
the role each names, and checks the answers each says the reader will see.

Conventions (the HTML comment that ends on the line before a fenced block, invisible when
rendered; it may span several lines):

  <!-- not run: REASON -->           the block is not run (counted as skipped, with REASON)
  <!-- as ROLE: $1 = EXPR, $2 = EXPR | $1 = EXPR; answers: ANSWER | ANSWER -->
                                     a ```sql block, run statement by statement as ROLE
                                     (`postgres`, the superuser; `mailroom_owner`; `app`); the
                                     parameter lists, separated by `|`, belong to the block's
                                     statements in order (a statement without parameters needs
                                     none); each `$N` of a statement is replaced by its EXPR,
                                     an SQL expression, in parentheses. `answers:` (optional)
                                     has one ANSWER per statement, every statement in order
  <!-- run with: NAME = VALUE, ... -->
                                     a ```python, ```js or ```go block, run as a program with
                                     each NAME bound to its VALUE, a string
  <!-- run until: TEXT -->           a ```sh block that starts a server: it runs until TEXT
                                     appears in its output, then it is stopped

In EXPR and VALUE, `{id}` is the id the last `RETURNING id` gave, `{token:ACTION}` and
`{code:ACTION}` the token and code of the newest email of ACTION that the sender wrote since
that action was last requested (the test waits for it), in EXPR as SQL literals. Before a
statement that asks for an email (a signup, `mailroom.request`), the test waits until every
email asked for before it has been delivered, as a user waits for an email before asking for
another.

An ANSWER is `-` (none checked) or rows separated by `;`, each `COLUMN = VALUE, ...`: some row
of the statement's result has each COLUMN's VALUE as psql prints it (`t`, `f`, `NULL`; `{id}`
as above). A statement that only reads (a SELECT that calls no `mailroom.request`, `consume`
or `consume_code`) is read again until its answer is seen, for up to 60 s, as a user reloads a
page while an email is on its way; any other statement is run once and must answer at once.

A code block runs on the system's /usr/bin/python3, node or go, with the collector's key in
MAILROOM_SECRET_KEY, the verifier of clients/ as its package (`mailroom_verify`, the npm
`mailroom-verify`, the Go module github.com/mailroom-dev/mailroom/clients/go), the block's
NAMEs bound before its first line (a Go block is the body of `main`, its package imported as
`mailroomverify`, `os` and `fmt` too), and a placeholder line whose comment is `show "TEXT"`
(Python's `...`, a comment alone in JavaScript and Go) printing TEXT. Besides `{token:…}` and `{code:…}`, a VALUE
may be `{signed:ACTION}` or `{signed:ACTION:CODE}`: a token the test signs with the collector's
key, for an action whose email the guide has not asked for yet or of the application's own, or
a quoted string. It runs twice: as bound, it must exit 0 and show nothing; with every token's
MAC changed, it must show a TEXT or fail naming InvalidToken (InvalidTokenError in
JavaScript).

Shell blocks (```sh, ```bash) run with `bash -euo pipefail`, as written, in a directory that
holds `key.hex` (the collector's signing key) and the repository's `examples/` and `clients/`,
with `collector` and `sender` on PATH; `@db/` in them is the test's server (127.0.0.1 and its
port), every role logs in without a password (a `PASSWORD '...'` is accepted and ignored), and
psql stops at the first error (PSQLRC sets ON_ERROR_STOP), so a failing statement fails the
block. After the block that runs `collector migrate`, the test starts a collector (as
`mailroom_owner`, default settings) and a sender (file transport), as section 1 describes.

A block of another language fails the test unless it is marked not run, and so does a ```sql,
```python, ```js or ```go block with no comment (a ```sh block with none runs as it is): every
block either runs or says why not. Prints "N blocks run, M skipped"; exits 1 when any block failed.
"""

import base64
import csv
import hashlib
import hmac
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys

RUN = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mailroom")
sys.path.insert(0, os.path.join(RUN, "testing"))
import py_stack  # noqa: E402

sys.path.insert(0, os.path.join(RUN, "clients/python"))
import mailroom_verify  # noqa: E402

DOCS = ["docs/integration.md", "examples/frontend/README.md"]
SHELL = ("sh", "bash", "shell")
CODE = {"python": "python", "py": "python", "js": "js", "javascript": "js", "go": "go"}
WAIT = 60

FENCE = re.compile(r"^```(\S*)\s*$")


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
        if start > 0 and lines[start - 1].rstrip().endswith("-->"):
            k = start - 1
            while k > 0 and "<!--" not in lines[k]:
                k -= 1
            text = " ".join(l.strip() for l in lines[k:start])
            if text.startswith("<!--"):
                directive = " ".join(text[4:-3].split())
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


def reads_only(stmt):
    """A SELECT that asks for no email and consumes nothing: it may be read again."""
    return (re.match(r"\s*SELECT\b", stmt, re.I) is not None
            and not re.search(r"mailroom\.(request|consume|consume_code)\s*\(", stmt))


def parse_answer(text):
    """`-` (None), or the rows of an ANSWER: [{column: value}], each row `C = V, ...`, `;` between."""
    if text.strip() == "-":
        return None
    rows = []
    for row in split_top(text, ";"):
        pairs = {}
        for item in split_top(row, ","):
            k, eq, v = item.partition("=")
            if not eq or not k.strip():
                raise RuntimeError("not COLUMN = VALUE: %r" % item)
            pairs[k.strip()] = v.strip()
        rows.append(pairs)
    return rows


def sign(key_hex, action, code=""):
    """A token of `action` signed with the collector's key, as the collector signs one."""
    secret = os.urandom(32)
    msg = mailroom_verify.action_domain(action) + secret + code.encode("ascii")
    mac = hmac.new(bytes.fromhex(key_hex), msg, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(secret + mac).decode("ascii").rstrip("=")


def forge(token):
    """The token with one character of its MAC changed (still the signer's spelling)."""
    i = 60
    return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]


SHOW = {"python": re.compile(r'^(\s*)\.\.\.\s*#\s*show "([^"]*)"\s*$', re.M),
        "go": re.compile(r'^(\s*)//\s*show "([^"]*)"\s*$', re.M),
        "js": re.compile(r'^(\s*)//\s*show "([^"]*)"\s*$', re.M)}
PRINT = {"python": 'print("%s")', "go": 'fmt.Println("%s")', "js": 'console.log("%s");'}
GO_MODULE = "github.com/mailroom-dev/mailroom/clients/go"


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
        self.code_dir = os.path.join(stack.work, "code")
        self.code_runs = 0

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

    def value_of(self, expr):
        """A code block's VALUE or an answer's: the string itself, not an SQL literal."""
        m = re.match(r"\{signed:([a-z][a-z0-9_]*)(?::([0-9]+))?\}$", expr)
        if m:
            return sign(self.stack.key, m.group(1), m.group(2) or "")
        m = re.match(r"\{(token|code):([a-z][a-z0-9_]*)\}$", expr)
        if m:
            e = self.email_of(m.group(2))
            return e.token if m.group(1) == "token" else e.code
        if expr == "{id}":
            return self.last_id
        if len(expr) >= 2 and expr[0] == expr[-1] and expr[0] in "'\"":
            return expr[1:-1]
        return expr

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

    def query(self, role, sql):
        """Runs `sql` as `role`: the rows as {column: value as psql prints it, NULL for null}."""
        done = subprocess.run(["psql", "-X", "-q", "--csv", "-P", "null=NULL", "-v",
                               "ON_ERROR_STOP=1", "-d", self.stack.url(role)],
                              input=sql, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError("psql as %s: %s" % (role, done.stderr.strip()))
        table = list(csv.reader(io.StringIO(done.stdout)))
        return [dict(zip(table[0], row)) for row in table[1:]] if table else []

    def unseen(self, answer, rows):
        """The rows of `answer` that no row of `rows` matches (raises for an unknown column)."""
        missing = []
        for want in answer:
            for col in want:
                if rows and col not in rows[0]:
                    raise RuntimeError("the answer names %r, not a column of %s" % (col, list(rows[0])))
            wanted = {c: str(self.value_of(v)) for c, v in want.items()}
            if not any(all(r.get(c) == v for c, v in wanted.items()) for r in rows):
                missing.append(wanted)
        return missing

    def sql_block(self, directive, text):
        m = re.match(r"as ([a-z_][a-z0-9_]*)\s*(?::\s*(.*?))?\s*(?:;\s*answers:\s*(.*))?$", directive)
        if not m:
            raise RuntimeError("not a directive this test knows: <!-- %s -->" % directive)
        role, params, answers = m.group(1), m.group(2), m.group(3)
        stmts = statements(text)
        lists = split_top(params, "|") if params else []
        with_params = [s for s in stmts if re.search(r"\$\d", s)]
        if len(lists) != len(with_params):
            raise RuntimeError("%d statements with parameters, %d parameter lists"
                               % (len(with_params), len(lists)))
        answers = [parse_answer(a) for a in split_top(answers, "|")] if answers else [None] * len(stmts)
        if len(answers) != len(stmts):
            raise RuntimeError("%d statements, %d answers" % (len(stmts), len(answers)))
        lists = iter(lists)
        for stmt, answer in zip(stmts, answers):
            values = {}
            if re.search(r"\$\d", stmt):
                for item in split_top(next(lists), ","):
                    k, _, v = item.partition("=")
                    values[k.strip()] = self.expand(v.strip())
            sql = re.sub(r"\$(\d+)", lambda n: "(%s)" % values["$" + n.group(1)], stmt)
            self.note_requests(stmt)
            got = [self.query(role, sql)]
            if answer and reads_only(stmt) and self.unseen(answer, got[0]):
                def seen():
                    got[0] = self.query(role, sql)
                    return not self.unseen(answer, got[0])
                try:
                    py_stack.wait_for("the answer %s" % answer, seen, WAIT, self.stack.procs)
                except RuntimeError:
                    pass  # the last rows are reported below
            rows = got[0]
            print("  as %s: %s\n    -> %s" % (role, " ".join(sql.split()),
                                           [list(r.values()) for r in rows]), flush=True)
            if answer:
                missing = self.unseen(answer, rows)
                if missing:
                    raise RuntimeError("answered %s, not %s" % (rows, missing))
                print("    answers as the guide says: %s" % "; ".join(
                    ", ".join("%s = %s" % kv for kv in want.items()) for want in answer), flush=True)
            if re.search(r"RETURNING id\b", stmt) and rows:
                self.last_id = rows[0]["id"]

    # Code blocks ------------------------------------------------------------------------------

    def program(self, lang, text, names):
        """Writes `text` as a program of `lang` with `names` bound; the command that runs it."""
        self.code_runs += 1
        body = SHOW[lang].sub(lambda m: m.group(1) + PRINT[lang] % m.group(2), text)
        d = os.path.join(self.code_dir, "%s-%d" % (lang, self.code_runs))
        os.makedirs(d)
        if lang == "python":
            bound = "".join("%s = %r\n" % kv for kv in names.items())
            path = os.path.join(d, "block.py")
            with open(path, "w") as f:
                f.write(bound + body)
            return ["/usr/bin/python3", path], {"PYTHONPATH": os.path.join(RUN, "clients/python")}
        if lang == "js":
            modules = os.path.join(self.code_dir, "node_modules")
            if not os.path.isdir(modules):
                shutil.copytree(os.path.join(workspace(), "clients/js"),
                                os.path.join(modules, "mailroom-verify"))
            bound = "".join("const %s = %s;\n" % (k, json.dumps(v)) for k, v in names.items())
            path = os.path.join(self.code_dir, "block-%d.mjs" % self.code_runs)
            with open(path, "w") as f:
                f.write(bound + body)
            return ["node", path], {}
        module = os.path.join(self.code_dir, "mailroomverify")
        if not os.path.isdir(module):
            shutil.copytree(os.path.join(workspace(), "clients/go"), module)
        with open(os.path.join(d, "go.mod"), "w") as f:
            f.write("module example.com/block\n\ngo 1.19\n\nrequire %s v0.0.0\n\nreplace %s => %s\n"
                    % (GO_MODULE, GO_MODULE, module))
        bound = "".join("\t%s := %s\n\t_ = %s\n" % (k, json.dumps(v), k) for k, v in names.items())
        indented = "".join("\t" + l + "\n" if l.strip() else "\n" for l in body.splitlines())
        with open(os.path.join(d, "main.go"), "w") as f:
            f.write('package main\n\nimport (\n\t"fmt"\n\t"os"\n\n\tmailroomverify "%s"\n)\n\n'
                    "var _, _ = fmt.Sprint, os.Args\n\nfunc main() {\n%s%s}\n"
                    % (GO_MODULE, bound, indented))
        env = self.go_env()
        done = subprocess.run(["go", "build", "-o", "block", "."], cwd=d, env=env,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError("go build: %s" % done.stderr.strip())
        return [os.path.join(d, "block")], {}

    def go_env(self):
        return dict(self.env, GOCACHE=os.path.join(self.stack.work, "gocache"),
                    GOPATH=os.path.join(self.stack.work, "gopath"), GOFLAGS="-mod=mod",
                    GOTOOLCHAIN="local", GOPROXY="off", GO111MODULE="on")

    def code_block(self, lang, directive, text):
        m = re.match(r"run with:\s*(.*)$", directive or "")
        if not m:
            raise RuntimeError("a %s block needs <!-- run with: NAME = VALUE, ... --> or "
                               "<!-- not run: ... -->" % lang)
        exprs = {}
        for item in split_top(m.group(1), ","):
            k, eq, v = item.partition("=")
            if not eq or not re.match(r"[A-Za-z_][A-Za-z0-9_]*$", k.strip()):
                raise RuntimeError("not NAME = VALUE: %r" % item)
            exprs[k.strip()] = v.strip()
        names = {k: self.value_of(v) for k, v in exprs.items()}
        shows = [m.group(2) for m in SHOW[lang].finditer(text)]
        env = dict(self.env, MAILROOM_SECRET_KEY=self.stack.key)
        env.pop("MAILROOM_VERIFY_KEYS", None)

        def run(bound):
            args, extra = self.program(lang, text, bound)
            return subprocess.run(args, env=dict(env, **extra), capture_output=True, text=True,
                                  timeout=120)
        done = run(names)
        shown = [t for t in shows if t in done.stdout]
        if done.returncode != 0 or shown:
            raise RuntimeError("with %s: exit %d, showed %s\n%s" % (
                ", ".join(exprs.values()), done.returncode, shown, done.stderr.strip()[-2000:]))
        print("  with %s: exit 0, showed nothing" % ", ".join(
            "%s = %s" % kv for kv in exprs.items()), flush=True)
        tokens = [k for k, v in exprs.items() if re.match(r"\{(token|signed):", v)]
        forged = dict(names, **{k: forge(names[k]) for k in tokens})
        done = run(forged)
        shown = [t for t in shows if t in done.stdout]
        refused = (done.returncode == 0 and shown) or (
            done.returncode != 0 and "InvalidToken" in done.stderr)
        if not tokens or not refused:
            raise RuntimeError("with %s's MAC changed: exit %d, showed %s\n%s" % (
                ", ".join(tokens) or "no token", done.returncode, shown, done.stderr.strip()[-2000:]))
        print("  with %s's MAC changed: %s" % (", ".join(tokens), (
            "showed %r" % shown[0]) if shown else "refused (%s)" % next(
                l for l in done.stderr.splitlines()[::-1] if "InvalidToken" in l).strip()), flush=True)

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
            if lang not in ("sql",) + SHELL + tuple(CODE):
                print("FAIL %s: a %s block, which this test cannot run: <!-- not run: ... -->"
                      % (where, lang or "plain"))
                self.failed.append(where)
                continue
            if lang == "sql" and not directive:
                print("FAIL %s: a sql block needs <!-- as ROLE: ... --> or <!-- not run: ... -->" % where)
                self.failed.append(where)
                continue
            print("RUN  %s" % where, flush=True)
            try:
                if lang in CODE:
                    self.code_block(CODE[lang], directive, text)
                else:
                    (self.sql_block if lang == "sql" else self.sh_block)(directive, text)
                ran += 1
            except Exception as e:  # noqa: BLE001: report the block, go on with the next
                print("FAIL %s: %s" % (where, e), flush=True)
                self.failed.append(where)
        print("%s: %d blocks run, %d skipped" % (path, ran, skipped), flush=True)
        self.ran += ran
        self.skipped += skipped


def workspace():
    """The checkout: runfiles are symlinks into it (clients/js and clients/go are read there)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(os.path.join(RUN, DOCS[0]))))


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
