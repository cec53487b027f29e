// The "Edit" section: edit the text, preview the write (dry run), save it guarded by If-Match,
// and the "changed since you opened it" path of a 409 or 412.
import { h, fill, $, focusOn } from "./dom.js";
import { short } from "./format.js";
import { readable } from "./patch.js";
import { problem, changes, diffPair, commitRef } from "./views.js";
import { shaOf, textOf } from "./fileview.js";

const NOTES = {
  "integration-file": "Edit the YAML text. It is stored byte for byte, comments included.",
  "configuration-file": "The API takes the configuration file as JSON (its payload), not as YAML text, so you edit " +
    "its content as JSON here. The service keeps the stored file's comments and layout for what you leave unchanged.",
};

/** Starts editing the version shown now. */
export function open(app, st) {
  const d = st.data;
  const text = st.file === "integration-file" ? textOf(st.file, d).text : JSON.stringify(d.content, null, 2) + "\n";
  st.edit = { baseSha: shaOf(st.file, d), baseContent: d.content, text, message: st.edit ? st.edit.message : "" };
  app.clearFlash();
  render(app, st);
  app.renderFile();
  focusOn($("editor-text"));
}

export function close(app, st) {
  st.edit = null;
  render(app, st);
  app.renderFile();
}

export function render(app, st) {
  const sec = $("editor");
  const ed = st && st.edit;
  sec.hidden = !ed;
  if (!ed) return fill($("editor-result"));
  $("editor-label").textContent = st.file === "integration-file" ? "YAML text" : "Content as JSON";
  $("editor-text").value = ed.text;
  $("editor-message").value = ed.message;
  note(st);
  fill($("editor-result"));
}

/** The note above the editor, with a warning once the file has changed under it. */
export function note(st) {
  const ed = st && st.edit;
  if (!ed) return;
  const current = st.data && shaOf(st.file, st.data);
  fill($("editor-note"), NOTES[st.file], " You opened blob ", commitRef(ed.baseSha), ".",
    current && current !== ed.baseSha
      ? h("strong", { class: "stale" }, " The file has changed since: saving will be refused unless you start again.")
      : null);
}

/** The write's body from the editor, or throws an Error to show. */
function body(st) {
  const ed = st.edit;
  const out = {};
  if (st.file === "integration-file") {
    out.content = ed.text;
  } else {
    try {
      out.payload = JSON.parse(ed.text);
    } catch (e) {
      throw new Error(`The text is not valid JSON: ${e.message}`);
    }
  }
  const message = ed.message.trim();
  if (message) out.message = message;
  return out;
}

function local(err) {
  return problem({ problem: { title: "Cannot send this", detail: err.message } });
}

/** Sends the editor's text as a dry run or as the write, saying `pending` meanwhile; the
 * answer goes to `answered`, a refusal (or an error in `answered`) to `failed`. */
async function send(app, st, pending, dryRun, answered) {
  const res = $("editor-result");
  let b;
  try {
    b = body(st);
  } catch (e) {
    return fill(res, local(e));
  }
  fill(res, h("p", { class: "muted", role: "status" }, pending));
  try {
    answered(await app.api.put(st.file, b, st.edit.baseSha, dryRun));
  } catch (err) {
    await failed(app, st, err);
  }
}

export function preview(app, st) {
  return send(app, st, "Previewing…", true, (ans) => {
    const items = readable(ans.patch, st.edit.baseContent);
    fill($("editor-result"), h("div", { class: "preview" },
      h("h3", { id: "preview-h", tabindex: "-1" }, "Preview: what saving would change"),
      changes(items, "No changes: saving would make no commit.")));
    focusOn($("preview-h"));
  });
}

export function save(app, st) {
  const base = st.edit.baseSha;
  return send(app, st, "Saving…", false, (ans) => {
    app.applyWrite(st, ans);
    close(app, st);
    const same = shaOf(st.file, ans) === base;
    app.flash(same ? "Nothing changed, so no commit was made." : `Saved as commit ${short(ans.commit_sha)}.`);
  });
}

async function failed(app, st, err) {
  if (err.status === 409 || err.status === 412) return conflict(app, st, err);
  fill($("editor-result"), problem(err, "The service refused the write."));
  focusOn($("editor-result"));
}

/** The newest commit of the history whose file is `blob` (paging as far as needed). */
async function commitOfBlob(app, st, blob) {
  const hit = st.entries.find((e) => e.file_sha === blob);
  if (hit) return hit.commit_sha;
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
    h("p", {}, "Someone changed this file after you opened it. Your text was not saved."),
    problem(err),
    h("h4", {}, "The other change"),
    other,
    h("div", { class: "actions" },
      h("button", { type: "button", id: "conflict-restart", on: { click: () => restart(app, st) } },
        "Start again from the current version")),
    h("details", {}, h("summary", {}, "Your text (to copy from)"),
      h("label", { for: "conflict-mine" }, "Your text"),
      h("textarea", { id: "conflict-mine", class: "code-input", rows: "10", readonly: true, value: ed.text }))));
  focusOn($("conflict-h"));
  try {
    const from = await commitOfBlob(app, st, ed.baseSha);
    if (!from) return fill(other, h("p", { class: "muted" }, "The version you opened is not in the file's history any more."));
    const diff = await app.api.diff(st.file, from);
    fill(other, h("p", {}, "From the version you opened (", commitRef(from), ") to the current one (",
      commitRef(diff.to.commit_sha), "):"), diffPair(readable(diff.patch, ed.baseContent), diff.text));
  } catch (e) {
    fill(other, problem(e, "The other change could not be loaded."));
  }
}

async function restart(app, st) {
  const message = st.edit ? st.edit.message : "";
  await app.loadFile(st.file);
  if (!st.data) return;
  open(app, st);
  st.edit.message = message;
  $("editor-message").value = message;
  app.flash("The editor now holds the current version.");
}
