// The "Edit" section: edit a file's stored YAML text (both files, comments included), preview
// the write (a dry run: the changes and the text diff), save it guarded by the version it
// started from, and the "changed since you opened it" path of a refused save. Unsaved text is
// kept per tenant and file in this tab (draft.js), so a new sign-in brings it back.
import { h, fill, $, focusOn } from "./dom.js";
import { short } from "./format.js";
import { readable } from "./patch.js";
import { problem, commitRef, diffPair, code, onlyText } from "./views.js";
import { shaOf, textOf } from "./fileview.js";
import { unifiedDiff } from "./textdiff.js";
import * as draft from "./draft.js";

const NOTE = "Edit the YAML text. It is stored as you write it, comments and layout included.";

/** The commit that made the version `blob` of the file, when the loaded history has it. */
const commitOf = (st, blob) => st.entries.find((e) => e.file_sha === blob)?.commit_sha || null;

/** Starts editing the version shown now (or `kept`, a draft brought back after a sign-in). */
export function open(app, st, kept) {
  const d = st.data;
  const baseSha = kept ? kept.baseSha : shaOf(st.file, d);
  const baseText = textOf(st.file, d).text;
  st.edit = {
    baseSha,
    // The commit of that version, when the loaded history (or the kept draft) knows it.
    baseCommit: (kept ? kept.baseCommit : null) || commitOf(st, baseSha),
    baseText: kept && kept.baseSha !== shaOf(st.file, d) ? kept.baseText ?? baseText : baseText,
    baseContent: d.content,
    text: kept ? kept.text : baseText,
    message: kept ? kept.message || "" : st.edit ? st.edit.message : "",
  };
  app.clearFlash();
  render(app, st);
  app.renderFile();
  if (kept) app.flash("Your unsaved text was brought back.");
  focusOn($("editor-text"));
}

export function close(app, st) {
  st.edit = null;
  draft.drop(app.session.tenant, st.file);
  render(app, st);
  app.renderFile();
}

/** Keeps the editor's text and message for a sign-in to come. */
export function remember(app, st) {
  const ed = st.edit;
  if (!ed) return;
  const baseCommit = commitOf(st, ed.baseSha) || ed.baseCommit;
  draft.keep(app.session.tenant, st.file, { baseSha: ed.baseSha, baseCommit, baseText: ed.baseText, text: ed.text, message: ed.message });
}

/** The draft of `st`'s file kept in this tab, if any. */
export const keptDraft = (app, st) => draft.kept(app.session.tenant, st.file);

export function render(app, st) {
  const sec = $("editor");
  const ed = st && st.edit;
  sec.hidden = !ed;
  if (!ed) return fill($("editor-result"));
  $("editor-label").textContent = "YAML text";
  $("editor-text").value = ed.text;
  $("editor-message").value = ed.message;
  note(st);
  fill($("editor-result"));
}

/** The note above the editor, with a warning once the file has changed under it. It says
 * only what is known: the version's commit once the history (or the kept draft) names it,
 * else its blob id (a brought-back draft is shown before the history has loaded). */
export function note(st) {
  const ed = st && st.edit;
  if (!ed) return;
  const current = st.data && shaOf(st.file, st.data);
  const from = commitOf(st, ed.baseSha) || ed.baseCommit;
  fill($("editor-note"), NOTE, " You started from the version ",
    from ? ["of commit ", commitRef(from)] : ["with blob id ", commitRef(ed.baseSha)], ".",
    current && current !== ed.baseSha
      ? h("strong", { class: "stale" }, " The file has changed since: saving will be refused; start again from the current version.")
      : null);
}

/** The write's body from the editor: the text, stored as it is. */
function body(st) {
  const ed = st.edit;
  const out = st.file === "integration-file" ? { content: ed.text } : { payload: ed.text };
  const message = ed.message.trim();
  if (message) out.message = message;
  return out;
}

/** Sends the editor's text as a dry run or as the write, saying `pending` meanwhile; the
 * answer goes to `answered`, a refusal to `failed`. */
async function send(app, st, pending, dryRun, answered) {
  const res = $("editor-result");
  fill(res, h("p", { class: "muted", role: "status" }, pending));
  try {
    answered(await app.api.put(st.file, body(st), st.edit.baseSha, dryRun));
  } catch (err) {
    await failed(app, st, err);
  }
}

