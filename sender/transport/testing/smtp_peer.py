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

--xoauth2-state F --xoauth2-user U: AUTH XOAUTH2 only (RFC-less but documented by Google and
Microsoft: base64 of "user=" U "\x01auth=Bearer " token "\x01\x01"), accepting a token that the
token endpoint's state file F (oauth2_token_endpoint.py --state) lists as unexpired and not
revoked; anything else gets "535 5.7.3". Sessions whose token is revoked are closed (as a
provider ends the sessions of a revoked grant). <dir>/auth_ok and <dir>/auth_refused count AUTHs.

Prints "ready <port>" on stdout once listening. Counts connections in <dir>/connections.
"""
import argparse
import asyncio
import base64
import binascii
import json
import os
import ssl
import sys
import threading
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import MISSING, AuthResult, LoginPassword, SMTP

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--dir", required=True)
parser.add_argument("--tls-cert")
parser.add_argument("--tls-key")
parser.add_argument("--implicit-tls", action="store_true")
parser.add_argument("--require-tls", action="store_true")
parser.add_argument("--auth")
parser.add_argument("--auth-file")
parser.add_argument("--xoauth2-state")
parser.add_argument("--xoauth2-user")
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
         "held": 0, "held_max": 0, "auth_ok": 0, "auth_refused": 0}
# Live sessions (the server's protocol objects), for closing those of a revoked token.
sessions = set()
# Set once --hold-data replies are held at once; replaced by a new one for the next group.
# Only touched on the server's event-loop thread (handlers are coroutines on it).
hold_release = None


def bump(counter):
    with lock:
        state[counter] += 1
        with open(os.path.join(args.dir, counter + ".tmp"), "w") as f:
            f.write(str(state[counter]))
        os.replace(os.path.join(args.dir, counter + ".tmp"), os.path.join(args.dir, counter))


def bump_connections():
    bump("connections")


def xoauth2_state():
    try:
        with open(args.xoauth2_state) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"tokens": {}, "revoked": []}


class CountingSMTP(SMTP):
    def connection_made(self, transport):
        # Implicit TLS wraps the transport first; count each client connection once.
        if not getattr(self, "_counted", False):
            self._counted = True
            bump_connections()
        sessions.add(self)
        super().connection_made(transport)

    def connection_lost(self, error):
        sessions.discard(self)
        super().connection_lost(error)


class Handler:
    async def auth_XOAUTH2(self, server, args_):
        if len(args_) == 2:
            blob = args_[1]
        else:
            blob = await server.challenge_auth("")
            if blob is MISSING:
                return AuthResult(success=False, handled=True)
            blob = base64.b64encode(blob).decode()
        try:
            fields = dict(f.split("=", 1) for f in
                          base64.b64decode(blob, validate=True).decode().split("\x01") if f)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            fields = {}
        token = fields.get("auth", "")[len("Bearer "):]
        st = xoauth2_state()
        ok = (fields.get("user") == args.xoauth2_user and fields.get("auth", "").startswith("Bearer ")
              and token in st["tokens"] and time.time() < st["tokens"][token]
              and token not in st["revoked"])
        bump("auth_ok" if ok else "auth_refused")
        if not ok:
            return AuthResult(success=False, handled=False,
                              message="535 5.7.3 Authentication unsuccessful")
        server.xoauth2_token = token
        return AuthResult(success=True, auth_data=fields.get("user"))

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
                       auth_required=True, auth_exclude_mechanism=["LOGIN", "XOAUTH2"])
elif args.xoauth2_state:
    smtp_kwargs.update(authenticator=authenticator, auth_require_tls=bool(context),
                       auth_required=True, auth_exclude_mechanism=["LOGIN", "PLAIN"])
else:
    smtp_kwargs.update(auth_exclude_mechanism=["XOAUTH2"])
if context and not args.implicit_tls:
    smtp_kwargs.update(tls_context=context, require_starttls=args.require_tls)
if context and args.implicit_tls:
    kwargs["ssl_context"] = context
controller = PeerController(Handler(), **kwargs, **smtp_kwargs)
controller.start()


def close_revoked():
    revoked = set(xoauth2_state()["revoked"])
    for session in list(sessions):
        if getattr(session, "xoauth2_token", None) in revoked and session.transport:
            session.transport.close()
            bump("revoked_closed")


def sweep_revoked():
    while True:
        time.sleep(0.02)
        controller.loop.call_soon_threadsafe(close_revoked)


state["revoked_closed"] = 0
if args.xoauth2_state:
    threading.Thread(target=sweep_revoked, daemon=True).start()
print("ready %d" % args.port, flush=True)
try:
    threading.Event().wait()
except KeyboardInterrupt:
    pass
finally:
    controller.stop()
