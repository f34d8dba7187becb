#!/usr/bin/python3
"""A receiver of the sender's http transport for tests (standard library only). It verifies
every request the way the Standard Webhooks convention specifies (webhook-id,
webhook-timestamp within a tolerance, webhook-signature "v1,<base64 HMAC-SHA256>" over
id.timestamp.body with the key decoded from whsec_<base64>), stores what it accepts once per
webhook-id, and answers as a test tells it.

  webhook_receiver.py serve --port P --secret whsec_... [--secret ...] [--tolerance 300]
                            [--authorization VALUE] [--tls-cert PEM --tls-key PEM]
  webhook_receiver.py verify --secret whsec_... --id ID --timestamp T --signature SIG
                             [--tolerance 300] < body
      exits 0 when the signature verifies, 1 (and says why) when not.

serve: a request that does not verify (or lacks the Authorization header given) is answered
401 {"reason": ...} and counted as refused. A verified one takes the next scripted answer:
  POST /_control/script {"answers": [ANSWER, ...]}   appended to the script
  ANSWER: {"status": 200, "body": {...} or "text", "hang_ms": MS, "close": true}
    status/body: what to answer (a 2xx stores the message); hang_ms: store the message, wait,
    then answer; close: store the message and close the connection without an answer.
With no scripted answer left it stores the message and answers 200 {"message_id": "rcv-N"}.
A webhook-id already stored is answered 200 with its first message id and counted as a
duplicate, nothing stored again.
  GET /_control/state -> {"requests": n, "refused": n, "duplicates": n, "reasons": [...],
                          "messages": [{"id", "timestamp", "attempt", "body"}, ...]}

--tls-cert/--tls-key: serve HTTPS with that certificate.

Prints "ready <port>" on stdout once listening.
"""
import argparse
import base64
import hashlib
import hmac
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def keys_of(secrets):
    return [base64.b64decode(s[len("whsec_"):]) for s in secrets]


def verify(keys, msg_id, timestamp, signature, body, tolerance, now=None):
    """None when one of `signature`'s v1 entries is HMAC-SHA256(key, id.timestamp.body) for
    one of `keys` and the timestamp is within `tolerance` seconds of now; else the reason."""
    if not msg_id or not timestamp or not signature:
        return "missing webhook-id, webhook-timestamp or webhook-signature"
    try:
        ts = int(timestamp)
    except ValueError:
        return "bad timestamp"
    if abs((now if now is not None else time.time()) - ts) > tolerance:
        return "timestamp outside tolerance"
    signed = b"%s.%s.%s" % (msg_id.encode(), timestamp.encode(), body)
    for key in keys:
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        for entry in signature.split(" "):
            version, _, sig = entry.partition(",")
            if version == "v1" and hmac.compare_digest(sig, expected):
                return None
    return "no matching signature"


def serve(args):
    keys = keys_of(args.secret)
    lock = threading.Lock()
    state = {"requests": 0, "refused": 0, "duplicates": 0, "reasons": [], "messages": [],
             "script": [], "ids": {}}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def reply(self, code, obj):
            data = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender gave up waiting; the message was stored all the same

        def do_GET(self):
            if self.path == "/_control/state":
                with lock:
                    return self.reply(200, {k: state[k] for k in (
                        "requests", "refused", "duplicates", "reasons", "messages")})
            self.reply(404, {"reason": "not found"})

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/_control/script":
                with lock:
                    state["script"].extend(json.loads(body)["answers"])
                return self.reply(200, {})
            msg_id = self.headers.get("webhook-id", "")
            timestamp = self.headers.get("webhook-timestamp", "")
            problem = verify(keys, msg_id, timestamp, self.headers.get("webhook-signature", ""),
                             body, args.tolerance)
            if problem is None and args.authorization is not None and \
                    self.headers.get("Authorization") != args.authorization:
                problem = "wrong Authorization"
            with lock:
                state["requests"] += 1
                if problem is not None:
                    state["refused"] += 1
                    state["reasons"].append(problem)
                elif msg_id in state["ids"]:
                    state["duplicates"] += 1
                    return self.reply(200, {"message_id": state["ids"][msg_id]})
                answer = state["script"].pop(0) if state["script"] and problem is None else {}
            if problem is not None:
                return self.reply(401, {"reason": problem})
            status = answer.get("status", 200)
            stores = answer.get("close") or "hang_ms" in answer or 200 <= status < 300
            if stores:
                payload = json.loads(body)
                with lock:
                    message_id = "rcv-%d" % (len(state["messages"]) + 1)
                    state["ids"][msg_id] = message_id
                    state["messages"].append({"id": msg_id, "timestamp": timestamp,
                                              "attempt": payload.get("attempt"), "body": payload})
            if answer.get("close"):
                self.close_connection = True
                return
            if "hang_ms" in answer:
                time.sleep(answer["hang_ms"] / 1000.0)
            self.reply(status, answer.get("body", {"message_id": message_id} if stores else {}))

    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("ready %d" % args.port, flush=True)
    server.serve_forever()


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--secret", action="append", required=True)
    s.add_argument("--tolerance", type=int, default=300)
    s.add_argument("--authorization")
    s.add_argument("--tls-cert")
    s.add_argument("--tls-key")
    v = sub.add_parser("verify")
    v.add_argument("--secret", action="append", required=True)
    v.add_argument("--id", required=True)
    v.add_argument("--timestamp", required=True)
    v.add_argument("--signature", required=True)
    v.add_argument("--tolerance", type=int, default=300)
    args = parser.parse_args()
    if args.command == "serve":
        return serve(args)
    problem = verify(keys_of(args.secret), args.id, args.timestamp, args.signature,
                     sys.stdin.buffer.read(), args.tolerance)
    if problem:
        print(problem)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
