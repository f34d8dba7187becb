#!/usr/bin/python3
"""Stand-ins for the HTTP sending APIs of Postmark, SendGrid, Mailgun and Resend, for tests
(standard library only). Each answers as its provider documents: its own path, its own
credentials (a wrong or missing one is refused as that provider refuses it), its own request
shape checked, its own success answer and message id, its own error bodies.

  provider_standin.py --port P --provider postmark|sendgrid|mailgun|resend --key KEY
                      [--domain D] [--hang-ms MS] [--restricted] [--scopes a,b]

  postmark: POST /email, X-Postmark-Server-Token: KEY; 200 {"MessageID", "ErrorCode": 0, ...}
            GET /server: the server (the doctor's check)
  sendgrid: POST /v3/mail/send, Authorization: Bearer KEY; 202, X-Message-Id header
            GET /v3/scopes: {"scopes": --scopes (default mail.send)}
  mailgun:  POST /v3/D/messages (form), basic auth api:KEY; 200 {"id": "<...>", "message"}
            GET /v4/domains/D: {"domain": {"name": D, "state": "active"}}
  resend:   POST /emails, Authorization: Bearer KEY, Idempotency-Key honoured as Resend
            documents (same key and body: the first answer again, nothing sent; another body:
            409 invalid_idempotent_request); 200 {"id"}
            GET /domains: 200, or 401 restricted_api_key with --restricted (a sending-only key)

What happens to a message is chosen by its recipient's local part, up to the first "-", on
the first request of each job (the job id is the mailroom_job metadata/custom arg/user
variable/tag); later requests of the same job are accepted:
  ok        accepted
  reject    the provider's permanent per-recipient refusal (postmark 422 ErrorCode 406,
            sendgrid 400 on personalizations.0.to.0.email, mailgun 400 'to' parameter is not a
            valid address, resend 422 validation_error on `to`)
  error     the provider's 500
  throttle  the provider's 429, with Retry-After: 1 (SendGrid: X-RateLimit-Reset, 2 s on)
  lost      accepted (counted as delivered), then the answer is cut short: a 200 status line
            and part of the body, and the connection closed
  drop      accepted (counted as delivered), then the connection closed without a byte of
            answer: on a kept-alive connection (a request that is not the first on its
            connection) this is the case where libcurl would send the request again by itself
  hang      accepted, answered only after --hang-ms (default 3000)

  GET /_control/state -> {"requests", "refused", "replays", "deliveries": {job: n},
                          "duplicates": n, "messages": [first 100: {"job", "to", "id", "body"}],
                          "received": {job: send requests received, refused or not},
                          "drops": [{"job", "on_connection": the request's number on its
                                     connection, 1 for the first}]}

Prints "ready <port>" on stdout once listening.
"""
import argparse
import base64
import json
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERRORS = {
    "postmark": {
        "reject": (422, {"ErrorCode": 406, "Message": "You tried to send to recipient(s) that "
                         "have been marked as inactive. Found inactive addresses: {to}."}),
        "error": (500, {"ErrorCode": 0, "Message": "Internal server error"}),
        "throttle": (429, {"ErrorCode": 429, "Message": "Rate limit exceeded"}),
        "auth": (401, {"ErrorCode": 10, "Message": "No Account or Server API tokens were "
                       "supplied in the HTTP headers."}),
    },
    "sendgrid": {
        "reject": (400, {"errors": [{"message": "Does not contain a valid address.",
                                     "field": "personalizations.0.to.0.email", "help": None}]}),
        "error": (500, {"errors": [{"message": "Internal server error", "field": None}]}),
        "throttle": (429, {"errors": [{"message": "too many requests", "field": None}]}),
        "auth": (401, {"errors": [{"message": "The provided authorization grant is invalid, "
                                   "expired, or revoked", "field": None, "help": None}]}),
    },
    "mailgun": {
        "reject": (400, {"message": "'to' parameter is not a valid address. please check "
                         "documentation"}),
        "error": (500, {"message": "Internal Server Error"}),
        "throttle": (429, {"message": "Too many requests"}),
        "auth": (401, "Forbidden"),
    },
    "resend": {
        "reject": (422, {"statusCode": 422, "name": "validation_error", "message":
                         "Invalid `to` field. The email address needs to follow the "
                         "`email@example.com` or `Name <email@example.com>` format."}),
        "error": (500, {"statusCode": 500, "name": "application_error",
                        "message": "An unexpected error occurred."}),
        "throttle": (429, {"statusCode": 429, "name": "rate_limit_exceeded", "message":
                           "Too many requests. You can only make 2 requests per second."}),
        "auth": (403, {"statusCode": 403, "name": "invalid_api_key",
                       "message": "API key is invalid"}),
    },
}


