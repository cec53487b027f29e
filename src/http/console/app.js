// The console's entry point: signing in and out, the session's lifetime, which file is shown,
// and the wiring of the page's controls to the sections (data loading is in sync.js).
import { $, h, fill, focusOn, focusAtTop } from "./dom.js";
import { Api } from "./api.js";
import { Session, stored, store, forget, FILES } from "./session.js";
import { Live, STEPS } from "./live.js";
import { when } from "./format.js";
import { renderCurrent } from "./fileview.js";
import { renderHistory } from "./historyview.js";
import * as compare from "./compare.js";
import * as editor from "./editor.js";
import * as restore from "./restore.js";
import * as proposals from "./proposals.js";
import { sync, fileState } from "./sync.js";

const NAMES = Object.keys(FILES);
/** How long before the token's end the page warns. */
const WARN_BEFORE_MS = 3 * 60 * 1000;

const app = {
  session: null,
  api: null,
  live: null,
  files: null,
  current: null,
  head: null,
  loaded: false,
  timers: [],

  ctx(file) {
    return {
      canRead: this.session.canRead(file),
      canWrite: this.session.canWrite(file),
      head: this.head,
      stopViewing: () => this.stopViewing(this.files[file]),
    };
  },

  // ---- sign in and out ----

  signIn(token) {
    let session;
    try {
      session = new Session(token);
    } catch (e) {
      forget();
      return showSignIn(e.message, "error");
    }
    if (session.expired()) {
      forget();
      return showSignIn(`This token expired at ${when(session.expires.toISOString()).text}. Paste a new token.`, "error");
    }
    store(token);
    this.start(session);
  },

  start(session) {
    this.session = session;
    const api = new Api(() => session.token, (err) => {
      // Only this session's own requests may end it (not a late answer to an earlier one).
      if (this.api === api) this.signOut(`The service refused the token: ${err.message}. Paste a new token; unsaved text in the editor comes back.`, "error");
    });
    this.api = api;
    this.files = Object.fromEntries(NAMES.map((f) => [f, fileState(f)]));
    this.head = null;
    this.loaded = false;
    $("token").value = "";
    showWho(session);
    const left = session.expires.getTime() - Date.now();
    this.timers.push(setTimeout(() => this.expire(), Math.min(left, 2 ** 31 - 1)));
    // A few minutes before the end, a warning (at once when less is left).
    this.timers.push(setTimeout(() => this.warnExpiry(), Math.max(0, Math.min(left - WARN_BEFORE_MS, 2 ** 31 - 1))));
    $("signin").hidden = true;
    $("app").hidden = false;
    $("who").hidden = false;
    this.select(NAMES.find((f) => session.canRead(f)) || NAMES[0]);
    this.live = new Live(this.api, {
      unavailable: () => this.loadOnce(),
      head: (d) => this.onHead(d),
      reset: (d) => this.onReset(d),
      "integration-file": (d, id) => this.onFileEvent("integration-file", d, id),
      "configuration-file": (d, id) => this.onFileEvent("configuration-file", d, id),
      // A proposal's step: the list is read again at once (the poll is for a stream that is down).
      ...Object.fromEntries(STEPS.map((step) => [step, () => proposals.load(this)])),
    }, liveStatus);
    this.live.start();
    proposals.start(this);
    // Read after the stream's first `head` (then no change can fall in between); without a stream, soon anyway.
    this.timers.push(setTimeout(() => this.loadOnce(), 2500));
    focusAtTop($("main"));
  },

  warnExpiry() {
    if (!this.session || this.session.expired()) return;
    const el = $("expiry");
    const at = when(this.session.expires.toISOString());
    const mins = Math.max(1, Math.round((this.session.expires.getTime() - Date.now()) / 60000));
    fill(el, `Your token expires at ${at.text} (in about ${mins} minute${mins === 1 ? "" : "s"}). `,
      "Text you are editing is kept in this tab: when it has expired, sign in with a new token and it comes back.");
    el.hidden = false;
  },

  expire() {
    if (!this.session) return;
    if (!this.session.expired()) {
      this.timers.push(setTimeout(() => this.expire(), Math.min(this.session.expires.getTime() - Date.now() + 50, 2 ** 31 - 1)));
      return;
    }
    this.signOut(`Your token expired at ${when(this.session.expires.toISOString()).text}. Paste a new token to go on; unsaved text in the editor comes back.`, "error");
  },

  signOut(message, kind) {
    if (!this.session) return;
    if (this.files && this.current) editor.remember(this, this.files[this.current]);
    if (this.live) this.live.stop();
    this.timers.forEach((t) => {
      clearTimeout(t);
      clearInterval(t);
    });
    this.timers = [];
    forget();
    this.session = this.api = this.live = this.files = this.current = this.head = null;
    this.proposals = null;
    for (const id of ["proposals-body", "current-body", "history-body", "compare-body", "compare-from", "compare-to", "editor-result", "restore-body", "who-tenant", "who-perms", "who-exp"]) fill($(id));
    $("editor-text").value = "";
    $("editor-message").value = "";
    $("editor").hidden = $("restore").hidden = $("flash").hidden = $("expiry").hidden = true;
    $("app").hidden = true;
    $("who").hidden = true;
    showSignIn(message, kind);
  },

  // ---- rendering ----

  select(f) {
    if (this.current && this.files[this.current]) restore.cancel(this.files[this.current]);
    this.current = f;
    for (const tab of document.querySelectorAll(".tab")) {
      if (tab.dataset.file === f) tab.setAttribute("aria-current", "page");
      else tab.removeAttribute("aria-current");
    }
    $("flash").hidden = true;
    for (const name of NAMES) {
      this.files[name].compared = null;
      this.files[name].viewing = null;
    }
    fill($("compare-body"));
    fill($("compare-from"));
    fill($("compare-to"));
    this.renderFile();
    this.renderHistory();
    editor.render(this, this.files[f]);
    this.bringBackDraft(f);
  },

  /** Opens the editor on the draft of `f` kept in this tab (after a sign-in), once the file
   * is loaded and when the token may write it. */
  bringBackDraft(f) {
    const st = this.files && this.files[f];
    if (!st || st.edit || !st.data || this.current !== f || !this.session.canWrite(f)) return;
    const kept = editor.keptDraft(this, st);
    if (kept) editor.open(this, st, kept);
  },

  renderFile() {
    if (!this.session) return;
    const st = this.files[this.current];
    const ctx = this.ctx(this.current);
    keepFocus($("current-body"), () => renderCurrent($("current-body"), st, ctx));
    $("edit-open").hidden = !(ctx.canWrite && st.data && !st.edit && !st.viewing);
    $("current-h").textContent = st.viewing ? "An older version" : "Current version";
  },

  renderHistory() {
    if (!this.session) return;
    const st = this.files[this.current];
    keepFocus($("history-body"), () => renderHistory($("history-body"), st, this.ctx(this.current), {
      view: (e) => this.view(st, e),
      compareWithPrevious: (e) => compare.compareWithPrevious(this, st, e),
      restore: (e) => restore.start(this, st, e),
      older: () => this.older(st.file),
    }));
    compare.renderOptions(st);
  },

  /** Shows the file as it was in `entry`'s commit in the "Current version" section, until
   * "Back to the current version". */
  async view(st, entry) {
    st.viewing = { entry, data: null, text: null, error: null };
    this.renderFile();
    focusOn($("current-h"));
    try {
      const [data, text] = await Promise.all([this.api.getFile(st.file, entry.commit_sha), this.api.getText(st.file, entry.commit_sha)]);
      if (st.viewing?.entry !== entry) return;
      st.viewing = { entry, data, text: text.text, error: null };
    } catch (err) {
      if (st.viewing?.entry !== entry) return;
      st.viewing = { entry, data: null, text: null, error: err };
    }
    this.renderFile();
  },

  stopViewing(st) {
    st.viewing = null;
    this.renderFile();
    focusOn($("current-h"));
  },

  flash(text) {
    const el = $("flash");
    el.textContent = text;
    el.hidden = false;
  },

  clearFlash() {
    $("flash").hidden = true;
  },
};

