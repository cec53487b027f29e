// The tenant's data in the page: both files and their history, read over HTTP and kept up to
// date from the change stream. Mixed into the app object (methods use `this`).
import { FILES } from "./session.js";
import { shaOf } from "./fileview.js";
import * as editor from "./editor.js";
import * as compare from "./compare.js";

/** History page size: `?limit=N` on the console's URL (1-500), else 20. */
const LIMIT = (() => {
  const n = Number(new URLSearchParams(location.search).get("limit"));
  return Number.isInteger(n) && n >= 1 && n <= 500 ? n : 20;
})();
const NAMES = Object.keys(FILES);
const HEAD_SHA = { "integration-file": "integration_file_sha", "configuration-file": "configuration_file_sha" };

export function fileState(file) {
  return {
    file, data: null, sha: null, error: null, gen: 0,
    entries: [], known: new Set(), fresh: new Set(), cursor: null,
    loadingHistory: false, historyError: null, edit: null, restore: null, refresh: null, older: null,
    viewing: null, compared: null,
  };
}

export const sync = {
  loadOnce() {
    if (this.loaded || !this.session) return;
    this.loaded = true;
    this.loadAll();
  },

  loadAll() {
    for (const f of NAMES) {
      if (!this.session.canRead(f)) continue;
      this.loadFile(f);
      this.loadHistory(f, true);
    }
  },

  async loadFile(f) {
    const st = this.files[f];
    try {
      let data = await this.api.getFile(f);
      if (f === "configuration-file") {
        // Its JSON answer has the content only; the stored text comes as YAML. Read again
        // when a commit landed between the two reads.
        for (let tries = 0; tries < 3; tries++) {
          const stored = await this.api.getText(f);
          if (stored.etag === `"${data.sha}"`) {
            data = { ...data, stored_text: stored.text };
            break;
          }
          data = await this.api.getFile(f);
        }
      }
      if (this.files !== null && this.files[f] === st) {
        st.data = data;
        st.sha = shaOf(f, data);
        st.error = null;
      }
    } catch (err) {
      if (err.status === 401 || !this.session) return;
      st.error = err;
    }
    if (this.current === f) {
      this.renderFile();
      editor.note(st);
      this.bringBackDraft(f);
    }
  },

  /** The first page (`reset`), or the next one. Pages with no entries are followed. */
  async loadHistory(f, reset) {
    const st = this.files[f];
    if (reset) {
      st.gen++;
      st.entries = [];
      st.known = new Set();
      st.cursor = null;
    } else if (st.loadingHistory || !st.cursor) {
      return;
    }
    const gen = st.gen;
    st.loadingHistory = true;
    if (this.current === f) this.renderHistory();
    try {
      let cursor = st.cursor;
      let page;
      for (let i = 0; i < 20; i++) {
        page = await this.api.history(f, LIMIT, cursor);
        cursor = page.next_cursor;
        if (page.entries.length || !cursor) break;
      }
      if (gen !== st.gen || this.files?.[f] !== st) return;
      for (const e of page.entries) {
        if (st.known.has(e.commit_sha)) continue;
        st.known.add(e.commit_sha);
        st.entries.push(e);
      }
      st.cursor = cursor;
      st.historyError = null;
    } catch (err) {
      if (gen !== st.gen || !this.session) return;
      st.historyError = err;
    } finally {
      if (gen === st.gen) st.loadingHistory = false;
    }
    if (this.current === f) {
      this.renderHistory();
      this.renderFile();
      editor.note(st);
    }
  },

  /** The next page; while one is loading, that one (so callers can wait for it). */
  older(f) {
    const st = this.files[f];
    if (!st.older) st.older = this.loadHistory(f, false).finally(() => (st.older = null));
    return st.older;
  },

  // ---- the change stream ----

  onHead(d) {
    this.head = d.commit_sha;
    if (!this.loaded) return this.loadOnce();
    for (const f of NAMES) {
      const st = this.files[f];
      const sha = d[HEAD_SHA[f]];
      if (sha && st.sha && sha !== st.sha) {
        this.loadFile(f);
        this.loadHistory(f, true);
      }
    }
    this.renderFile();
  },

  onReset(d) {
    this.head = d.commit_sha;
    for (const f of NAMES) this.files[f].fresh.clear();
    this.loaded = true;
    this.loadAll();
    this.flash("The branch was moved by someone else: everything was read again.");
  },

  onFileEvent(f, entry, id) {
    if (!this.session || !this.session.canRead(f)) return;
    const st = this.files[f];
    if (id) this.head = id;
    if (!st.known.has(entry.commit_sha)) {
      st.known.add(entry.commit_sha);
      st.entries.unshift(entry);
      st.fresh.add(entry.commit_sha);
    }
    st.sha = entry.file_sha;
    compare.markStale(st);
    // A replay brings many events at once: read the file once after them.
    clearTimeout(st.refresh);
    st.refresh = setTimeout(() => this.loadFile(f), 50);
    if (this.current === f) {
      this.renderHistory();
      this.renderFile();
    }
  },

  // ---- writes ----

  /** A write's answer becomes the version shown. `text` is the text it stored, when the
   * caller knows it: the configuration's answer has no text, and an editor opened on a
   * rendering instead of the stored bytes would rewrite the file's layout. Without it the
   * stored text is read again. */
  applyWrite(st, ans, text) {
    const { commit_sha, patch, ...data } = ans;
    if (st.file === "configuration-file") {
      if (typeof text === "string") data.stored_text = text;
      else setTimeout(() => this.loadFile(st.file), 0);
    }
    st.data = data;
    st.sha = shaOf(st.file, data);
    if (commit_sha) this.head = commit_sha;
    if (this.current === st.file) this.renderFile();
  },
};
