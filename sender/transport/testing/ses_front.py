#!/usr/bin/python3
"""A thin front for the SES v2 emulator (aws-ses-v2-local), for what it cannot do itself:
it verifies the SigV4 signature of every request (recomputing it from the known test secret)
and can answer the first N requests with 429 TooManyRequestsException. Everything else is
proxied to the emulator.

  ses_front.py --port P --upstream http://127.0.0.1:Q --access-key AK --secret-key SK
               --region us-east-1 [--throttle-first N] [--paused-file F] [--account-file F]
               [--enforce-quota] [--identities-file F] [--slow-first-ms MS] [--sns-dir D --sns-port P]
               [--faults-by-recipient]

--paused-file F: while F exists every request is answered 400 SendingPausedException (as SES
does for an account whose sending is paused), so a test can pause and resume sending; GetAccount
then says SendingEnabled=false.

--account-file F: GET /v2/email/account (GetAccount, signature checked) answers these defaults,
overridden by the JSON object in F when it exists (read on every request, so a test changes the
account by rewriting F): SendingEnabled true, EnforcementStatus HEALTHY,
ProductionAccessEnabled true, SendQuota {Max24HourSend 50000, MaxSendRate 14, SentLast24Hours 0}.

--identities-file F: GET /v2/email/identities (ListEmailIdentities, signature checked) answers
{"EmailIdentities": the JSON list in F}, or an empty list while F does not exist; each entry as
SES writes them: {"IdentityName", "IdentityType", "SendingEnabled", "VerificationStatus"}.

--enforce-quota: SendEmail counts as SES counts it: every accepted message adds to
SentLast24Hours in GetAccount, and once it reaches Max24HourSend SendEmail is answered 400
LimitExceededException "Daily message quota exceeded." (nothing is proxied).

--slow-first-ms MS: the first SendEmail to each recipient is proxied (the message is accepted)
and answered only MS later, as a provider that is slow to answer but did its work.

GET /_front/stats (no signature): {"send_calls": every SendEmail received, "accepted": proxied
ones, "refused_quota": answered LimitExceededException, "account_reads": GetAccount calls,
"delivered_to": {recipient: SendEmails accepted by the emulator}}.

--faults-by-recipient: the recipient's local part up to the first "-" chooses what happens to
the first SendEmail to it (later ones are proxied), as the transports' conformance test asks:
"reject" 400 MessageRejectedException, "error" 500 InternalFailure, "throttle" 429
TooManyRequestsException, "lost" proxied (accepted) and then the answer cut short: a 200
status line, part of the body, the connection closed, "drop" proxied (accepted) and then the
connection closed without a byte of answer (on a kept-alive connection: the case where libcurl
would send the request again by itself). /_front/stats then also has "tries": {recipient:
SendEmails received} and "drops": [{"to", "on_connection": the request's number on its
connection, 1 for the first}].

--sns-dir D --sns-port P: also plays Amazon SNS for a configuration set's event destination.
It makes a test CA (D/ca.pem), a signing certificate issued by it (CN sns.amazonaws.com, as
SNS's), and a TLS certificate for 127.0.0.1, and serves over HTTPS on 127.0.0.1:P the signing
certificate (CERT_PATH) and the
SubscribeURL (/confirm?Token=...). It remembers what the front sent (MessageId, recipient,
EmailTags) and, on request, POSTs signed SNS messages to an endpoint:
  POST /_sns/subscribe {"endpoint": URL}: a SubscriptionConfirmation
  GET  /_sns/confirmed: {"confirmed": N} subscriptions confirmed through the SubscribeURL
  GET  /_sns/sent: {"sent": [{"to": ADDR, "id": MessageId, "tags": {NAME: [VALUE]}}, ...]}
  POST /_sns/event {"endpoint": URL, "recipient": ADDR, "event": "Bounce"|"Complaint"|
       "Delivery", "bounce_type": "Permanent", "version": 1|2, "forge": false, "topic": ARN}: an
       SES event about the last message sent to ADDR (forge: the Message is changed after
       signing; topic: from that TopicArn instead of the usual one, correctly signed)
Each answers {"status": the endpoint's HTTP status, ...}.

Prints "ready <port>" once listening.
"""
import argparse
import base64
import datetime
import hashlib
import hmac
import http.server
import json
import os
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--upstream", required=True)
parser.add_argument("--access-key", required=True)
parser.add_argument("--secret-key", required=True)
parser.add_argument("--region", default="us-east-1")
parser.add_argument("--throttle-first", type=int, default=0)
parser.add_argument("--paused-file")
parser.add_argument("--account-file")
parser.add_argument("--enforce-quota", action="store_true")
parser.add_argument("--identities-file")
parser.add_argument("--slow-first-ms", type=int, default=0)
parser.add_argument("--sns-dir")
parser.add_argument("--sns-port", type=int, default=0)
parser.add_argument("--faults-by-recipient", action="store_true")
args = parser.parse_args()
lock = threading.Lock()
state = {"throttled": 0, "send_calls": 0, "accepted": 0, "refused_quota": 0,
         "account_reads": 0, "answered_to": set(), "delivered_to": {}, "tries": {}, "drops": []}