Object.assign(app, sync);

/**
 * Re-renders `el` with `render`, keeping the keyboard focus when it was inside: on the same
 * button of the same history row, on the element with the same id, or on the code block.
 */
function keepFocus(el, render) {
  const active = document.activeElement;
  if (!active || !el.contains(active)) return render();
  const row = active.closest("tr[data-commit]");
  const index = row ? [...row.querySelectorAll("button")].indexOf(active) : -1;
  const { id } = active;
  const tag = active.tagName;
  render();
  let target = null;
  if (row) target = el.querySelector(`tr[data-commit="${row.dataset.commit}"]`)?.querySelectorAll("button")[index];
  else if (id) target = document.getElementById(id);
  else target = el.querySelector(tag.toLowerCase() === "pre" ? "pre" : "button");
  if (target && !target.disabled) target.focus({ preventScroll: true });
}

function showWho(session) {
  fill($("who-tenant"), session.tenant);
  fill($("who-perms"), session.permissions.length ? session.permissions.join(", ") : "none");
  const t = when(session.expires.toISOString());
  fill($("who-exp"), h("time", { datetime: session.expires.toISOString(), title: t.title }, t.text));
}

function liveStatus(text, state) {
  const el = $("live");
  el.textContent = text;
  el.className = `live live-${state}`;
}

