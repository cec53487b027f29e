#!/usr/bin/env python3
"""Browser test of proposals in the planfiles console: ann proposes in her tab, bo approves and
applies in his, and the change arrives live in cy's tab, on a tenant that requires approval.

    python3 tests/browser/proposals_test.py --base-url http://127.0.0.1:18081 \
        --planfiles target/debug/planfiles --data-dir /tmp/console-data --artefacts /tmp/art

Arguments and environment as tests/browser/console_test.py's (whose helpers it uses).
"""
import argparse
import os
import subprocess
import sys
import time
import traceback
import uuid

from playwright.sync_api import sync_playwright

from console_test import (CHROMIUM, CHROMIUM_ARGS, LIVE_WITHIN, Binary, Client, Failure, check,
                          code_text, shot, sign_in, step, wait_js)

ACCOUNT = "246813579024"


def token(binary, tenant, sub, *perms):
    args = ["token", "--tenant", tenant, "--sub", sub, "--name", sub.capitalize(), "--email", f"{sub}@console.test"]
    for p in perms:
        args += ["--permission", p]
    return binary.run(*args)


def run(args):
    binary = Binary(args.planfiles, args.data_dir)
    os.makedirs(args.artefacts, exist_ok=True)
    tenant = "proposals-" + uuid.uuid4().hex[:10]
    binary.run("tenant", "create", tenant)
    binary.run("tenant", "set", tenant, "--require-approval", "1")
    ann = token(binary, tenant, "ann", "jit.integrations.write", "jit.preferences.write")
    bo = token(binary, tenant, "bo", "planfiles.proposals.approve", "jit.integrations.read", "jit.preferences.read")
    cy = token(binary, tenant, "cy", "jit.integrations.read", "jit.preferences.read")
    repo = os.path.join(args.data_dir, "tenants", f"{tenant}.git")
    before = Client(args.base_url, ann).ok("GET", "/plans/integration-file")
    check(before["content"] == {}, "a new tenant's integration file is empty")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pages = {}
        for who in ("ann", "bo", "cy"):
            page = browser.new_context(viewport={"width": 1300, "height": 1000}).new_page()
            page.set_default_timeout(15000)
            pages[who] = page
        try:
            steps(pages, args, tenant, ann, bo, cy, repo)
        except Exception:
            for who, page in pages.items():
                try:
                    shot(page, args.artefacts, f"proposals-failure-{who}")
                except Exception:
                    pass
            raise
        finally:
            browser.close()


def steps(pages, args, tenant, ann, bo, cy, repo):
    base = args.base_url.rstrip("/") + "/ui/"
    for who, tok in (("cy", cy), ("ann", ann), ("bo", bo)):
        pages[who].goto(base)
        sign_in(pages[who], tok)
    check(True, "ann, bo and cy are signed in, each in a tab of their own")

    step("ann: a direct save is refused; Propose opens a proposal")
    a = pages["ann"]
    a.click("#edit-open")
    a.fill("#editor-text", f'aws:\n  - account_id: "{ACCOUNT}"\n    regions: [us-east-1]\n    type: aws\n')
    a.fill("#editor-message", "Add the staging account")
    a.click("#editor-save")
    a.wait_for_selector("#editor-result .problem")
    check("approval_required" in a.text_content("#editor-result"), "Save answers approval_required on a protected tenant")
    a.click("#editor-propose")
    a.wait_for_selector("#flash:not([hidden])")
    check("Proposed as #1" in a.text_content("#flash"), f"the flash says so ({a.text_content('#flash')!r})")
    a.wait_for_selector("#proposals-body li.proposal[data-number='1']")
    row = a.text_content("#proposals-body li.proposal[data-number='1']")
    check("Add the staging account" in row and "0 of 1 approval" in row, f"ann's list shows it, 0 of 1 approval ({row!r})")
    check(a.locator("#proposals-body li.proposal[data-number='1'] button:has-text('Approve')").count() == 0,
          "ann has no Approve button on her own proposal")
    shot(a, args.artefacts, "proposals-1-ann-proposed")

    step("bo: the proposal arrives, he reads its changes, approves and applies it")
    b = pages["bo"]
    b.wait_for_selector("#proposals-body li.proposal[data-number='1']", timeout=10000)
    b.click("#proposals-body li.proposal[data-number='1'] button:has-text('Show changes')")
    b.wait_for_selector("#proposals-body .proposal-changes pre.diff")
    check(ACCOUNT in b.text_content("#proposals-body .proposal-changes"), "the diff from main shows the new account")
    b.click("#proposals-body li.proposal[data-number='1'] button:has-text('Approve')")
    wait_js(b, "document.getElementById('flash').textContent.includes('Approved proposal #1')")
    b.wait_for_selector("#proposals-body li.proposal[data-number='1'] button:has-text('Apply')")
    check("1 of 1 approval" in b.text_content("#proposals-body li.proposal[data-number='1']"), "it has 1 of 1 approval")
    shot(b, args.artefacts, "proposals-2-bo-approved")
    started = time.monotonic()
    b.click("#proposals-body li.proposal[data-number='1'] button:has-text('Apply')")
    wait_js(b, "document.getElementById('flash').textContent.includes('Applied proposal #1')")
    check(True, f"bo applied it ({b.text_content('#flash')!r})")

    step("cy: the change arrives live, without a reload")
    c = pages["cy"]
    deadline = started + LIVE_WITHIN + 2
    while ACCOUNT not in (code_text(c) or ""):
        if time.monotonic() > deadline:
            raise Failure(f"the applied change did not reach cy's tab within {LIVE_WITHIN + 2} s: {code_text(c)!r}")
        time.sleep(0.05)
    check(True, f"cy's tab shows the new account {time.monotonic() - started:.2f} s after the apply")
    shot(c, args.artefacts, "proposals-3-cy-live")
    c.wait_for_selector("#proposals-body p.muted:has-text('No open proposals')", timeout=10000)
    check(True, "and the proposal has left cy's list of open ones")

    step("git: the applied commit names the proposal, its author and its approver")
    msg = subprocess.run(["git", "--git-dir", repo, "log", "-1", "--format=%an%n%(trailers:only,unfold)", "main"],
                         capture_output=True, text=True, check=True).stdout
    check(msg.startswith("Ann\n"), f"its author is ann ({msg.splitlines()[0]!r})")
    for line in ("Proposal: 1", "Proposed-by: Ann <ann@console.test>", "Approved-by: Bo <bo@console.test>"):
        check(line in msg, f"trailer {line!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default=os.environ.get("CONSOLE_BASE_URL"))
    ap.add_argument("--planfiles", default=os.environ.get("PLANFILES_BIN"))
    ap.add_argument("--data-dir", default=os.environ.get("CONSOLE_DATA_DIR"))
    ap.add_argument("--artefacts", default=os.environ.get("CONSOLE_ARTEFACTS"))
    args = ap.parse_args()
    missing = [n for n in ("base_url", "planfiles", "data_dir", "artefacts") if not getattr(args, n)]
    if missing:
        ap.error("missing: " + ", ".join("--" + m.replace("_", "-") for m in missing))
    args.planfiles = os.path.abspath(args.planfiles)
    started = time.monotonic()
    try:
        run(args)
    except Failure as e:
        print(f"\nFAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        traceback.print_exc()
        print(f"\nFAIL: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    print(f"\nPASS: proposals console test ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
