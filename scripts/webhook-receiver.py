#!/usr/bin/env python3
"""A webhook receiver for the README's walkthrough: verifies each delivery's Standard Webhooks
signature with the `standardwebhooks` package (pip install standardwebhooks) and prints it.

Usage: webhook-receiver.py SECRET [PORT]   (SECRET: the whsec_... of the subscription)
"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

hook = Webhook(sys.argv[1])


class Receive(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        try:
            event = hook.verify(body, dict(self.headers))
        except WebhookVerificationError as e:
            print("refused:", e, flush=True)
            self.send_response(401)
            self.end_headers()
            return
        data = event["data"]
        print("verified", event["type"], data["commit_sha"][:12], data.get("file", ""),
              "by", data.get("author", {}).get("name", "-"), flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 9000), Receive).serve_forever()