/** The sign-in form, with `message` as an error (`kind` "error": what went wrong) or a notice. */
function showSignIn(message, kind) {
  const msg = $("signin-msg");
  msg.hidden = !message;
  msg.textContent = message || "";
  msg.className = kind === "error" ? "problem" : "notice";
  msg.setAttribute("role", kind === "error" ? "alert" : "status");
  $("signin").hidden = false;
  $("app").hidden = true;
  focusAtTop($("token"));
}

function wire() {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token").value.trim().replace(/^Bearer\s+/i, "");
    if (!token) return showSignIn("Paste a token first.", "error");
    app.signIn(token);
  });
  $("sign-out").addEventListener("click", () => app.signOut("You signed out."));
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => app.session && app.select(tab.dataset.file));
  }
  const st = () => app.files[app.current];
  $("edit-open").addEventListener("click", () => editor.open(app, st()));
  $("editor-text").addEventListener("input", (e) => {
    if (!st().edit) return;
    st().edit.text = e.target.value;
    editor.remember(app, st());
  });
  $("editor-message").addEventListener("input", (e) => {
    if (!st().edit) return;
    st().edit.message = e.target.value;
    editor.remember(app, st());
  });
  $("editor-preview").addEventListener("click", () => editor.preview(app, st()));
  $("editor-form").addEventListener("submit", (e) => {
    e.preventDefault();
    editor.save(app, st());
  });
  $("editor-propose").addEventListener("click", async () => {
    const p = await proposals.propose(app, st());
    if (!p) return;
    editor.close(app, st());
    app.flash(`Proposed as #${p.number}: it applies once ${p.approvals_required || "no"} other ${p.approvals_required === 1 ? "person approves" : "people approve"} it.`);
    await proposals.load(app);
    focusOn($("proposals-h"));
  });
  $("editor-cancel").addEventListener("click", () => {
    editor.close(app, st());
    focusOn($("edit-open"));
  });
  $("compare-form").addEventListener("submit", (e) => {
    e.preventDefault();
    compare.compare(app, st(), $("compare-from").value, $("compare-to").value);
  });
}

wire();
const token = stored();
if (token) app.signIn(token);
else showSignIn();
