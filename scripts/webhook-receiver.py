#!/usr/bin/env python3
"""A webhook receiver for the README's walkthrough: verifies each delivery's Standard Webhooks
signature (HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>" with the subscription's
secret, the timestamp within 5 minutes) and prints it. Python's standard library only: no
package to install, no virtualenv.

Usage: webhook-receiver.py SECRET [PORT]   (SECRET: the whsec_... of the subscription)
"""
import base64
import hashlib
import hmac
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

SECRET = base64.b64decode(sys.argv[1].removeprefix("whsec_"))
TOLERANCE_SECS = 5 * 60


def verify(body: bytes, headers) -> dict:
    """The event, if the delivery is signed with SECRET and recent; else ValueError."""
    msg_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and stamp and signatures):
        raise ValueError("missing webhook-id, webhook-timestamp or webhook-signature")
    if abs(time.time() - int(stamp)) > TOLERANCE_SECS:
        raise ValueError("the timestamp is more than 5 minutes away")
    signed = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(SECRET, signed, hashlib.sha256).digest()).decode()
    for sig in signatures.split():
        version, _, value = sig.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return json.loads(body)
    raise ValueError("no signature matches")


class Receive(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        try:
            event = verify(body, self.headers)
        except ValueError as e:
            print("refused:", e, flush=True)
            self.send_response(401)
            self.end_headers()
            return
        data = event["data"]
        # A commit's event names its commit and file; a proposal's step, its step and number.
        commit = data.get("commit_sha") or data.get("step_sha", "")
        what = data.get("file") or ("#%s" % data["number"] if "number" in data else "")
        who = data.get("by", data.get("author", {}))
        print("verified", event["type"], commit[:12], what, "by", who.get("name", "-"), flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 9000), Receive).serve_forever()
