#!/usr/bin/python3
"""Runs one driver example (examples/psycopg, examples/node-pg, examples/pgx: the argument)
against the real stack: a throwaway PostgreSQL 15, the roles of docs/integration.md section 1,
`collector migrate`, `mailroom.grant_application('app')`, a collector and a sender with the file
transport. The example connects as `app`; the sender's outbox stands in for the user's mailbox
(the example takes the token of the newest activation email written there). Everything is
stopped on exit.

node-pg's `pg` is found in MAILROOM_NODE_MODULES (set by .ci/test), else in the workspace's
.cache/node/node_modules (`bash .ci/setup` installs it). pgx is built here, offline, from
Debian's golang-github-jackc-pgx-v4-dev (GOPATH=/usr/share/gocode, GO111MODULE=off,
GOPROXY=off).
"""

import os
import subprocess
import sys

RUN = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mailroom")
sys.path.insert(0, os.path.join(RUN, "testing"))
import py_stack  # noqa: E402


def node_modules():
    given = os.environ.get("MAILROOM_NODE_MODULES")
    if given:
        return given
    # Runfiles are symlinks into the workspace: its .cache/node is next to examples/.
    workspace = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.realpath(os.path.join(RUN, "examples/node-pg/signup.js")))))
    return os.path.join(workspace, ".cache/node/node_modules")


def command(example, work):
    if example == "psycopg":
        return ["/usr/bin/python3", os.path.join(RUN, "examples/psycopg/signup.py")], {}
    if example == "node-pg":
        modules = node_modules()
        if not os.path.isdir(os.path.join(modules, "pg")):
            raise RuntimeError("npm pg not found in %s (run bash .ci/setup)" % modules)
        return ["node", os.path.join(RUN, "examples/node-pg/signup.js")], {"NODE_PATH": modules}
    if example == "pgx":
        binary = os.path.join(work, "signup")
        env = dict(os.environ, GOPATH="/usr/share/gocode", GO111MODULE="off", GOPROXY="off",
                   GOFLAGS="", GOCACHE=os.path.join(work, "gocache"), HOME=work)
        src = os.path.realpath(os.path.join(RUN, "examples/pgx/main.go"))
        done = subprocess.run(["go", "build", "-o", binary, src], env=env, capture_output=True,
                              text=True, cwd=os.path.dirname(src))
        if done.returncode != 0:
            raise RuntimeError("go build: %s" % done.stderr)
        return [binary], {}
    raise RuntimeError("unknown example %r" % example)


def main():
    example = sys.argv[1]
    stack = py_stack.Stack(prefix="example-%s-test." % example)
    try:
        stack.start_postgres()
        stack.install()
        stack.start_services()
        args, extra = command(example, stack.work)
        env = dict(stack.clean_env(), DATABASE_URL=stack.url("app"), EXAMPLE_EMAIL="ada@example.test",
                   EXAMPLE_OUTBOX=stack.outbox, **extra)
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        print(done.stdout + done.stderr)
        ok = done.returncode == 0 and "consume: ok" in done.stdout and "account status: active" in done.stdout
        print("%s examples/%s: signup, resend, account_emails, consume" % ("PASS" if ok else "FAIL", example))
        if not ok:
            for name, _ in stack.procs:
                print("--- %s.log (last lines)\n%s" % (name, "\n".join(stack.log(name).splitlines()[-15:])))
        return 0 if ok else 1
    except Exception as e:  # noqa: BLE001
        print("FAIL examples/%s: %s" % (example, e))
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
