#!/usr/bin/python3
"""A real SMTP server for tests (aiosmtpd): records each message as <dir>/<n>.eml with its
envelope in <n>.json, supports STARTTLS, implicit TLS, AUTH, and injected failures.

  smtp_peer.py --port P --dir D [--tls-cert C --tls-key K [--implicit-tls]] [--require-tls]
               [--auth user:password | --auth-file F] [--fail-first N --fail-code 451]
               [--reject-rcpt SUBSTRING --reject-code 550] [--reject-data-first N]
               [--slow-data-first N --slow-data-ms MS] [--hold-data N --hold-ms MS]

--slow-data-first N --slow-data-ms MS: the first N messages are recorded (accepted) and their
final reply after the end of data comes MS later, as from a server slow to say it queued them.

--hold-data N --hold-ms MS: each message is recorded and its final reply held until the replies
of N messages are held at once (then all of them go), or MS have passed; <dir>/held_max says
the most held at once: how many sessions had sent their message data without an answer yet.

--auth-file F: the accepted "user:password" is read from F at every AUTH, so a test can
change the password while the server runs.

Prints "ready <port>" on stdout once listening. Counts connections in <dir>/connections.
"""
import argparse
import asyncio
import json
import os
import ssl
import sys
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword, SMTP

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--dir", required=True)
parser.add_argument("--tls-cert")
parser.add_argument("--tls-key")
parser.add_argument("--implicit-tls", action="store_true")
parser.add_argument("--require-tls", action="store_true")
parser.add_argument("--auth")
parser.add_argument("--auth-file")
parser.add_argument("--fail-first", type=int, default=0)
parser.add_argument("--fail-code", type=int, default=451)
parser.add_argument("--reject-rcpt")
parser.add_argument("--reject-code", type=int, default=550)
parser.add_argument("--reject-data-first", type=int, default=0)
parser.add_argument("--slow-data-first", type=int, default=0)
parser.add_argument("--slow-data-ms", type=int, default=0)
parser.add_argument("--hold-data", type=int, default=0)
parser.add_argument("--hold-ms", type=int, default=0)
args = parser.parse_args()
os.makedirs(args.dir, exist_ok=True)

lock = threading.Lock()
state = {"messages": 0, "failed": 0, "data_rejected": 0, "connections": 0, "slowed": 0,
         "held": 0, "held_max": 0}
# Set once --hold-data replies are held at once; replaced by a new one for the next group.
# Only touched on the server's event-loop thread (handlers are coroutines on it).
hold_release = None


def bump_connections():
    with lock:
        state["connections"] += 1
        with open(os.path.join(args.dir, "connections"), "w") as f:
            f.write(str(state["connections"]))


class CountingSMTP(SMTP):
    def connection_made(self, transport):
        # Implicit TLS wraps the transport first; count each client connection once.
        if not getattr(self, "_counted", False):
            self._counted = True
            bump_connections()
        super().connection_made(transport)


class Handler:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        with lock:
            if state["failed"] < args.fail_first:
                state["failed"] += 1
                return "%d 4.3.0 temporary failure (injected)" % args.fail_code
        if args.reject_rcpt and args.reject_rcpt in address:
            return "%d 5.1.1 <%s>: mailbox unavailable (injected)" % (args.reject_code, address)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        with lock:
            if state["data_rejected"] < args.reject_data_first:
                state["data_rejected"] += 1
                return "554 5.6.0 message rejected (injected)"
            state["messages"] += 1
            n = state["messages"]
        base = os.path.join(args.dir, "%06d" % n)
        with open(base + ".eml.tmp", "wb") as f:
            f.write(envelope.original_content or envelope.content)
        with open(base + ".json", "w") as f:
            json.dump({"from": envelope.mail_from, "to": envelope.rcpt_tos,
                       "tls": session.ssl is not None,
                       "auth": session.authenticated}, f)
        os.rename(base + ".eml.tmp", base + ".eml")
        with lock:
            slow = state["slowed"] < args.slow_data_first
            state["slowed"] += slow
        if slow:
            await asyncio.sleep(args.slow_data_ms / 1000.0)
        if args.hold_data:
            await hold()
        return "250 2.0.0 queued as %d" % n


async def hold():
    global hold_release
    if hold_release is None:
        hold_release = asyncio.Event()
    release = hold_release
    state["held"] += 1
    if state["held"] > state["held_max"]:
        state["held_max"] = state["held"]
        with open(os.path.join(args.dir, "held_max"), "w") as f:
            f.write(str(state["held_max"]))
    if state["held"] >= args.hold_data:
        release.set()
        hold_release = None
    try:
        await asyncio.wait_for(release.wait(), args.hold_ms / 1000.0)
    except asyncio.TimeoutError:
        pass
    state["held"] -= 1


def authenticator(server, session, envelope, mechanism, auth_data):
    if args.auth_file:
        with open(args.auth_file) as f:
            user, password = f.read().strip().split(":", 1)
    else:
        user, password = args.auth.split(":", 1)
    ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == user
          and auth_data.password.decode() == password)
    # handled=False: aiosmtpd then answers "535" itself (its default assumes we replied).
    return AuthResult(success=ok, handled=False)


class PeerController(Controller):
    def factory(self):
        return CountingSMTP(self.handler, **self.SMTP_kwargs)


context = None
if args.tls_cert:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.tls_cert, args.tls_key)

kwargs = dict(hostname="127.0.0.1", port=args.port, decode_data=False,
              enable_SMTPUTF8=False)
smtp_kwargs = {}
if args.auth or args.auth_file:
    # PLAIN only: aiosmtpd 1.4 stalls a client that falls back to LOGIN after a refusal.
    smtp_kwargs.update(authenticator=authenticator, auth_require_tls=bool(context),
                       auth_required=True, auth_exclude_mechanism=["LOGIN"])
if context and not args.implicit_tls:
    smtp_kwargs.update(tls_context=context, require_starttls=args.require_tls)
if context and args.implicit_tls:
    kwargs["ssl_context"] = context
controller = PeerController(Handler(), **kwargs, **smtp_kwargs)
controller.start()
print("ready %d" % args.port, flush=True)
try:
    threading.Event().wait()
except KeyboardInterrupt:
    pass
finally:
    controller.stop()
