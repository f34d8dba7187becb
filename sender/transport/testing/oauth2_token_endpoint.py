#!/usr/bin/python3
"""A client-credentials token endpoint for tests (standard library only), shaped like
Microsoft Entra ID's: POST any path with the form grant_type=client_credentials, client_id,
client_secret, scope -> 200 {"access_token", "expires_in", "token_type": "Bearer"}; a wrong
client or secret -> 401 {"error": "invalid_client"}.

  oauth2_token_endpoint.py --port P --state F --client-id ID --client-secret S
                           [--scope SC] [--expires-in SECONDS] [--fail-first N]

--state F: the issued tokens, written atomically after every change as JSON
{"requests": n, "issued": n, "tokens": {token: expiry (epoch seconds)}, "revoked": [token]},
read by smtp_peer.py --xoauth2-state to accept only valid, unrevoked tokens, and by tests.
--fail-first N: the first N token requests are answered 503 temporarily_unavailable.
POST /revoke revokes every token issued so far (the SMTP peer then refuses them).

Prints "ready <port>" on stdout once listening.
"""
import argparse
import json
import os
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--state", required=True)
parser.add_argument("--client-id", required=True)
parser.add_argument("--client-secret", required=True)
parser.add_argument("--scope", default="https://outlook.office365.com/.default")
parser.add_argument("--expires-in", type=int, default=3599)
parser.add_argument("--fail-first", type=int, default=0)
args = parser.parse_args()

lock = threading.Lock()
state = {"requests": 0, "issued": 0, "tokens": {}, "revoked": []}


def save():
    tmp = args.state + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, args.state)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *_):
        pass  # the form carries the client secret: print nothing about requests

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        if self.path == "/revoke":
            with lock:
                state["revoked"] = sorted(set(state["revoked"]) | set(state["tokens"]))
                save()
            return self.answer(200, {"revoked": len(state["revoked"])})
        field = lambda name: form.get(name, [""])[0]
        with lock:
            state["requests"] += 1
            n = state["requests"]
            save()
        if n <= args.fail_first:
            return self.answer(503, {"error": "temporarily_unavailable",
                                     "error_description": "injected outage"})
        if field("grant_type") != "client_credentials":
            return self.answer(400, {"error": "unsupported_grant_type"})
        if (not secrets.compare_digest(field("client_id"), args.client_id) or
                not secrets.compare_digest(field("client_secret"), args.client_secret)):
            return self.answer(401, {"error": "invalid_client",
                                     "error_description": "client authentication failed"})
        if field("scope") != args.scope:
            return self.answer(400, {"error": "invalid_scope"})
        with lock:
            state["issued"] += 1
            token = "at-%d-%s" % (state["issued"], secrets.token_urlsafe(24))
            state["tokens"][token] = time.time() + args.expires_in
            save()
        self.answer(200, {"access_token": token, "expires_in": args.expires_in,
                          "ext_expires_in": args.expires_in, "token_type": "Bearer"})


save()
server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
print("ready %d" % args.port, flush=True)
server.serve_forever()
