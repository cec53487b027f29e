#!/usr/bin/env python3
"""Dev server for the planfiles console, for working on it without a Rust build.

Serves the console the way the service will:
  GET /ui/                     index.html, with %ASSETS% replaced by /ui/assets/dev
  GET /ui/assets/dev/<name>    the files of src/http/console/
both with `Content-Security-Policy: default-src 'self'; frame-ancestors 'none'` and
`Referrer-Policy: no-referrer`. Every other request (method, headers, body) is forwarded to
the real service; text/event-stream answers are streamed chunk by chunk.

    python3 tests/browser/devserver.py --listen 127.0.0.1:18081 --upstream http://127.0.0.1:18080

Standard library only.
"""
import argparse
import http.client
import mimetypes
import os
import socket
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
CONSOLE = os.path.normpath(os.path.join(HERE, "..", "..", "src", "http", "console"))
ASSETS = "/ui/assets/dev"
CSP = "default-src 'self'; frame-ancestors 'none'"
HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "host", "content-length",
}
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None  # (host, port)
    console_dir = CONSOLE

    def log_message(self, fmt, *args):  # quiet; errors still go to stderr
        if os.environ.get("DEVSERVER_LOG"):
            sys.stderr.write("devserver: " + (fmt % args) + "\n")

    # ---- the console ----

    def console(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/ui":
            return self.send_plain(308, b"", {"Location": "/ui/"})
        if path == "/ui/":
            with open(os.path.join(self.console_dir, "index.html"), "rb") as f:
                body = f.read().replace(b"%ASSETS%", ASSETS.encode())
            return self.send_plain(200, body, {"Content-Type": TYPES[".html"]}, console=True)
        if path.startswith(ASSETS + "/"):
            name = path[len(ASSETS) + 1:]
            full = os.path.join(self.console_dir, name)
            if "/" not in name and name and not name.startswith(".") and os.path.isfile(full):
                with open(full, "rb") as f:
                    body = f.read()
                ext = os.path.splitext(name)[1]
                ctype = TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"
                return self.send_plain(200, body, {"Content-Type": ctype}, console=True)
        return self.send_plain(404, b"not found\n", {"Content-Type": "text/plain"}, console=True)

    def send_plain(self, status, body, headers, console=False):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if console:
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # ---- forwarding ----

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        host, port = self.upstream
        conn = http.client.HTTPConnection(host, port, timeout=3600)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            res = conn.getresponse()
        except OSError as e:
            conn.close()
            return self.send_plain(502, f"upstream: {e}\n".encode(), {"Content-Type": "text/plain"})
        ctype = res.getheader("Content-Type", "")
        try:
            self.send_response(res.status, res.reason)
            for k, v in res.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            if ctype.startswith("text/event-stream"):
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                while True:
                    chunk = res.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            else:
                data = res.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True
        finally:
            conn.close()

    def handle_any(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/ui" or path.startswith("/ui/"):
            if self.command not in ("GET", "HEAD"):
                return self.send_plain(405, b"", {"Allow": "GET, HEAD"}, console=True)
            return self.console()
        return self.forward()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="127.0.0.1:18081", help="host:port to serve on")
    ap.add_argument("--upstream", default="http://127.0.0.1:18080", help="the planfiles service")
    ap.add_argument("--console-dir", default=CONSOLE, help="the console's files")
    args = ap.parse_args()
    up = urllib.parse.urlsplit(args.upstream)
    Handler.upstream = (up.hostname, up.port or 80)
    Handler.console_dir = args.console_dir
    host, port = args.listen.rsplit(":", 1)
    server = Server((host, int(port)), Handler)
    print(f"devserver: http://{host}:{port}/ui/ -> {args.upstream}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