export function preview(app, st) {
  const ed = st.edit;
  const text = ed.text;
  return send(app, st, "Previewing…", true, (ans) => {
    const items = readable(ans.patch, ed.baseContent);
    const sameBlob = shaOf(st.file, ans) === ed.baseSha;
    const textDiff = unifiedDiff(ed.baseText, text);
    let summary;
    if (sameBlob) summary = h("p", { class: "muted changes-empty" }, "No changes: saving would make no commit.");
    else if (!items.length) summary = onlyText(", and saving makes a commit");
    fill($("editor-result"), h("div", { class: "preview" },
      h("h3", { id: "preview-h", tabindex: "-1" }, "Preview: what saving would change"),
      summary,
      sameBlob ? null : diffPair(items, textDiff)));
    focusOn($("preview-h"));
  });
}

export function save(app, st) {
  const base = st.edit.baseSha;
  const text = st.edit.text;
  // What the preview was refused for is not sent again: the refusal is shown once more.
  const refused = st.edit.refused;
  if (refused && refused.text === text) {
    shown(refused.err, text, "Not saved: the preview of this text was refused. Change the text first.");
    return Promise.resolve();
  }
  return send(app, st, "Saving…", false, (ans) => {
    app.applyWrite(st, ans, text);
    close(app, st);
    const same = shaOf(st.file, ans) === base;
    app.flash(same ? "Nothing changed, so no commit was made." : `Saved as commit ${short(ans.commit_sha)}.`);
  });
}

async function failed(app, st, err) {
  if (err.status === 409 || err.status === 412) return conflict(app, st, err);
  const violated = err.code === "schema_violation";
  if (violated && st.edit) st.edit.refused = { text: st.edit.text, err };
  shown(err, violated && st.edit ? st.edit.text : null, "The service refused the write.");
}

/** A refusal in the result area; for schema violations, the text with their lines marked. */
function shown(err, text, lead) {
  const list = (err.problem && err.problem.errors) || [];
  fill($("editor-result"), problem(err, lead),
    text !== null && list.some((v) => v.line)
      ? [h("h3", {}, "Where, in your text"), code(text, "Your text with the lines at fault marked", list)]
      : null);
  focusOn($("editor-result"));
}

/** The newest commit of the history whose file is `blob` (paging as far as needed). */
async function commitOfBlob(app, st, blob) {
  const hit = commitOf(st, blob);
  if (hit) return hit;
  let cursor = st.cursor;
  for (let i = 0; cursor && i < 50; i++) {
    const page = await app.api.history(st.file, 200, cursor);
    const found = page.entries.find((e) => e.file_sha === blob);
    if (found) return found.commit_sha;
    cursor = page.next_cursor;
  }
  return null;
}

async function conflict(app, st, err) {
  const res = $("editor-result");
  const ed = st.edit;
  const other = h("div", {}, h("p", { class: "muted", role: "status" }, "Loading the other change…"));
  fill(res, h("div", { class: "conflict" },
    h("h3", { id: "conflict-h", tabindex: "-1" }, "Changed since you opened it"),
    h("p", {}, "Someone saved this file after you opened it, so your text was not saved: ",
      "it would have undone their change. Look at what they changed, then start again from the ",
      "current version (your text is below to copy from)."),
    h("h4", {}, "The other change"),
    other,
    h("div", { class: "actions" },
      h("button", { type: "button", id: "conflict-restart", on: { click: () => restart(app, st) } },
        "Start again from the current version")),
    h("details", {}, h("summary", {}, "Your text (to copy from)"),
      h("label", { for: "conflict-mine" }, "Your text"),
      h("textarea", { id: "conflict-mine", class: "code-input", rows: "10", readonly: true, value: ed.text })),
    h("details", {}, h("summary", {}, "What the service answered"), problem(err))));
  focusOn($("conflict-h"));
  try {
    const from = await commitOfBlob(app, st, ed.baseSha);
    if (!from) return fill(other, h("p", { class: "muted" }, "The version you opened is not in the file's history any more."));
    const diff = await app.api.diff(st.file, from);
    fill(other, h("p", {}, "From the version you opened (commit ", commitRef(from), ") to the current one (commit ",
      commitRef(diff.to.commit_sha), "):"), diffPair(readable(diff.patch, ed.baseContent), diff.text));
  } catch (e) {
    fill(other, problem(e, "The other change could not be loaded."));
  }
}

async function restart(app, st) {
  const message = st.edit ? st.edit.message : "";
  await app.loadFile(st.file);
  if (!st.data) return;
  draft.drop(app.session.tenant, st.file);
  open(app, st);
  st.edit.message = message;
  $("editor-message").value = message;
  app.flash("The editor now holds the current version.");
}