def parse_message(provider, body):
    """(recipient, job id) of a send request, or a problem string."""
    if provider == "mailgun":
        form = urllib.parse.parse_qs(body.decode(), keep_blank_values=True)
        for field in ("from", "to", "subject"):
            if not form.get(field):
                return None, None, "%s parameter is missing" % field
        if not form.get("text") and not form.get("html"):
            return None, None, "Need at least one of 'text' or 'html' parameters specified"
        return form["to"][0], form.get("v:mailroom_job", [""])[0], None
    msg = json.loads(body)
    if provider == "postmark":
        for field in ("From", "To", "Subject", "MessageStream"):
            if not msg.get(field):
                return None, None, "Invalid request: %s missing" % field
        return msg["To"], str(msg.get("Metadata", {}).get("mailroom_job", "")), None
    if provider == "sendgrid":
        p = msg.get("personalizations") or [{}]
        to = (p[0].get("to") or [{}])[0].get("email")
        if not to or not msg.get("from", {}).get("email") or not msg.get("content"):
            return None, None, "The personalizations, from and content fields are required."
        return to, str(p[0].get("custom_args", {}).get("mailroom_job", "")), None
    to = msg.get("to") or [""]
    if not msg.get("from") or not to[0] or not msg.get("subject"):
        return None, None, "Missing `from`, `to` or `subject` field."
    tags = {t.get("name"): t.get("value") for t in msg.get("tags", [])}
    return to[0], str(tags.get("mailroom_job", "")), None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--provider", required=True, choices=sorted(ERRORS))
    parser.add_argument("--key", required=True)
    parser.add_argument("--domain", default="mg.example.test")
    parser.add_argument("--hang-ms", type=int, default=3000)
    parser.add_argument("--restricted", action="store_true")
    parser.add_argument("--scopes", default="mail.send")
    args = parser.parse_args()
    provider = args.provider
    send_path = {"postmark": "/email", "sendgrid": "/v3/mail/send",
                 "mailgun": "/v3/%s/messages" % args.domain, "resend": "/emails"}[provider]
    lock = threading.Lock()
    state = {"requests": 0, "refused": 0, "replays": 0, "deliveries": {}, "messages": [],
             "attempts": {}, "keys": {}, "received": {}, "drops": []}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # one segment per answer: no delayed-ACK stall

        def log_message(self, fmt, *a):
            pass

        def reply(self, code, obj, headers=()):
            data = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
            self.send_response(code)
            self.send_header("Content-Type",
                             "text/plain" if isinstance(obj, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def authorized(self):
            if provider == "postmark":
                return self.headers.get("X-Postmark-Server-Token") == args.key
            if provider == "mailgun":
                expected = base64.b64encode(("api:" + args.key).encode()).decode()
                return self.headers.get("Authorization") == "Basic " + expected
            return self.headers.get("Authorization") == "Bearer " + args.key

        def refuse_auth(self):
            with lock:
                state["refused"] += 1
            if provider == "resend" and not self.headers.get("Authorization"):
                return self.reply(401, {"statusCode": 401, "name": "missing_api_key",
                                        "message": "Missing API key in the authorization "
                                                   "header."})
            code, body = ERRORS[provider]["auth"]
            self.reply(code, body)

        def do_GET(self):
            if self.path == "/_control/state":
                with lock:
                    d = state["deliveries"]
                    return self.reply(200, {
                        "requests": state["requests"], "refused": state["refused"],
                        "replays": state["replays"], "deliveries": d,
                        "duplicates": sum(n - 1 for n in d.values() if n > 1),
                        "messages": state["messages"], "received": state["received"],
                        "drops": state["drops"]})
            check_path = {"postmark": "/server", "sendgrid": "/v3/scopes",
                          "mailgun": "/v4/domains/%s" % args.domain,
                          "resend": "/domains"}[provider]
            if self.path != check_path:
                return self.reply(404, {"message": "not found"})
            if not self.authorized():
                return self.refuse_auth()
            if provider == "postmark":
                return self.reply(200, {"ID": 1, "Name": "stand-in", "DeliveryType": "Live"})
            if provider == "sendgrid":
                return self.reply(200, {"scopes": args.scopes.split(",")})
            if provider == "mailgun":
                return self.reply(200, {"domain": {"name": args.domain, "state": "active"}})
            if args.restricted:
                return self.reply(401, {"statusCode": 401, "name": "restricted_api_key",
                                        "message": "This API key is restricted to only send "
                                                   "emails."})
            return self.reply(200, {"data": []})

        def accept(self, job, to, body):
            """Records one delivery; returns the answer's status, body and headers."""
            with lock:
                state["deliveries"][job] = state["deliveries"].get(job, 0) + 1
                n = sum(state["deliveries"].values())
                if len(state["messages"]) < 100:
                    state["messages"].append({"job": job, "to": to, "body": body})
            if provider == "postmark":
                mid = str(uuid.uuid4())
                return 200, {"To": to, "SubmittedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                             "MessageID": mid, "ErrorCode": 0, "Message": "OK"}, (), mid
            if provider == "sendgrid":
                mid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
                return 202, "", (("X-Message-Id", mid),), mid
            if provider == "mailgun":
                mid = "%s.%d@%s" % (time.strftime("%Y%m%d%H%M%S"), n, args.domain)
                return 200, {"id": "<%s>" % mid, "message": "Queued. Thank you."}, (), mid
            mid = str(uuid.uuid4())
            return 200, {"id": mid}, (), mid

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            # One handler per connection: this request's number on it.
            self.on_connection = getattr(self, "on_connection", 0) + 1
            with lock:
                state["requests"] += 1
            if self.path != send_path:
                if provider == "mailgun" and self.path.startswith("/v3/"):
                    return self.reply(404, {"message": "Domain not found"})
                return self.reply(404, {"message": "not found"})
            if not self.authorized():
                return self.refuse_auth()
            try:
                to, job, problem = parse_message(provider, body)
            except (ValueError, UnicodeDecodeError, AttributeError) as e:
                to, job, problem = None, None, "invalid body: %s" % e
            if problem is None and not job:
                problem = "no mailroom_job in the message's metadata"
            if problem is not None:
                return self.reply(422 if provider in ("postmark", "resend") else 400,
                                  {"message": problem, "Message": problem, "ErrorCode": 300,
                                   "name": "validation_error", "errors": [{"message": problem}]})
            key = self.headers.get("Idempotency-Key") if provider == "resend" else None
            with lock:
                state["received"][job] = state["received"].get(job, 0) + 1
                if key is not None and key in state["keys"]:
                    first_body, answer = state["keys"][key]
                    if answer is None:
                        conflict = ("concurrent_idempotent_requests", "Same idempotency key "
                                    "used while original request is still in progress.")
                    elif first_body != body:
                        conflict = ("invalid_idempotent_request", "Same idempotency key used "
                                    "with a different request payload.")
                    else:
                        state["replays"] += 1
                        conflict = None
                    if conflict is None:
                        return self.reply(200, answer)
                    return self.reply(409, {"statusCode": 409, "name": conflict[0],
                                            "message": conflict[1]})
                attempt = state["attempts"].get(job, 0) + 1
                state["attempts"][job] = attempt
                if key is not None:
                    state["keys"][key] = (body, None)
            mode = to.split("@")[0].split("-")[0] if attempt == 1 else "ok"
            if mode in ("reject", "error", "throttle"):
                code, answer = ERRORS[provider][mode]
                if key is not None:
                    with lock:
                        del state["keys"][key]  # only a sent email holds its key
                if isinstance(answer, dict):
                    answer = json.loads(json.dumps(answer).replace("{to}", to))
                # The wait each provider names with its 429: SendGrid the Unix time its
                # window resets, the others Retry-After in seconds.
                wait = ()
                if mode == "throttle":
                    wait = ((("X-RateLimit-Reset", str(int(time.time()) + 2)),)
                            if provider == "sendgrid" else (("Retry-After", "1"),))
                return self.reply(code, answer, wait)
            code, answer, headers, _ = self.accept(job, to, body.decode(errors="replace"))
            if key is not None:
                with lock:
                    state["keys"][key] = (body, answer)
            if mode == "lost":
                self.close_connection = True
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: 200\r\n\r\n{\"id\": \"")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            if mode == "drop":
                with lock:
                    state["drops"].append({"job": job, "on_connection": self.on_connection})
                self.close_connection = True  # the request was read in full: no answer at all
                return
            if mode == "hang":
                time.sleep(args.hang_ms / 1000.0)
            self.reply(code, answer, headers)

    ThreadingHTTPServer.request_queue_size = 1024
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("ready %d" % args.port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
