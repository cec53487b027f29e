#!/usr/bin/env python3
"""Browser test of CORS: pages on two other origins call the planfiles API from Chromium.

    python3 tests/browser/cors_test.py --api http://127.0.0.1:18080 --token "$TOKEN" \
        --listed-port 18091 --unlisted-port 18092

planfiles must list http://127.0.0.1:<listed-port> in server.cors_allowed_origins and not
the other. Each port serves an empty page (its own origin); from it the browser reads the
integration file (reading ETag and X-Request-Id), PUTs it back with If-Match, an
Idempotency-Key and a JSON body (a preflighted request), takes a stream ticket and opens an
EventSource with it. From the listed origin all of it works; from the other the browser
refuses every answer. Exits 0 when every check passed, 1 otherwise.

Needs `pip install playwright` and /usr/bin/chromium; it never downloads a browser.
"""
import argparse
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHROMIUM = "/usr/bin/chromium"

PROBE = """async ([api, token]) => {
  const out = {};
  const auth = { Authorization: `Bearer ${token}` };
  try {
    const got = await fetch(`${api}/plans/integration-file`, { headers: auth });
    const body = await got.json();
    out.get = { status: got.status, etag: got.headers.get("ETag"), requestId: got.headers.get("X-Request-Id") };
    const put = await fetch(`${api}/plans/integration-file`, {
      method: "PUT",
      headers: { ...auth, "Content-Type": "application/json", "If-Match": got.headers.get("ETag"),
                 "Idempotency-Key": `cors-${Date.now()}` },
      body: JSON.stringify({ content: body.content, message: "from another origin" }),
    });
    out.put = { status: put.status, etag: put.headers.get("ETag") };
    const t = await fetch(`${api}/plans/events/tickets`, { method: "POST", headers: auth });
    const { ticket } = await t.json();
    out.stream = await new Promise((resolve) => {
      const es = new EventSource(`${api}/plans/events?ticket=${encodeURIComponent(ticket)}`);
      const done = (v) => { es.close(); resolve(v); };
      es.onopen = () => done("open");
      es.onerror = () => done("error");
      setTimeout(() => done("timeout"), 5000);
    });
  } catch (e) {
    out.error = String(e);
  }
  return out;
}"""


class Empty(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<!doctype html><title>another origin</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(port):
    server = ThreadingHTTPServer(("127.0.0.1", port), Empty)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--api", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--listed-port", type=int, required=True)
    ap.add_argument("--unlisted-port", type=int, required=True)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    servers = [serve(args.listed_port), serve(args.unlisted_port)]
    failures = []

    def check(ok, what):
        print(("  ok: " if ok else "  FAILED: ") + what)
        if not ok:
            failures.append(what)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for port, listed in [(args.listed_port, True), (args.unlisted_port, False)]:
            origin = f"http://127.0.0.1:{port}"
            print(f"== a page on {origin} ({'listed' if listed else 'not listed'})")
            page = browser.new_page()
            page.goto(origin + "/")
            out = page.evaluate(PROBE, [args.api, args.token])
            print(f"  {out}")
            if listed:
                check("error" not in out, "no request was refused")
                get = out.get("get", {})
                check(get.get("status") == 200, "GET is 200")
                check(bool(get.get("etag")), "the page reads ETag")
                check(bool(get.get("requestId")), "the page reads X-Request-Id")
                check(out.get("put", {}).get("status") == 200, "a preflighted PUT with If-Match and a key is 200")
                check(out.get("stream") == "open", "an EventSource with a ticket opens")
            else:
                check("error" in out and "get" not in out, "the browser refuses the API's answer")
            page.close()
        browser.close()
    for s in servers:
        s.shutdown()
    if failures:
        print(f"\nFAIL: {failures}", file=sys.stderr)
        return 1
    print("\nPASS: cors test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
