#!/usr/bin/env python3
"""Browser test of the planfiles console (GET /ui/), with Playwright driving Debian's Chromium.

    python3 tests/browser/console_test.py --base-url http://127.0.0.1:18081 \
        --planfiles target/debug/planfiles --data-dir /tmp/console-data --artefacts /tmp/console-art

Arguments (or environment variables):
  --base-url   CONSOLE_BASE_URL    a server that serves /ui/ and the API on one origin
  --planfiles  PLANFILES_BIN       the planfiles binary: mints tokens (`planfiles token`) and
                                   creates the test's tenant (`planfiles tenant create`), run
                                   with cwd = the repository root
  --data-dir   CONSOLE_DATA_DIR    the service's data dir (tenant creation, plain-git commits)
  --artefacts  CONSOLE_ARTEFACTS   where the screenshots go
  --tenant     CONSOLE_TENANT      use this existing tenant instead of a new one (its files
                                   are rewritten)
The caller's environment is passed to the binary as it is (PLANFILES_JWT_SECRET,
PLANFILES_CONFIG), with PLANFILES_DATA_DIR set to --data-dir.

Needs `pip install playwright` and /usr/bin/chromium (`apt-get install chromium`); it never
downloads a browser. Exits 0 when every check passed, 1 with the failing check otherwise.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import uuid
from contextlib import contextmanager

from playwright.sync_api import sync_playwright

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PAGE_SIZE = 5  # the console's history page size for this test (/ui/?limit=5)
LIVE_WITHIN = 2.0  # seconds a change may take to appear in the open console, once it is made
INT, CONF = "integration-file", "configuration-file"

SEED_YAML = """# Integrations of the console test tenant.
aws:
  # production
  - account_id: "123456789012"
    regions:
      - us-east-1
      - eu-west-1
    type: aws
drata:
  workspace: console-test   # trailing comment
"""


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    print(f"  ok: {what}", flush=True)


def step(title):
    print(f"\n== {title}", flush=True)


# ---------------------------------------------------------------- the service, from Python

class Client:
    """Another client of the API (plain HTTP)."""

    def __init__(self, base, token):
        self.base, self.token = base.rstrip("/"), token

    def call(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=15) as res:
                return res.status, json.loads(res.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stored_text(self, path):
        """A file's stored text, as `Accept: application/yaml` answers it."""
        req = urllib.request.Request(self.base + path)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/yaml")
        with urllib.request.urlopen(req, timeout=15) as res:
            return res.read().decode()

    def ok(self, method, path, body=None, headers=None):
        status, answer = self.call(method, path, body, headers)
        if status != 200:
            raise Failure(f"{method} {path} answered {status}: {answer}")
        return answer

    def put_integration(self, text, request_id=None, message=None):
        sha = self.ok("GET", "/plans/integration-file")["file_sha"]
        headers = {"If-Match": f'"{sha}"'}
        if request_id:
            headers["X-Request-Id"] = request_id
        body = {"content": text}
        if message:
            body["message"] = message
        return self.ok("PUT", "/plans/integration-file", body, headers)

    def put_configuration(self, payload):
        sha = self.ok("GET", "/plans/configuration-file")["sha"]
        return self.ok("PUT", "/plans/configuration-file", {"payload": payload, "file_sha": sha})


def raw_get(base, path, accept=None):
    """A GET as it is answered (no redirect followed), with `Accept` when given."""
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(base).netloc, timeout=15)
    conn.request("GET", path, headers={"Accept": accept} if accept else {})
    return conn.getresponse()


