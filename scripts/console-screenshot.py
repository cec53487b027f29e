#!/usr/bin/env python3
"""Takes the README's screenshot of the console (docs/console.png) on the demo tenant acme.

    cargo build --release && python3 scripts/console-screenshot.py

Starts target/release/planfiles on a fresh copy of the demo tenants (port 18555), signs in
with a token for acme in headless Chromium (/usr/bin/chromium, Playwright for Python), opens
a compare of the last two versions when there are two, and saves the page, 1280 px wide.
PLANFILES_BIN names another binary (a debug build's). Needs what tests/browser needs.
"""
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("PLANFILES_BIN") or os.path.join(ROOT, "target", "release", "planfiles")
ADDR = "127.0.0.1:18555"


def main():
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as data:
        env = dict(os.environ, PLANFILES_DATA_DIR=data, PLANFILES_BIND=ADDR, PLANFILES_LOG="warn")
        server = subprocess.Popen([BIN, "serve"], cwd=ROOT, env=env)
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://{ADDR}/readyz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
            token = subprocess.run([BIN, "token", "--tenant", "acme", "--name", "Dana Whitfield"],
                                   cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.strip()
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"http://{ADDR}/ui/")
                page.fill("#token", token)
                page.get_by_role("button", name="Sign in").click()
                page.get_by_text("Stored YAML text").wait_for()
                page.wait_for_timeout(500)
                enabled = page.locator("button:has-text('Compare with previous'):enabled")
                if enabled.count():
                    enabled.first.click()
                    page.get_by_text("Text diff").wait_for()
                out = os.path.join(ROOT, "docs", "console.png")
                page.screenshot(path=out, full_page=True)
                browser.close()
                print(out)
        finally:
            server.terminate()
            server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
