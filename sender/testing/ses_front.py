#!/usr/bin/python3
"""A thin front for the SES v2 emulator (aws-ses-v2-local), for what it cannot do itself:
it verifies the SigV4 signature of every request (recomputing it from the known test secret)
and can answer the first N requests with 429 TooManyRequestsException. Everything else is
proxied to the emulator.

  ses_front.py --port P --upstream http://127.0.0.1:Q --access-key AK --secret-key SK
               --region us-east-1 [--throttle-first N] [--paused-file F]

--paused-file F: while F exists every request is answered 400 SendingPausedException (as SES
does for an account whose sending is paused), so a test can pause and resume sending; GetAccount
then says SendingEnabled=false.

--account-file F: GET /v2/email/account (GetAccount, signature checked) answers these defaults,
overridden by the JSON object in F when it exists (read on every request, so a test changes the
account by rewriting F): SendingEnabled true, EnforcementStatus HEALTHY,
ProductionAccessEnabled true, SendQuota {Max24HourSend 50000, MaxSendRate 14, SentLast24Hours 0}.

Prints "ready <port>" once listening.
"""
import argparse
import hashlib
import hmac
import http.server
import json
import os
import threading
import urllib.request

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--upstream", required=True)
parser.add_argument("--access-key", required=True)
parser.add_argument("--secret-key", required=True)
parser.add_argument("--region", default="us-east-1")
parser.add_argument("--throttle-first", type=int, default=0)
parser.add_argument("--paused-file")
parser.add_argument("--account-file")
args = parser.parse_args()
lock = threading.Lock()
state = {"throttled": 0}


def sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def check_signature(method, path, headers, body):
    auth = headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "missing AWS4-HMAC-SHA256 authorization"
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    access, date, region, service, term = fields["Credential"].split("/")
    if access != args.access_key or region != args.region or service != "ses":
        return "unexpected credential scope %s/%s/%s" % (access, region, service)
    signed = fields["SignedHeaders"].split(";")
    canonical_headers = "".join(
        "%s:%s\n" % (h, " ".join(headers.get(h, "").strip().split())) for h in signed)
    payload_hash = hashlib.sha256(body).hexdigest()
    path_only, _, query = path.partition("?")
    canonical = "\n".join([method, path_only, query, canonical_headers, ";".join(signed),
                           payload_hash])
    amz_date = headers.get("x-amz-date", "")
    scope = "/".join([date, region, service, term])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = sign(("AWS4" + args.secret_key).encode(), date)
    k = sign(k, region)
    k = sign(k, service)
    k = sign(k, "aws4_request")
    expected = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields["Signature"]):
        return "signature mismatch"
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def reply(self, code, obj, error_type=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if error_type:
            self.send_header("x-amzn-ErrorType", error_type)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        headers = {k.lower(): v for k, v in self.headers.items()}
        headers["Authorization"] = self.headers.get("Authorization", "")
        problem = check_signature("GET", self.path, headers, b"")
        if problem:
            return self.reply(403, {"message": problem}, "SignatureDoesNotMatch")
        if self.path.partition("?")[0] != "/v2/email/account":
            return self.reply(404, {"message": "not found"}, "NotFoundException")
        account = {"SendingEnabled": True, "EnforcementStatus": "HEALTHY",
                   "ProductionAccessEnabled": True, "DedicatedIpAutoWarmupEnabled": False,
                   "SendQuota": {"Max24HourSend": 50000.0, "MaxSendRate": 14.0,
                                 "SentLast24Hours": 0.0}}
        if args.account_file and os.path.exists(args.account_file):
            with open(args.account_file) as f:
                override = json.load(f)
            quota = dict(account["SendQuota"], **override.pop("SendQuota", {}))
            account.update(override)
            account["SendQuota"] = quota
        if args.paused_file and os.path.exists(args.paused_file):
            account["SendingEnabled"] = False
        self.reply(200, account)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        headers["Authorization"] = self.headers.get("Authorization", "")
        problem = check_signature("POST", self.path, headers, body)
        if problem:
            return self.reply(403, {"message": problem}, "SignatureDoesNotMatch")
        if args.paused_file and os.path.exists(args.paused_file):
            return self.reply(400, {"message": "Sending is paused for this account."},
                              "SendingPausedException")
        with lock:
            if state["throttled"] < args.throttle_first:
                state["throttled"] += 1
                return self.reply(429, {"message": "Maximum sending rate exceeded."},
                                  "TooManyRequestsException")
        req = urllib.request.Request(args.upstream + self.path, data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": headers["Authorization"]})
        try:
            with urllib.request.urlopen(req) as r:
                self.reply(r.status, json.loads(r.read() or b"{}"))
        except urllib.error.HTTPError as e:
            self.reply(e.code, json.loads(e.read() or b"{}"))


server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
print("ready %d" % args.port, flush=True)
server.serve_forever()
