#!/usr/bin/python3
"""A real SMTP server for tests (aiosmtpd): records each message as <dir>/<n>.eml with its
envelope in <n>.json, supports STARTTLS, implicit TLS, AUTH, and injected failures.

  smtp_peer.py --port P --dir D [--tls-cert C --tls-key K [--implicit-tls]] [--require-tls]
               [--auth user:password | --auth-file F] [--fail-first N --fail-code 451]
               [--reject-rcpt SUBSTRING --reject-code 550] [--reject-data-first N]
               [--slow-data-first N --slow-data-ms MS] [--hold-data N --hold-ms MS]
               [--faults-by-recipient] [--pipelining] [--drop-kept-mail N]

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

--faults-by-recipient: the recipient's local part up to the first "-" chooses what happens to
the first try of its message (later tries are accepted), as the transports' conformance test
asks: "reject" 550 5.1.1 on RCPT, "error" 451 4.3.0 on RCPT, "throttle" 421 4.7.0 on RCPT,
"lost" the message recorded and the connection closed with no reply to the end of data.

--pipelining: the EHLO reply offers PIPELINING (RFC 2920). Commands are read from a buffered
stream either way, so pipelined input is always understood. --pipelining-before-tls: offered
in the EHLO reply before STARTTLS only (what counts is the reply after it, RFC 3207 4.2).

Every read from a connection (a TCP segment or TLS record, after decryption) that starts with
commands appends one line to <dir>/reads: the verbs of the command lines it holds, e.g.
"MAIL RCPT DATA" when a client pipelined them, "MAIL" alone when it waited for each reply.

--drop-kept-mail N: the first N times a MAIL command comes on a connection that has already
delivered a message, the connection is closed with no reply, as a server ending an idle
session just as the client writes.

--hangup-after-421: a 421 from --fail-first (--fail-code 421) closes the connection after the
reply, as servers do (RFC 5321 3.8), whatever the client had pipelined after it.

--close-idle-ms MS: a connection that has delivered a message and then stays silent for MS is
ended with "421 4.4.2 idle timeout" (as postfix's smtpd does); <dir>/idle_closed counts them.

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
parser.add_argument("--faults-by-recipient", action="store_true")
parser.add_argument("--pipelining", action="store_true")
parser.add_argument("--pipelining-before-tls", action="store_true")
parser.add_argument("--drop-kept-mail", type=int, default=0)
parser.add_argument("--close-idle-ms", type=int, default=0)
parser.add_argument("--hangup-after-421", action="store_true")
args = parser.parse_args()
os.makedirs(args.dir, exist_ok=True)

lock = threading.Lock()
state = {"messages": 0, "failed": 0, "data_rejected": 0, "connections": 0, "slowed": 0,
         "held": 0, "held_max": 0, "auth_ok": 0, "auth_refused": 0, "kept_dropped": 0}
VERBS = ("EHLO", "HELO", "STARTTLS", "AUTH", "MAIL", "RCPT", "DATA", "RSET", "NOOP", "QUIT")
# --faults-by-recipient: how many times each recipient was given at RCPT.
rcpt_tries = {}


def first_try_fault(address, count):
    """The fault the recipient's local part names, on its first try only (else "ok")."""
    if not args.faults_by_recipient:
        return "ok"
    with lock:
        tries = rcpt_tries.get(address, 0) + count
        rcpt_tries[address] = tries
    return address.split("@")[0].split("-")[0] if tries == 1 else "ok"


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

    def data_received(self, data):
        self.last_active = time.monotonic()
        # One line per read that starts with a command: the verbs of its command lines.
        lines = data.split(b"\r\n")
        verbs = [l.split(b" ")[0].split(b":")[0].decode("ascii", "replace").upper() for l in lines]
        if verbs and verbs[0] in VERBS:
            with lock, open(os.path.join(args.dir, "reads"), "a") as f:
                f.write(" ".join(v for v in verbs if v in VERBS) + "\n")
        super().data_received(data)


class Handler:
    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname  # what aiosmtpd does itself without this hook
        if args.pipelining or (args.pipelining_before_tls and session.ssl is None):
            responses.insert(len(responses) - 1, "250-PIPELINING")
        return responses

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        delivered = getattr(server, "delivered", 0)
        with lock:
            drop = delivered > 0 and state["kept_dropped"] < args.drop_kept_mail
        if drop:
            bump("kept_dropped")
            server.transport.abort()  # nothing more is written, not even this reply
            return "250 OK never sent"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

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
                reply = "%d 4.3.0 temporary failure (injected)" % args.fail_code
                if args.fail_code == 421 and args.hangup_after_421:
                    # The reply, then the end of the session (RFC 5321 3.8), before anything
                    # else the client pipelined is answered; the server's own copy of the
                    # reply then goes nowhere.
                    server.transport.write((reply + "\r\n").encode())
                    server.transport.close()
                return reply
        fault = first_try_fault(address, 1)
        if fault == "reject":
            return "550 5.1.1 <%s>: user unknown (injected)" % address
        if fault == "error":
            return "451 4.3.0 temporary failure (injected)"
        if fault == "throttle":
            return "421 4.7.0 too many messages, slow down (injected)"
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
        server.delivered = getattr(server, "delivered", 0) + 1
        if args.faults_by_recipient and envelope.rcpt_tos and \
                envelope.rcpt_tos[0].split("@")[0].split("-")[0] == "lost" and \
                rcpt_tries.get(envelope.rcpt_tos[0]) == 1:
            server.transport.abort()  # recorded, and no reply to the end of data
            return "250 2.0.0 never sent"
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


def close_idle():
    now = time.monotonic()
    for session in list(sessions):
        idle = now - getattr(session, "last_active", now)
        if getattr(session, "delivered", 0) and idle > args.close_idle_ms / 1000.0 and \
                session.transport and not session.transport.is_closing():
            session.transport.write(b"421 4.4.2 idle timeout\r\n")
            session.transport.close()
            bump("idle_closed")


def sweep(task):
    """Runs `task` on the server's event loop every 20 ms."""
    while True:
        time.sleep(0.02)
        controller.loop.call_soon_threadsafe(task)


if args.close_idle_ms:
    threading.Thread(target=sweep, args=(close_idle,), daemon=True).start()
state["idle_closed"] = 0
state["revoked_closed"] = 0
if args.xoauth2_state:
    threading.Thread(target=sweep, args=(close_revoked,), daemon=True).start()
print("ready %d" % args.port, flush=True)
try:
    threading.Event().wait()
except KeyboardInterrupt:
    pass
finally:
    controller.stop()