FAULTS = {"reject": (400, "Email address is not verified.", "MessageRejected"),
          "error": (500, "Internal failure.", "InternalFailure"),
          "throttle": (429, "Maximum sending rate exceeded.", "TooManyRequestsException")}


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
        if args.sns_dir and self.path.startswith("/_sns/"):
            return self.reply(*sns_control("GET", self.path, b""))
        if self.path == "/_front/stats":
            with lock:
                return self.reply(200, {k: state[k] for k in (
                    "send_calls", "accepted", "refused_quota", "account_reads", "delivered_to",
                    "tries", "drops")})
        headers = {k.lower(): v for k, v in self.headers.items()}
        headers["Authorization"] = self.headers.get("Authorization", "")
        problem = check_signature("GET", self.path, headers, b"")
        if problem:
            return self.reply(403, {"message": problem}, "SignatureDoesNotMatch")
        if args.identities_file and self.path.partition("?")[0] == "/v2/email/identities":
            identities = []
            if os.path.exists(args.identities_file):
                with open(args.identities_file) as f:
                    identities = json.load(f)
            return self.reply(200, {"EmailIdentities": identities})
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
        with lock:
            state["account_reads"] += 1
            if args.enforce_quota:
                account["SendQuota"]["SentLast24Hours"] += state["accepted"]
        self.reply(200, account)

    def quota(self):
        """Max24HourSend and SentLast24Hours of the account file (defaults as in do_GET)."""
        quota = {"Max24HourSend": 50000.0, "SentLast24Hours": 0.0}
        if args.account_file and os.path.exists(args.account_file):
            with open(args.account_file) as f:
                quota.update(json.load(f).get("SendQuota", {}))
        return quota["Max24HourSend"], quota["SentLast24Hours"]

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        # One handler per connection: this request's number on it.
        self.on_connection = getattr(self, "on_connection", 0) + 1
        if args.sns_dir and self.path.startswith("/_sns/"):
            return self.reply(*sns_control("POST", self.path, body))
        headers = {k.lower(): v for k, v in self.headers.items()}
        headers["Authorization"] = self.headers.get("Authorization", "")
        problem = check_signature("POST", self.path, headers, body)
        if problem:
            return self.reply(403, {"message": problem}, "SignatureDoesNotMatch")
        if args.paused_file and os.path.exists(args.paused_file):
            return self.reply(400, {"message": "Sending is paused for this account."},
                              "SendingPausedException")
        send = self.path.partition("?")[0] == "/v2/email/outbound-emails"
        if send and args.enforce_quota:
            limit, sent_before = self.quota()
        with lock:
            if send:
                state["send_calls"] += 1
            if send and args.enforce_quota and sent_before + state["accepted"] >= limit:
                state["refused_quota"] += 1
                return self.reply(400, {"message": "Daily message quota exceeded."},
                                  "LimitExceededException")
            if state["throttled"] < args.throttle_first:
                state["throttled"] += 1
                return self.reply(429, {"message": "Maximum sending rate exceeded."},
                                  "TooManyRequestsException")
            fault = "ok"
            if send and args.faults_by_recipient:
                to = recipient(body)
                state["tries"][to] = state["tries"].get(to, 0) + 1
                if state["tries"][to] == 1:
                    fault = to.split("@")[0].split("-")[0]
            if fault in FAULTS:
                code, message, error_type = FAULTS[fault]
                return self.reply(code, {"message": message}, error_type)
            if send:
                state["accepted"] += 1  # taken back below unless the emulator accepts it
        req = urllib.request.Request(args.upstream + self.path, data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": headers["Authorization"]})
        try:
            with urllib.request.urlopen(req) as r:
                answer = json.loads(r.read() or b"{}")
                if args.sns_dir:
                    sns_record_sent(body, answer)
                status = r.status
            if send and 200 <= status < 300:
                with lock:
                    to = recipient(body)
                    slow = args.slow_first_ms > 0 and to not in state["answered_to"]
                    state["answered_to"].add(to)
                    state["delivered_to"][to] = state["delivered_to"].get(to, 0) + 1
                if slow:
                    time.sleep(args.slow_first_ms / 1000.0)
                if fault == "drop":
                    with lock:
                        state["drops"].append({"to": to, "on_connection": self.on_connection})
                    self.close_connection = True  # read in full, accepted: no answer at all
                    return
                if fault == "lost":
                    self.close_connection = True
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: 200\r\n\r\n{\"MessageId\": \"")
                    return
            elif send:
                with lock:
                    state["accepted"] -= 1
            try:
                self.reply(status, answer)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting: the message was accepted all the same
        except urllib.error.HTTPError as e:
            if send:
                with lock:
                    state["accepted"] -= 1
            self.reply(e.code, json.loads(e.read() or b"{}"))


def recipient(body):
    try:
        return json.loads(body)["Destination"]["ToAddresses"][0]
    except (ValueError, KeyError, IndexError):
        return ""


# --- SNS: a configuration set's event destination, signed with a test CA's certificate -------
# AWS's form of a signing certificate's path (the collector accepts no other).
CERT_PATH = "/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem"


sns = {"sent": [], "confirmed": 0}


def openssl(*argv, data=None):
    return subprocess.run(["openssl"] + list(argv), input=data, check=True,
                          capture_output=True).stdout


def sns_setup():
    d = args.sns_dir
    os.makedirs(d, exist_ok=True)
    j = lambda name: os.path.join(d, name)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", j("ca.key"), "-out",
            j("ca.pem"), "-days", "2", "-subj", "/CN=mailroom test SNS CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign")
    for name, cn, ext in (("signing", "sns.amazonaws.com", "basicConstraints=CA:FALSE"),
                          ("tls", "127.0.0.1", "subjectAltName=IP:127.0.0.1")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", j(name + ".key"), "-out",
                j(name + ".csr"), "-subj", "/CN=" + cn)
        with open(j(name + ".ext"), "w") as f:
            f.write(ext + "\n")
        openssl("x509", "-req", "-in", j(name + ".csr"), "-CA", j("ca.pem"), "-CAkey", j("ca.key"),
                "-CAcreateserial", "-days", "2", "-out", j(name + ".pem"), "-extfile", j(name + ".ext"))
    base = "https://127.0.0.1:%d" % args.sns_port

    class CertHandler(http.server.BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            pass

        def do_GET(self):
            if self.path == CERT_PATH:
                data = open(j("signing.pem"), "rb").read()
            elif self.path.startswith("/confirm?"):
                with lock:
                    sns["confirmed"] += 1
                data = b"<ConfirmSubscriptionResponse/>"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    tls = http.server.ThreadingHTTPServer(("127.0.0.1", args.sns_port), CertHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(j("tls.pem"), j("tls.key"))
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    threading.Thread(target=tls.serve_forever, daemon=True).start()
    return base


def sns_record_sent(body, answer):
    try:
        req = json.loads(body)
        to = req["Destination"]["ToAddresses"][0]
    except (ValueError, KeyError, IndexError):
        return
    tags = {t["Name"]: [t["Value"]] for t in req.get("EmailTags", [])}
    with lock:
        sns["sent"].append({"to": to, "id": answer.get("MessageId", ""), "tags": tags})


def sns_sign(msg, version):
    keys = ["Message", "MessageId"] + (["Subject"] if "Subject" in msg else [])
    keys += ["Timestamp", "TopicArn", "Type"]
    if msg["Type"] != "Notification":
        keys = ["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"]
    text = "".join("%s\n%s\n" % (k, msg[k]) for k in keys)
    digest = "-sha1" if version == 1 else "-sha256"
    sig = openssl("dgst", digest, "-sign", os.path.join(args.sns_dir, "signing.key"),
                  data=text.encode())
    msg["SignatureVersion"] = str(version)
    msg["Signature"] = base64.b64encode(sig).decode()


def sns_post(endpoint, msg):
    req = urllib.request.Request(endpoint, data=json.dumps(msg).encode(), method="POST",
                                 headers={"Content-Type": "text/plain; charset=UTF-8",
                                          "x-amz-sns-message-type": msg["Type"]})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def sns_envelope(kind, message):
    return {"Type": kind, "MessageId": str(uuid.uuid4()),
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:mailroom-feedback",
            "Message": message,
            "Timestamp": datetime.datetime.now(datetime.timezone.utc)
                         .strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "SigningCertURL": sns_base + CERT_PATH}


def sns_control(method, path, body):
    req = json.loads(body or b"{}")
    if method == "GET" and path == "/_sns/confirmed":
        with lock:
            return 200, {"confirmed": sns["confirmed"]}
    if method == "GET" and path == "/_sns/sent":
        with lock:
            return 200, {"sent": list(sns["sent"])}
    if method == "POST" and path == "/_sns/subscribe":
        msg = sns_envelope("SubscriptionConfirmation", "You have chosen to subscribe.")
        msg["Token"] = uuid.uuid4().hex
        msg["SubscribeURL"] = sns_base + "/confirm?Action=ConfirmSubscription&Token=" + msg["Token"]
        sns_sign(msg, 2)
        return 200, {"status": sns_post(req["endpoint"], msg)}
    if method == "POST" and path == "/_sns/event":
        with lock:
            sent = [m for m in sns["sent"] if m["to"] == req["recipient"]]
        if not sent:
            return 404, {"message": "nothing sent to " + req["recipient"]}
        mail = {"messageId": sent[-1]["id"], "destination": [req["recipient"]],
                "tags": sent[-1]["tags"], "source": "no-reply@example.test"}
        event = {"eventType": req["event"], "mail": mail}
        if req["event"] == "Bounce":
            event["bounce"] = {"bounceType": req.get("bounce_type", "Permanent"),
                               "bounceSubType": "General",
                               "bouncedRecipients": [{"emailAddress": req["recipient"]}]}
        elif req["event"] == "Complaint":
            event["complaint"] = {"complainedRecipients": [{"emailAddress": req["recipient"]}],
                                  "complaintFeedbackType": "abuse"}
        elif req["event"] == "Delivery":
            event["delivery"] = {"recipients": [req["recipient"]], "smtpResponse": "250 ok"}
        msg = sns_envelope("Notification", json.dumps(event))
        if req.get("topic"):
            msg["TopicArn"] = req["topic"]  # another topic, signed as SNS signs it
        sns_sign(msg, int(req.get("version", 2)))
        if req.get("forge"):
            msg["Message"] = msg["Message"].replace(req["recipient"], "someone.else@example.test")
        return 200, {"status": sns_post(req["endpoint"], msg), "ses_message_id": sent[-1]["id"]}
    return 404, {"message": "unknown SNS control " + path}


sns_base = sns_setup() if args.sns_dir else None
# socketserver's listen backlog is 5: a sender opening 128 connections at once would see SYNs
# dropped and retried a second or more later.
http.server.ThreadingHTTPServer.request_queue_size = 1024
server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
print("ready %d" % args.port, flush=True)
server.serve_forever()
