#!/usr/bin/python3
"""Runs one driver example (examples/psycopg, examples/node-pg, examples/pgx: the argument)
against the real stack: a throwaway PostgreSQL 15, the roles of docs/integration.md section 1,
`collector migrate`, `mailroom.grant_application('app')`, a collector and a sender with the file
transport. The example connects as `app`; the sender's outbox stands in for the user's mailbox
(the example takes the token and code of the newest email of each action written there), and
the collector's key is its verifier's (MAILROOM_SECRET_KEY). It runs the guide's path (signup,
resend, activation, recovery with a wrong code then the right one, a sign-in code typed alone,
an address change) and stops at the first answer that is not the guide's; the test wants its
last line, "every answer as the guide says". Everything is stopped on exit.

Each example uses the verifier of clients/ in its language: psycopg's mailroom_verify from its
runfile (through //examples/frontend), node-pg's npm mailroom-verify and pgx's Go package from
the workspace's clients/js and clients/go (copied into the test's directory). node-pg's `pg` is
found in MAILROOM_NODE_MODULES (set by .ci/test), else in the workspace's
.cache/node/node_modules (`bash .ci/setup` installs it). pgx is built here, offline, from
Debian's golang-github-jackc-pgx-v4-dev (GOPATH=/usr/share/gocode beside the verifier's,
GO111MODULE=off, GOPROXY=off).
"""

import os
import shutil
import subprocess
import sys

RUN = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mailroom")
sys.path.insert(0, os.path.join(RUN, "testing"))
import py_stack  # noqa: E402


def workspace():
    # Runfiles are symlinks into the workspace: its .cache/node and clients/ are next to examples/.
    return os.path.dirname(os.path.dirname(os.path.realpath(os.path.join(RUN, "examples/example_test.py"))))


def node_modules():
    return os.environ.get("MAILROOM_NODE_MODULES") or os.path.join(workspace(), ".cache/node/node_modules")


def command(example, work):
    if example == "psycopg":
        return (["/usr/bin/python3", os.path.join(RUN, "examples/psycopg/signup.py")],
                {"PYTHONPATH": os.path.join(RUN, "clients/python")})
    if example == "node-pg":
        modules = node_modules()
        if not os.path.isdir(os.path.join(modules, "pg")):
            raise RuntimeError("npm pg not found in %s (run bash .ci/setup)" % modules)
        verifier = os.path.join(work, "node_modules")
        shutil.copytree(os.path.join(workspace(), "clients/js"),
                        os.path.join(verifier, "mailroom-verify"))
        return (["node", os.path.join(RUN, "examples/node-pg/signup.js")],
                {"NODE_PATH": verifier + ":" + modules})
    if example == "pgx":
        binary = os.path.join(work, "signup")
        gopath = os.path.join(work, "gopath")
        shutil.copytree(os.path.join(workspace(), "clients/go"),
                        os.path.join(gopath, "src/github.com/mailroom-dev/mailroom/clients/go"))
        env = dict(os.environ, GOPATH=gopath + ":/usr/share/gocode", GO111MODULE="off",
                   GOPROXY="off", GOFLAGS="", GOCACHE=os.path.join(work, "gocache"), HOME=work)
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
                   EXAMPLE_OUTBOX=stack.outbox, MAILROOM_SECRET_KEY=stack.key, **extra)
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
        print(done.stdout + done.stderr)
        ok = done.returncode == 0 and done.stdout.rstrip().endswith("every answer as the guide says")
        print("%s examples/%s: signup, resend, activation, recovery, sign-in code, address change"
              % ("PASS" if ok else "FAIL", example))
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