class Binary:
    def __init__(self, path, data_dir):
        self.path, self.env = path, dict(os.environ, PLANFILES_DATA_DIR=data_dir)

    def run(self, *args):
        res = subprocess.run([self.path, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise Failure(f"planfiles {' '.join(args[:2])} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout.strip()

    def token(self, tenant, *perms, name=None, email=None, ttl=None):
        args = ["token", "--tenant", tenant]
        for p in perms:
            args += ["--permission", p]
        if name:
            args += ["--name", name]
        if email:
            args += ["--email", email]
        if ttl:
            args += ["--ttl", str(ttl)]
        return self.run(*args)


def plain_git_commit(repo, message, append):
    """Commits integrations.yml + `append` on main with git plumbing, as an outside git user."""
    env = dict(os.environ, GIT_AUTHOR_NAME="Git Person", GIT_AUTHOR_EMAIL="git@console.test",
               GIT_COMMITTER_NAME="Git Person", GIT_COMMITTER_EMAIL="git@console.test",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")

    def git(*args, data=None, extra=None):
        res = subprocess.run(["git", "--git-dir", repo, *args], input=data, capture_output=True,
                             text=True, env=dict(env, **(extra or {})), timeout=30)
        if res.returncode != 0:
            raise Failure(f"git {args[0]} failed: {res.stderr.strip()}")
        return res.stdout.strip()

    old = git("rev-parse", "refs/heads/main")
    text = git("show", f"{old}:integrations.yml") + "\n" + append
    blob = git("hash-object", "-w", "--stdin", data=text)
    with tempfile.TemporaryDirectory() as tmp:
        index = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        git("read-tree", old, extra=index)
        git("update-index", "--cacheinfo", f"100644,{blob},integrations.yml", extra=index)
        tree = git("write-tree", extra=index)
    commit = git("commit-tree", tree, "-p", old, "-m", message)
    git("update-ref", "refs/heads/main", commit, old)
    return commit, text


def git_push(base, tenant, token, message, append):
    """Clones the tenant over HTTP, commits integrations.yml + `append` as Git Author, and
    pushes with `token` (whose identity the service records as the pusher)."""
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0")
    auth = ["-c", f"http.extraHeader=Authorization: Bearer {token}"]

    def git(*args):
        res = subprocess.run(["git", *args], capture_output=True, text=True, env=env, timeout=60)
        if res.returncode != 0:
            raise Failure(f"git {args[2] if args[0] == '-c' else args[0]} failed: {res.stderr.strip()}")
        return res.stdout.strip()

    with tempfile.TemporaryDirectory() as tmp:
        work = os.path.join(tmp, "work")
        git(*auth, "clone", "-q", f"{base}/git/{tenant}.git", work)
        with open(os.path.join(work, "integrations.yml"), "a") as f:
            f.write(append)
        git("-C", work, "-c", "user.name=Git Author", "-c", "user.email=author@console.test",
            "commit", "-qam", message)
        git("-C", work, *auth, "push", "-q", "origin", "main")
        return git("-C", work, "rev-parse", "HEAD")


# ---------------------------------------------------------------- the browser

class Watch:
    """Console errors, page errors, CSP violations and every request and console response."""

    def __init__(self, base):
        self.base = base
        self.origin = "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(base))
        self.errors, self.allowed = [], []
        self.allow = []  # regexes of console errors expected right now
        self.requests, self.console_responses = [], []

    def attach(self, page):
        page.on("console", self.on_console)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("request", lambda r: self.requests.append(r))
        page.on("response", self.on_response)
        page.add_init_script("""
            document.addEventListener("securitypolicyviolation", (e) => {
              console.error("CSP violation: " + e.violatedDirective + " blocked " + e.blockedURI);
            });
            // Keep the page's event streams, so that the test can cut one (Chromium's offline
            // emulation leaves an open stream alone).
            window.__sources = [];
            const Native = window.EventSource;
            window.EventSource = class extends Native {
              constructor(...args) {
                super(...args);
                window.__sources.push(this);
                // What each stream received, for the state printed when a step fails.
                const n = window.__sources.length;
                for (const type of ["head", "reset", "integration-file", "configuration-file", "error", "open"]) {
                  this.addEventListener(type, (e) => window.__events.push(
                    `${(performance.now() / 1000).toFixed(2)} s stream ${n} ${type} ${e.lastEventId || ""}`));
                }
              }
            };
            window.__events = [];
        """)

    def on_console(self, msg):
        if msg.type not in ("error", "warning"):
            return
        text = msg.text
        if msg.type == "warning" and "CSP" not in text and "Content Security Policy" not in text:
            return
        if any(re.search(p, text) for p in self.allow):
            self.allowed.append(text)
        else:
            self.errors.append(f"console {msg.type}: {text}")

    def on_response(self, res):
        if urllib.parse.urlsplit(res.url).path.startswith("/ui/"):
            try:
                body = res.body()
            except Exception:  # a response the page no longer holds
                body = None
            self.console_responses.append((res.url, res.status, res.all_headers(), body))

    @contextmanager
    def expecting(self, *patterns):
        self.allow = list(patterns)
        try:
            yield
        finally:
            self.allow = []

    def assert_clean(self, where):
        if self.errors:
            raise Failure(f"{where}: console errors or CSP violations:\n  " + "\n  ".join(self.errors))


def shot(page, art, name):
    path = os.path.join(art, f"{name}.png")
    page.screenshot(path=path, full_page=True)
    print(f"  screenshot {path}")


def wait_js(page, fn, arg=None, timeout=15000):
    """Waits until the JavaScript function `fn` (a string) returns a truthy value. Polls from
    here with page.evaluate: Playwright's wait_for_function evaluates strings with eval in the
    page, which the console's CSP (rightly) refuses."""
    deadline = time.monotonic() + timeout / 1000
    while True:
        if page.evaluate(fn, arg):
            return
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout} ms waiting for {fn}")
        time.sleep(0.05)


def shot_el(page, art, name, selector):
    path = os.path.join(art, f"{name}.png")
    page.locator(selector).screenshot(path=path)
    print(f"  screenshot {path}")


def overflow(page):
    """How wide the page is, and the visible elements that reach past the viewport's edge."""
    return page.evaluate("""() => {
    const w = document.documentElement.clientWidth;
    const out = [];
    for (const el of document.querySelectorAll('body *')) {
        // Hidden parts, code (which scrolls in its own box) and the skip link, which
        // waits off screen until it has the focus.
        if (el.closest('[hidden]') || el.closest('pre') || el.closest('.skip, .visually-hidden')) continue;
        const r = el.getBoundingClientRect();
        if (r.width > 0 && (r.right > w + 1 || r.left < -1)) out.push(el.tagName + (el.id ? '#' + el.id : '') + '.' + el.className);
    }
    return { w, scroll: document.documentElement.scrollWidth, out: out.slice(0, 8) };
}""")


def check_brand_in_view(page, where):
    """The brand (planfiles console) is wholly on the screen, as a newcomer sees it."""
    box = page.locator(".brand").bounding_box()
    view = page.viewport_size
    check(box is not None and box["y"] >= 0 and box["y"] + box["height"] <= view["height"]
          and box["x"] >= 0 and box["x"] + box["width"] <= view["width"],
          f"the brand is in view {where} ({box} in {view['width']}x{view['height']})")


def sign_in(page, token):
    page.fill("#token", token)
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#app:not([hidden])")
    wait_js(page, "document.getElementById('live').textContent === 'connected'", timeout=10000)
    page.wait_for_selector("table.history tbody tr[data-commit]")


def sign_out(page):
    page.click("#sign-out")
    page.wait_for_selector("#signin:not([hidden])")


def history_commits(page):
    return page.eval_on_selector_all("table.history tbody tr[data-commit]", "rs => rs.map(r => r.dataset.commit)")


def code_text(page):
    """The YAML shown in the current-version view, as text (line numbers are CSS only)."""
    return page.eval_on_selector("#current-body pre.code code", "c => c.textContent")


def wait_row(page, commit, started, what):
    page.wait_for_selector(f'table.history tr.is-new[data-commit="{commit}"]', timeout=10000)
    took = time.monotonic() - started
    check(took <= LIVE_WITHIN, f"{what} appeared live, marked new, in {took:.2f} s (limit {LIVE_WITHIN} s)")
    check(history_commits(page)[0] == commit, f"{what} is at the top of the history")
    return took


# What the page looked like when a step failed: printed last, after the traceback.
FAILURE_STATE = []


def state_text(page, watch, repo):
    """What the page and the repository looked like when a step failed."""
    lines = []
    for what, get in [
        ("page time", lambda: f'{page.evaluate("performance.now() / 1000"):.2f} s'),
        ("live", lambda: page.inner_text("#live")),
        ("flash", lambda: page.inner_text("#flash")),
        ("history, top rows", lambda: " ".join(c[:12] for c in history_commits(page)[:4])),
        ("main in the repository", lambda: subprocess.run(
            ["git", "--git-dir", repo, "rev-parse", "refs/heads/main"],
            capture_output=True, text=True, timeout=10).stdout.strip()[:12]),
        ("the streams' last events", lambda: "; ".join(page.evaluate("window.__events.slice(-8)"))),
        ("the last requests", lambda: "; ".join(
            f"{r.method} {urllib.parse.urlsplit(r.url).path}" for r in watch.requests[-6:])),
        ("console errors", lambda: "; ".join(watch.errors[-4:])),
    ]:
        try:
            lines.append(f"  {what}: {get()}")
        except Exception as e:  # the page may be gone: say so, and go on
            lines.append(f"  {what}: (unreadable: {type(e).__name__})")
    return "state at the failure:\n" + "\n".join(lines)


def select_file(page, file):
    page.click(f'.tab[data-file="{file}"]')
    page.wait_for_selector(f'.tab[data-file="{file}"][aria-current]')


# ---------------------------------------------------------------- the test

def run(args):
    binary = Binary(args.planfiles, args.data_dir)
    os.makedirs(args.artefacts, exist_ok=True)
    tenant = args.tenant
    if not tenant:
        tenant = "console-" + uuid.uuid4().hex[:10]
        binary.run("tenant", "create", tenant)
    print(f"tenant {tenant}")
    writer = binary.token(tenant, name="Console Tester", email="tester@console.test")
    other_token = binary.token(tenant, name="Other Client", email="other@console.test")
    reader = binary.token(tenant, "jit.integrations.read", "jit.preferences.read", name="Read Only")
    tokens = [writer, other_token, reader]
    other = Client(args.base_url, other_token)
    repo = os.path.join(args.data_dir, "tenants", f"{tenant}.git")
    check(os.path.isdir(repo), f"the tenant's repository is at {repo}")

    step("seed the tenant over HTTP: files with comments, and more history than one page")
    seed = other.put_integration(SEED_YAML, message="Seed the console test")
    other.put_configuration({"folders": [{"path": "src/", "exclude": ["*.log"]}, {"path": "web"}]})
    text = SEED_YAML
    for i in range(PAGE_SIZE):
        text += f"# revision {i}\n"
        other.put_integration(text, message=f"Revision {i}")
    added = other.put_integration(text.replace("drata:", '  - account_id: "999988887777"\n    regions:\n      - eu-central-1\n    type: aws\ndrata:'),
                                  message="Add account 999988887777")
    current = other.ok("GET", "/plans/integration-file")
    check(current["content"]["aws"][1]["account_id"] == "999988887777", "the account was added over HTTP")

    base = args.base_url.rstrip("/")
    watch = Watch(base)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1300, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(15000)
        watch.attach(page)
        try:
            steps(page, context, watch, args, base, tenant, binary, other, repo, seed, added, tokens, writer, reader)
        except Exception:
            try:
                shot(page, args.artefacts, "failure")
            except Exception:
                pass
            FAILURE_STATE.append(state_text(page, watch, repo))
            raise
        finally:
            browser.close()

    step("console responses: headers and bodies")
    check(len(watch.console_responses) >= 4, f"{len(watch.console_responses)} console responses seen (index and assets)")
    for url, status, headers, body in watch.console_responses:
        csp = headers.get("content-security-policy", "")
        if not ("default-src 'self'" in csp and "frame-ancestors 'none'" in csp):
            raise Failure(f"{url}: Content-Security-Policy is {csp!r}")
        if headers.get("referrer-policy") != "no-referrer":
            raise Failure(f"{url}: Referrer-Policy is {headers.get('referrer-policy')!r}")
        if body is None:
            raise Failure(f"{url}: the body could not be read")
        for t in tokens:
            for part in [t] + t.split("."):
                if len(part) >= 16 and part.encode() in body:
                    raise Failure(f"{url} contains (part of) a token")
    paths = sorted({urllib.parse.urlsplit(u).path for u, *_ in watch.console_responses})
    check(True, "every console response has the CSP and Referrer-Policy, and no token: " + ", ".join(paths))


def steps(page, context, watch, args, base, tenant, binary, other, repo, seed, added, tokens, writer, reader):
    art = args.artefacts

    step("the README's screenshot is of a 1280 px screen (scripts/console-screenshot.py)")
    with open(os.path.join(REPO, "docs", "console.png"), "rb") as f:
        head = f.read(24)
    width = int.from_bytes(head[16:20], "big")
    check(head[:8] == b"\x89PNG\r\n\x1a\n" and width == 1280, f"docs/console.png is a PNG 1280 px wide ({width} px)")

    step("/ leads a browser to the console, and API clients to the 404 of an unknown path")
    for accept, status in [("text/html,application/xhtml+xml,*/*;q=0.8", 303), ("application/json", 404), (None, 404)]:
        res = raw_get(base, "/", accept)
        where = res.getheader("location")
        check(res.status == status and (where == "/ui/" if status == 303 else "not_found" in res.read().decode()),
              f"GET / with Accept {accept}: {res.status} {where or res.getheader('content-type')}")
    page.goto(f"{base}/")
    page.wait_for_selector("#signin:not([hidden])")
    check(urllib.parse.urlsplit(page.url).path == "/ui/", f"a browser that opens / lands on the console ({page.url})")

    step("signed out")
    page.goto(f"{base}/ui/?limit={PAGE_SIZE}")
    page.wait_for_selector("#signin:not([hidden])")
    check(page.is_hidden("#app"), "the files are hidden before signing in")
    check(page.evaluate("document.activeElement.id") == "token", "the token field has the focus")
    help_text = page.inner_text("#signin")
    check("planfiles token --tenant" in help_text and "--permission jit.integrations.read" in help_text,
          "the sign-in page says where a token comes from (planfiles token, and its permissions)")
    shot(page, art, "1-signed-out")
    page.fill("#token", "not-a-token")
    page.click("#signin-form button[type=submit]")
    check("not a JWT" in page.inner_text("#signin-msg"), "a malformed token is refused with a message")
    page.fill("#token", "")
    watch.assert_clean("signed out")

    step("sign in")
    sign_in(page, writer)
    check(page.inner_text("#who-tenant") == tenant, "the tenant from the token is shown")
    check("jit.integrations.write" in page.inner_text("#who-perms"), "the permissions are shown")
    check(page.get_attribute("#who-exp time", "title").endswith("Z"), "the expiry has the ISO time as a title")
    check(page.evaluate("sessionStorage.getItem('planfiles.token')") == writer, "the token is in sessionStorage")
    check(page.evaluate("localStorage.length") == 0, "nothing is in localStorage")
    check(page.input_value("#token") == "", "the token field is cleared")

    step("both files as stored")
    stored = other.ok("GET", "/plans/integration-file")
    wait_js(page, "sha => document.querySelector('#current-body .meta code')?.title === sha", arg=stored["file_sha"])
    check(code_text(page) == stored["raw_content"], "the integration file is shown byte for byte, comments included")
    check(page.locator("#current-body .line.comment").count() >= 2, "comment lines are marked")
    check(page.inner_text("#current-body .badge") == "valid", "its status is shown")
    head = other.ok("GET", f"/plans/integration-file/history?limit=1")["entries"][0]["commit_sha"]
    check(page.get_attribute("#current-body .meta div:nth-child(3) code", "title") == head, "the head commit (from the stream) is shown")
    check(page.is_visible("#edit-open"), "a writer sees the Edit button")
    shot(page, art, "2-files")
    select_file(page, CONF)
    page.wait_for_selector("#current-body pre.code")
    conf = other.ok("GET", "/plans/configuration-file")
    check(page.get_attribute("#current-body .meta code", "title") == conf["sha"], "the configuration's blob id is shown")
    shown = code_text(page)
    check("path: src/" in shown and "*.log" in shown and "path: web" in shown, f"the configuration content is shown: {shown!r}")
    check(shown == other.stored_text("/plans/configuration-file"), "the configuration file is shown byte for byte as stored")
    check("Stored YAML text" in page.inner_text("#current-body"), "…and labelled as the stored text")
    shot(page, art, "2-files-configuration")
    select_file(page, INT)

    step("history, paged")
    page.wait_for_selector("table.history tbody tr[data-commit]")
    first = history_commits(page)
    check(len(first) == PAGE_SIZE, f"the first page holds {PAGE_SIZE} commits")
    row = page.locator("table.history tbody tr").first
    check("Other Client" in row.inner_text() and "Add account 999988887777" in row.inner_text(), "a row shows author and message subject")
    t = row.locator("time")
    check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", t.get_attribute("title") or ""), "the date has its full ISO text as a title")
    check(row.locator("code.rid").count() == 1, "the request id is shown")
    check("no" in row.locator("td").nth(3).inner_text(), "forced or not is shown")
    shot(page, art, "3-history")
    page.click("#history-older")
    wait_js(page, f"document.querySelectorAll('table.history tbody tr[data-commit]').length > {PAGE_SIZE}")
    all_rows = history_commits(page)
    full = other.ok("GET", "/plans/integration-file/history?limit=100")["entries"]
    check(all_rows == [e["commit_sha"] for e in full], f"after 'Older' all {len(full)} commits are listed, newest first")
    check("No older versions." in page.inner_text("#history-body"), "the last page says so")
    seed_row = [e for e in full if e["commit_sha"] == seed["commit_sha"]]
    check(len(seed_row) == 1, "the seed commit is in the history")
    watch.assert_clean("history")

    step("compare")
    page.click(f'table.history tr[data-commit="{added["commit_sha"]}"] button:has-text("Compare with previous")')
    page.wait_for_selector("#compare-body .changes li")
    items = page.eval_on_selector_all("#compare-body .changes li", "ls => ls.map(l => l.textContent)")
    check(any("added account 999988887777" in i for i in items), f"the keyed list says 'added account 999988887777' ({items})")
    check(page.locator("#compare-body pre.diff .dl-add").count() >= 3, "the unified diff colours added lines")
    check("999988887777" in page.inner_text("#compare-body pre.diff"), "the unified diff shows the account")
    check(page.evaluate("document.activeElement.id") == "compare-h", "focus moves to the comparison")
    shot(page, art, "4-compare")
    shot_el(page, art, "4-compare-panel", "#compare")
    # Any two versions, with the selects: from the seed to main.
    page.select_option("#compare-from", seed["commit_sha"])
    page.select_option("#compare-to", "")
    page.click("#compare-form button[type=submit]")
    wait_js(page, "document.querySelector('#compare-body .compare-sides')?.textContent.includes('(the current version)')")
    items = page.eval_on_selector_all("#compare-body .changes li", "ls => ls.map(l => l.textContent)")
    check(any("added account 999988887777" in i for i in items), "a compare of any two versions works too")
    check(page.is_hidden("#compare-stale"), "a fresh comparison is not marked out of date")
    check("commit" in page.inner_text("#compare-body .compare-sides"), "the compared versions are named as commits")

    step("view one version")
    page.click(f'table.history tr[data-commit="{seed["commit_sha"]}"] button:has-text("View")')
    wait_js(page, "document.getElementById('current-h').textContent === 'An older version'")
    page.wait_for_selector("#current-body pre.code")
    check(code_text(page) == SEED_YAML, "'View' shows the file as stored in that commit")
    check(seed["commit_sha"][:10] in page.inner_text("#current-body .notice"), "…and names its commit")
    check(page.is_hidden("#edit-open"), "an older version is not edited")
    page.click("#view-back")
    wait_js(page, "document.getElementById('current-h').textContent === 'Current version'")
    check(code_text(page) == other.ok("GET", "/plans/integration-file")["raw_content"], "'Back' shows the current version again")

    step("live: a PUT by another client")
    rid = "console-live-" + uuid.uuid4().hex[:8]
    text = other.ok("GET", "/plans/integration-file")["raw_content"] + "# live put\n"
    ans = other.put_integration(text, request_id=rid)
    started = time.monotonic()
    wait_row(page, ans["commit_sha"], started, "the other client's PUT")
    check(rid in page.locator("table.history tbody tr").first.inner_text(), "…with its request id")
    check(page.locator(f'table.history tr[data-commit="{ans["commit_sha"]}"] .badge-verified').count() == 1,
          "…marked Verified (signed by the service)")
    wait_js(page, "sha => document.querySelector('#current-body .meta code')?.title === sha", arg=ans["file_sha"], timeout=10000)
    check(code_text(page) == text, "the file view is refreshed to the new text")
    check(page.is_visible("#compare-stale"), "the comparison with the current version says it is out of date")

    step("live: a plain git commit")
    commit, text = plain_git_commit(repo, "Plain git change from the console test", "# plain git commit\n")
    started = time.monotonic()
    wait_row(page, commit, started, "the plain git commit")
    top = page.locator("table.history tbody tr").first.inner_text()
    check("Git Person" in top and "Plain git change from the console test" in top, "…with its author and subject")
    check(page.locator(f'table.history tr[data-commit="{commit}"] .badge-unverified').count() == 1,
          "…marked Unverified (plain git's commit carries no signature of the service)")
    wait_js(page, "() => document.querySelector('#current-body pre.code').textContent.includes('# plain git commit')", timeout=10000)
    check(code_text(page) == text, "the file view shows the plain git text")
    watch.assert_clean("live")

    step("live: a git push shows who pushed, beside the commit's author")
    pusher = binary.token(tenant, "planfiles.repos.read", "jit.integrations.write", name="Pusher Person", email="pusher@console.test")
    tokens.append(pusher)
    commit = git_push(base, tenant, pusher, "Pushed from a clone", "# pushed\n")
    page.wait_for_selector(f'table.history tr[data-commit="{commit}"]', timeout=10000)
    author = page.inner_text(f'table.history tr[data-commit="{commit}"] td[data-label="Author"]')
    check("Git Author" in author and "pushed by Pusher Person" in author, f"the pushed commit's row names its author and its pusher ({author!r})")
    page.reload()
    page.wait_for_selector(f'table.history tr[data-commit="{commit}"]')
    author = page.inner_text(f'table.history tr[data-commit="{commit}"] td[data-label="Author"]')
    check("Git Author" in author and "pushed by Pusher Person" in author, f"…and so does the history read again after a reload ({author!r})")
    check("pushed by" not in page.inner_text(f'table.history tr[data-commit="{ans["commit_sha"]}"]'),
          "the row of an API write names no pusher")
    wait_js(page, "document.getElementById('live').textContent === 'connected'", timeout=10000)
    while page.locator("#history-older").count():  # the steps below use the whole history, as before the reload
        rows = len(history_commits(page))
        page.click("#history-older")
        wait_js(page, f"document.querySelectorAll('table.history tbody tr[data-commit]').length > {rows}")

    step("1280 px wide: each date and request id on one line, and the history as wide as the screen")
    page.set_viewport_size({"width": 1280, "height": 1000})
    pieces = page.evaluate("""() => [...document.querySelectorAll('header time, table.history time, table.history code.rid')]
        .map(e => ({ text: e.textContent, id: e.tagName === "CODE", rects: e.getClientRects().length,
                     high: e.getBoundingClientRect().height, font: parseFloat(getComputedStyle(e).fontSize) }))""")
    wrapped = [p["text"] for p in pieces if p["rects"] != 1 or p["high"] > 1.8 * p["font"]]
    rids = sum(1 for p in pieces if p["id"])
    check(len(pieces) >= 10 and rids >= 3 and not wrapped,
          f"{len(pieces)} dates and request ids ({rids} ids), none over two lines ({wrapped})")
    sideways = page.locator(".table-wrap").evaluate("e => [e.scrollWidth, e.clientWidth]")
    check(sideways[0] <= sideways[1], f"the history needs no sideways scroll ({sideways[0]} px in {sideways[1]})")
    shot(page, art, "13-history-1280")
    page.set_viewport_size({"width": 1300, "height": 1000})

    step("validators: a stored file that breaks a schema shows each violation at its line")
    commit, broken = plain_git_commit(repo, "A project id the schema refuses", "gcp:\n  project: Not A Project\n")
    started = time.monotonic()
    wait_row(page, commit, started, "the commit that breaks the schema")
    page.wait_for_selector("#current-body .problem .violations li", timeout=10000)
    items = page.eval_on_selector_all("#current-body .violations li", "ls => ls.map(l => l.textContent)")
    line = broken.count("\n")
    check(items == [f"Line {line}, column 12: /gcp/project: \"Not A Project\" does not match \"^[a-z][a-z0-9-]{{4,28}}[a-z0-9]$\""],
          f"the violation with its line, column and pointer ({items})")
    check(page.inner_text("#current-body .badge") == "invalid", "the status says invalid")
    marked = page.eval_on_selector_all("#current-body pre .line-bad", "ls => ls.map(l => l.textContent)")
    check(marked == ["  project: Not A Project\n"], f"the line at fault is marked in the text ({marked})")
    shot_el(page, art, "4b-invalid-file", "#current")
    fixed = other.put_integration(text, message="Back to the file before the refused project")
    wait_js(page, "sha => document.querySelector('#current-body .meta code')?.title === sha", arg=fixed["file_sha"], timeout=10000)
    check(page.locator("#current-body .violations").count() == 0, "a valid file shows no violations")
    watch.assert_clean("validators")

    step("edit: preview (dry run) and save")
    page.click("#edit-open")
    page.wait_for_selector("#editor:not([hidden])")
    check(page.evaluate("document.activeElement.id") == "editor-text", "the editor has the focus")
    check(page.input_value("#editor-text") == text, "the editor holds the stored text")
    page.fill("#editor-text", "aws: [unclosed\n")
    with watch.expecting(r"status of 422"):
        page.click("#editor-preview")
        page.wait_for_selector("#editor-result .problem")
    problem = page.inner_text("#editor-result .problem")
    check("Invalid content (422)" in problem and "invalid_content" in problem, f"a refused write shows the problem's title, detail and code ({problem.splitlines()[0]})")
    bad_text = text + "gcp:\n  project: Not A Project\n"
    page.fill("#editor-text", bad_text)
    with watch.expecting(r"status of 422"):
        page.click("#editor-preview")
        page.wait_for_selector("#editor-result .violations li")
    items = page.eval_on_selector_all("#editor-result .violations li", "ls => ls.map(l => l.textContent)")
    line = bad_text.count("\n")
    check(len(items) == 1 and items[0].startswith(f"Line {line}, column 12: /content/gcp/project: "),
          f"the preview's refusal lists the violation at its line in the text ({items})")
    marked = page.eval_on_selector_all("#editor-result pre .line-bad", "ls => ls.map(l => l.textContent)")
    check(marked == ["  project: Not A Project\n"], f"…and marks that line of the text ({marked})")
    shot_el(page, art, "5-edit-schema-violation", "#editor")
    head = other.ok("GET", "/plans/integration-file/history?limit=1")["entries"][0]["commit_sha"]
    page.click("#editor-save")
    wait_js(page, "() => document.getElementById('editor-result').textContent.includes('Not saved: the preview of this text was refused')", timeout=10000)
    check(other.ok("GET", "/plans/integration-file/history?limit=1")["entries"][0]["commit_sha"] == head,
          "nothing was written")
    # A request sent would have logged its 422 in the browser's console.
    watch.assert_clean("what the preview refused is not sent again")
    new_text = text.replace("drata:", '  - account_id: "111122223333"\n    regions:\n      - ap-south-1\n    type: aws\ndrata:')
    page.fill("#editor-text", new_text)
    page.fill("#editor-message", "Add account 111122223333 from the console")
    page.click("#editor-preview")
    page.wait_for_selector("#editor-result .preview .changes li")
    items = page.eval_on_selector_all("#editor-result .changes li", "ls => ls.map(l => l.textContent)")
    check(items == ["+ added account 111122223333"], f"the dry run's patch is listed ({items})")
    check(other.ok("GET", "/plans/integration-file")["raw_content"] == text, "the dry run wrote nothing")
    shot(page, art, "5-edit-preview")
    shot_el(page, art, "5-edit-preview-panel", "#editor")
    started = time.monotonic()
    page.click("#editor-save")
    page.wait_for_selector("#flash:not([hidden])")
    check("Saved as commit" in page.inner_text("#flash"), "the save is confirmed")
    check(page.is_hidden("#editor"), "the editor closes")
    now = other.ok("GET", "/plans/integration-file")
    check(now["raw_content"] == new_text, "the service stored the edited text byte for byte")
    saved = other.ok("GET", "/plans/integration-file/history?limit=1")["entries"][0]
    check(saved["message"].startswith("Add account 111122223333 from the console\n"), "the message is the commit subject")
    check(not saved["forced"], "the write was guarded (If-Match), not forced")
    page.wait_for_selector(f'table.history tr[data-commit="{saved["commit_sha"]}"]', timeout=10000)

    step("edit: changed since you opened it (412)")
    page.click("#edit-open")
    page.wait_for_selector("#editor:not([hidden])")
    page.fill("#editor-text", new_text + "# my change\n")
    between = other.put_integration(new_text.replace("drata:", '  - account_id: "555566667777"\n    regions:\n      - us-west-1\n    type: aws\ndrata:'),
                                    message="Someone else adds 555566667777")
    page.wait_for_selector("#editor-note .stale", timeout=10000)
    with watch.expecting(r"status of 412"):
        page.click("#editor-save")
        page.wait_for_selector("#editor-result .conflict")
        page.wait_for_selector("#editor-result .conflict .changes li")
    check("Changed since you opened it" in page.inner_text("#editor-result"), "the conflict is explained")
    check("If-Match" not in page.inner_text("#editor-result"), "in words, without HTTP's names")
    page.click("#editor-result details:has-text('What the service answered') summary")
    check("precondition_failed" in page.inner_text("#editor-result .problem"), "the service's answer is there to open")
    items = page.eval_on_selector_all("#editor-result .conflict .changes li", "ls => ls.map(l => l.textContent)")
    check(any("added account 555566667777" in i for i in items), f"the other change's diff is shown ({items})")
    check(other.ok("GET", "/plans/integration-file")["file_sha"] == between["file_sha"], "nothing was overwritten")
    shot(page, art, "6-conflict")
    shot_el(page, art, "6-conflict-panel", "#editor")
    page.click("#conflict-restart")
    wait_js(page, "t => document.getElementById('editor-text').value === t", arg=other.ok("GET", "/plans/integration-file")["raw_content"])
    check(True, "'Start again' puts the current version in the editor")
    page.click("#editor-cancel")
    page.wait_for_selector("#editor", state="hidden")
    watch.assert_clean("conflict")

    step("restore: dry run, then confirm")
    page.wait_for_selector(f'table.history tr[data-commit="{seed["commit_sha"]}"]')
    before = other.ok("GET", "/plans/integration-file")
    page.click(f'table.history tr[data-commit="{seed["commit_sha"]}"] button:has-text("Restore")')
    page.wait_for_selector("#restore-confirm")
    items = page.eval_on_selector_all("#restore-body .changes li", "ls => ls.map(l => l.textContent)")
    check(any("removed account 999988887777" in i for i in items), f"the restore's dry run lists its changes ({items})")
    diff = page.inner_text("#restore-body pre.diff")
    check("-# revision 0" in diff, "the restore's text diff shows the comment lines it would remove")
    check(other.ok("GET", "/plans/integration-file")["file_sha"] == before["file_sha"], "the dry run wrote nothing")
    shot(page, art, "7-restore")
    shot_el(page, art, "7-restore-panel", "#restore")
    page.fill("#restore-message", "Back to the seed")
    page.click("#restore-confirm")
    wait_js(page, "document.getElementById('flash').textContent.startsWith('Restored')")
    after = other.ok("GET", "/plans/integration-file")
    check(after["raw_content"] == SEED_YAML, "the file is the seed's text again")
    restored = other.ok("GET", "/plans/integration-file/history?limit=1")["entries"][0]
    check(f"Restored-From: {seed['commit_sha']}" in restored["message"] and restored["message"].startswith("Back to the seed"), "the commit names what it restored")
    page.wait_for_selector(f'table.history tr[data-commit="{restored["commit_sha"]}"]', timeout=10000)

    step("the configuration file: edit its YAML text, preview and save")
    select_file(page, CONF)
    page.wait_for_selector("#edit-open:not([hidden])")
    page.click("#edit-open")
    page.wait_for_selector("#editor:not([hidden])")
    check(page.inner_text("#editor-label") == "YAML text", "the configuration is edited as its YAML text")
    stored_conf = other.stored_text("/plans/configuration-file")
    check(page.input_value("#editor-text") == stored_conf, "the editor holds the stored text, comments included")
    # Rewritten as a person would: block style, a comment, one folder more.
    edited_conf = ('# Folders to scan\nfolders:\n  - path: src/  # the sources\n    exclude: ["*.log"]\n'
                   '  - path: web\n  - path: docs/\n')
    page.fill("#editor-text", edited_conf)
    page.click("#editor-preview")
    page.wait_for_selector("#editor-result .preview .changes li")
    items = page.eval_on_selector_all("#editor-result .changes li", "ls => ls.map(l => l.textContent)")
    check("+ added folder docs/" in items, f"folder changes are keyed by path ({items})")
    diff = page.inner_text("#editor-result pre.diff")
    check("+  - path: docs/" in diff and "# the sources" in diff, "the preview shows the text diff, the comment included")
    page.click("#editor-save")
    wait_js(page, "document.getElementById('flash').textContent.startsWith('Saved')")
    check(other.stored_text("/plans/configuration-file") == edited_conf, "the configuration's text was stored byte for byte")
    step("a change of comments only is previewed as a change, and saved as one")
    page.click("#edit-open")
    page.wait_for_selector("#editor:not([hidden])")
    page.fill("#editor-text", "# reviewed by the console test\n" + edited_conf)
    page.click("#editor-preview")
    page.wait_for_selector("#editor-result .preview pre.diff")
    preview = page.inner_text("#editor-result .preview")
    check("Only the text changes" in preview and "no commit" not in preview, f"no 'no commit' for a text change ({preview[:80]!r})")
    check("+# reviewed by the console test" in page.inner_text("#editor-result pre.diff"), "the text diff shows the comment line")
    shot(page, art, "5-edit-preview-comment")
    page.click("#editor-save")
    page.wait_for_selector("#editor", state="hidden")
    wait_js(page, "document.getElementById('flash').textContent.startsWith('Saved')")
    check(other.stored_text("/plans/configuration-file").startswith("# reviewed by the console test\n"), "saving made the commit")
    step("compare: a commit of comments only is not '0 changes'")
    comment_commit = other.ok("GET", "/plans/configuration-file/history?limit=1")["entries"][0]["commit_sha"]
    page.click(f'table.history tr[data-commit="{comment_commit}"] button:has-text("Compare with previous")')
    page.wait_for_selector("#compare-body .compare-sides")
    sides = page.inner_text("#compare-body .compare-sides")
    check("0 changes" not in sides and "Only the text changes" in page.inner_text("#compare-body"),
          f"the compare says only the text changes, as the preview does ({sides!r})")
    check("+# reviewed by the console test" in page.inner_text("#compare-body pre.diff"), "…beside the text diff")
    check(page.inner_text("#compare-body .changes-empty") == "No change to the content.", "the change list says the content stays")
    page.click("#edit-open")
    page.wait_for_selector("#editor:not([hidden])")
    page.click("#editor-preview")
    page.wait_for_selector("#editor-result .preview .changes-empty")
    check("saving would make no commit" in page.inner_text("#editor-result .preview"), "an unchanged text says 'no commit'")
    page.click("#editor-cancel")
    select_file(page, INT)
    watch.assert_clean("writes")

    step("live: a lost connection reconnects with a new ticket and since=, missing nothing")
    before_events = [r.url for r in watch.requests if "/plans/events?" in r.url]
    # Cut the stream as a network loss would (the connection closes, EventSource fires error),
    # then write while the console is disconnected: the new stream must replay that commit.
    page.evaluate("""() => {
        const es = window.__sources[window.__sources.length - 1];
        es.close();
        es.dispatchEvent(new Event("error"));
    }""")
    check(page.inner_text("#live").startswith("reconnecting"), "the console says it is reconnecting")
    started = time.monotonic()
    ans = other.put_integration(SEED_YAML + "# written while disconnected\n")
    wait_js(page, "document.getElementById('live').textContent === 'connected'", timeout=10000)
    page.wait_for_selector(f'table.history tr.is-new[data-commit="{ans["commit_sha"]}"]', timeout=5000)
    check(True, f"the commit made while disconnected was replayed ({time.monotonic() - started:.2f} s)")
    after_events = [r.url for r in watch.requests if "/plans/events?" in r.url][len(before_events):]
    check(len(after_events) == 1, "one new stream was opened")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(after_events[0]).query)
    check(re.fullmatch(r"[0-9a-f]{40}", query.get("since", [""])[0]), f"the new stream resumes with since={query.get('since', ['?'])[0][:12]}…")
    tickets = [urllib.parse.parse_qs(urllib.parse.urlsplit(u).query)["ticket"][0] for u in before_events + after_events]
    check(len(tickets) == len(set(tickets)), f"every stream used a new ticket ({len(tickets)} streams)")
    ans = other.put_integration(SEED_YAML + "# after the reconnect\n")
    started = time.monotonic()
    wait_row(page, ans["commit_sha"], started, "a PUT after the reconnect")
    watch.assert_clean("reconnect")

    step("a stored file that is invalid")
    commit, text = plain_git_commit(repo, "Break the file with plain git", "oops: [unclosed\n")
    page.wait_for_selector(f'table.history tr[data-commit="{commit}"]', timeout=5000)
    page.wait_for_selector("#current-body .badge-invalid", timeout=5000)
    check(page.locator("#current-body .problem li").count() >= 1, "the validation errors are listed")
    check(code_text(page) == text, "the broken text is shown as stored")
    shot(page, art, "10-invalid")
    fixed = other.put_integration(SEED_YAML)
    page.wait_for_selector("#current-body .badge-valid", timeout=5000)
    check(True, "a PUT fixes it, and the view follows")

    step("main moved back with plain git: event reset, everything read again")
    subprocess.run(["git", "--git-dir", repo, "update-ref", "refs/heads/main", commit, fixed["commit_sha"]], check=True)
    page.wait_for_selector(f'table.history tr[data-commit="{fixed["commit_sha"]}"]', state="detached", timeout=5000)
    check("moved" in page.inner_text("#flash"), "the console says the branch was moved and read everything again")
    page.wait_for_selector("#current-body .badge-invalid", timeout=5000)
    check(history_commits(page)[0] == commit, "the history starts at the new head")
    other.put_integration(SEED_YAML)
    page.wait_for_selector("#current-body .badge-valid", timeout=5000)

    step("requests: same origin, token only in the Authorization header")
    for r in watch.requests:
        if not r.url.startswith(watch.origin + "/"):
            raise Failure(f"a request left the origin: {r.url}")
        for t in tokens:
            if t in r.url:
                raise Failure(f"a token is in a URL: {r.url[:80]}")
        path = urllib.parse.urlsplit(r.url).path
        if path.startswith("/plans/") and path != "/plans/events":
            if r.headers.get("authorization") != f"Bearer {writer}":
                raise Failure(f"{r.method} {path} was sent without the bearer token")
        if path == "/plans/events" and "authorization" in r.headers:
            raise Failure("the event stream request carries an Authorization header")
    check(True, f"{len(watch.requests)} requests, all to {watch.origin}")

    step("sign out")
    sign_out(page)
    check(page.evaluate("sessionStorage.length") == 0, "sessionStorage is empty after signing out")
    check(page.is_hidden("#app") and page.inner_text("#current-body") == "", "the files are gone from the page")
    shot(page, art, "8-signed-out-after")

    step("a read-only token sees no edit controls")
    sign_in(page, reader)
    page.wait_for_selector("#current-body pre.code")
    check(page.is_hidden("#edit-open"), "no Edit button on the integration file")
    check(page.locator("table.history button:has-text('Restore')").count() == 0, "no Restore buttons")
    select_file(page, CONF)
    page.wait_for_selector("#current-body pre.code")
    check(page.is_hidden("#edit-open"), "no Edit button on the configuration file")
    check(page.locator("table.history button:has-text('Restore')").count() == 0, "no Restore buttons there either")
    check(page.locator("table.history button:has-text('Compare with previous')").count() >= 1, "comparing is still offered")
    shot(page, art, "9-read-only")
    sign_out(page)

    step("an expiring token: a warning first, then sign in again and the draft comes back")
    short_token = binary.token(tenant, ttl=20)
    tokens.append(short_token)
    sign_in(page, short_token)
    page.wait_for_selector("#expiry:not([hidden])", timeout=5000)
    check("expires at" in page.inner_text("#expiry") and "comes back" in page.inner_text("#expiry"), "the page warns before the token ends")
    page.wait_for_selector("#edit-open:not([hidden])")
    page.click("#edit-open")
    page.wait_for_selector("#editor:not([hidden])")
    draft_text = page.input_value("#editor-text") + "# unsaved when the token ended\n"
    page.fill("#editor-text", draft_text)
    page.fill("#editor-message", "Kept across sign-ins")
    page.wait_for_selector("#signin:not([hidden])", timeout=30000)
    msg = page.locator("#signin-msg")
    check("expired" in msg.inner_text(), "after its expiry the console asks for a token again")
    check("problem" in (msg.get_attribute("class") or ""), "…in the error style")
    check(page.evaluate("sessionStorage.getItem('planfiles.token')") is None, "the expired token is forgotten")
    # The history is held back: the draft comes back before it has loaded, and its note may
    # claim nothing the page does not know yet (it said "an older commit" of the current one).
    held = []
    history_urls = re.compile(r"/plans/[a-z-]+/history")
    page.route(history_urls, lambda route: held.append(route))
    page.fill("#token", writer)
    page.click("#signin-form button[type=submit]")
    wait_js(page, "t => document.getElementById('editor-text')?.value === t", arg=draft_text)
    check(page.input_value("#editor-message") == "Kept across sign-ins", "signing in again brings the editor back with the unsaved text")
    check("brought back" in page.inner_text("#flash"), "…and says so")
    base = other.ok("GET", "/plans/integration-file/history?limit=1")["entries"][0]["commit_sha"]
    note = page.inner_text("#editor-note")
    check(held and page.locator("table.history tbody tr[data-commit]").count() == 0 and "older" not in note
          and f"the version of commit {base[:10]}" in note,
          f"before the history has loaded, the draft's note names the commit it started from, and no 'older' ({note!r})")
    for route in held:
        route.continue_()
    page.unroute(history_urls)
    page.wait_for_selector("table.history tbody tr[data-commit]")
    note = page.inner_text("#editor-note")
    check("older" not in note and f"the version of commit {base[:10]}" in note and page.locator("#editor-note .stale").count() == 0,
          f"…and once it has, the same (the file has not changed since: {note!r})")
    page.click("#editor-cancel")
    check(page.evaluate(f"sessionStorage.getItem('planfiles.draft.{tenant}.integration-file')") is None, "cancel drops the draft")
    sign_out(page)

    step("sign-in errors, and a tenant that does not exist")
    page.fill("#token", "not a token")
    page.click("#signin-form button[type=submit]")
    check("problem" in (page.get_attribute("#signin-msg", "class") or ""), "a token that is no JWT is an error, in the error style")
    ghost = binary.token("no-such-tenant-" + uuid.uuid4().hex[:6])
    tokens.append(ghost)
    started = time.monotonic()
    with watch.expecting(r"status of 404"):
        page.fill("#token", ghost)
        page.click("#signin-form button[type=submit]")
        page.wait_for_selector("#current-body .problem", timeout=5000)
    took = time.monotonic() - started
    check("tenant_not_found" in page.inner_text("#current-body .problem"), "an unknown tenant shows its 404")
    check(took < 2.0, f"…at once ({took:.2f} s), not after a wait")
    sign_out(page)

    step("a phone, 390 px wide")
    page.set_viewport_size({"width": 390, "height": 844})
    check_brand_in_view(page, "on the sign-in page")
    shot(page, art, "11-phone-signin")
    sign_in(page, writer)
    page.wait_for_selector("#current-body pre.code")
    check_brand_in_view(page, "once signed in")
    wide = overflow(page)
    check(wide["scroll"] <= 390, f"the page does not scroll sideways (scrollWidth {wide['scroll']} px)")
    check(not wide["out"], f"no element reaches past the screen's edge ({wide['out']})")
    box = page.locator("#sign-out").bounding_box()
    check(box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, "Sign out is on the screen")
    row = page.locator("table.history tbody tr[data-commit]").first
    row_box = row.bounding_box()
    check(row_box["width"] <= 390, f"a history entry fits the screen as a card ({row_box['width']:.0f} px)")
    rows = page.locator("table.history tbody tr[data-commit]")
    restore = rows.nth(1).locator("button:has-text('Restore')")
    restore.scroll_into_view_if_needed()
    rb = restore.bounding_box()
    check(rb is not None and rb["x"] + rb["width"] <= 390 and rb["height"] >= 24, f"Restore can be reached and tapped ({rb['width']:.0f}x{rb['height']:.0f} px)")
    boxes = rows.nth(1).locator(".row-actions button").evaluate_all("bs => bs.map(b => b.getBoundingClientRect()).map(r => [r.left, r.right, r.top])")
    apart = all(b[0] - a[1] >= 4 or b[2] != a[2] for a, b in zip(boxes, boxes[1:]))
    check(len(boxes) == 3 and apart, f"a card's buttons have room between them ({boxes})")
    shot(page, art, "11-phone")
    rows.nth(1).locator("button:has-text('Compare with previous')").click()
    page.wait_for_selector("#compare-body .compare-sides")
    wait_js(page, """() => { const r = document.getElementById('compare').getBoundingClientRect();
                            return r.top < innerHeight && r.bottom > 0; }""", timeout=5000)
    check(True, "the comparison is scrolled into view")
    wide = overflow(page)
    check(wide["scroll"] <= 390 and not wide["out"], f"…and the page still does not scroll sideways ({wide})")
    shot(page, art, "12-phone-compare")
    sign_out(page)
    check_brand_in_view(page, "after signing out of a page scrolled down")
    page.set_viewport_size({"width": 1300, "height": 1000})

    step("keyboard alone")
    page.reload()
    page.wait_for_selector("#signin:not([hidden])")
    page.focus("#token")
    page.keyboard.insert_text(writer)
    page.keyboard.press("Tab")
    check(page.evaluate("document.activeElement.textContent") == "Sign in", "Tab reaches the Sign in button")
    page.keyboard.press("Enter")
    page.wait_for_selector("table.history tbody tr[data-commit]")
    wait_js(page, "document.getElementById('live').textContent === 'connected'")
    page.focus(".tab[data-file='configuration-file']")
    page.keyboard.press("Enter")
    page.wait_for_selector(".tab[data-file='configuration-file'][aria-current]")
    check(True, "Enter on a tab switches files")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    check(outline not in ("", "none"), f"the focused control has a visible outline ({outline})")
    for sel in ["#token", "#editor-text", "#editor-message", "#compare-from", "#compare-to"]:
        el_id = sel[1:]
        check(page.locator(f'label[for="{el_id}"]').count() == 1, f"{sel} has a label")
    sign_out(page)
    watch.assert_clean("the end")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default=os.environ.get("CONSOLE_BASE_URL"))
    ap.add_argument("--planfiles", default=os.environ.get("PLANFILES_BIN"))
    ap.add_argument("--data-dir", default=os.environ.get("CONSOLE_DATA_DIR"))
    ap.add_argument("--artefacts", default=os.environ.get("CONSOLE_ARTEFACTS"))
    ap.add_argument("--tenant", default=os.environ.get("CONSOLE_TENANT"))
    args = ap.parse_args()
    missing = [n for n in ("base_url", "planfiles", "data_dir", "artefacts") if not getattr(args, n)]
    if missing:
        ap.error("missing: " + ", ".join("--" + m.replace("_", "-") for m in missing))
    if not os.path.exists(CHROMIUM):
        print(f"FAIL: {CHROMIUM} is missing (apt-get install -y chromium)", file=sys.stderr)
        return 1
    args.planfiles = os.path.abspath(args.planfiles)
    started = time.monotonic()
    try:
        run(args)
    except Failure as e:
        print("\n" + "\n".join(FAILURE_STATE), file=sys.stderr)
        print(f"\nFAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a Playwright timeout and the like: still a clear failure
        traceback.print_exc()
        print("\n" + "\n".join(FAILURE_STATE), file=sys.stderr)
        print(f"\nFAIL: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    print(f"\nPASS: console test ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
