// The "Restore" section: a dry run of restoring a version, then a confirm button.
import { h, fill, $, focusOn } from "./dom.js";
import { short, when, subject } from "./format.js";
import { readable } from "./patch.js";
import { problem, commitRef, diffPair, onlyText } from "./views.js";
import { shaOf, textOf } from "./fileview.js";
import { unifiedDiff } from "./textdiff.js";

export function cancel(st) {
  if (st) st.restore = null;
  $("restore").hidden = true;
  fill($("restore-body"));
}

/** Shows what restoring `entry` would change (a dry run against the version shown). */
export async function start(app, st, entry) {
  st.restore = { entry };
  app.clearFlash();
  const body = $("restore-body");
  $("restore").hidden = false;
  const t = when(entry.date);
  const intro = h("p", {}, "Restore the file as it was in ", commitRef(entry.commit_sha), " (",
    h("time", { datetime: entry.date, title: t.title }, t.text), ", “", subject(entry.message), "”).");
  fill(body, intro, h("p", { class: "muted", role: "status" }, "Checking what it would change…"));
  focusOn($("restore-h"));
  const sha = st.data && shaOf(st.file, st.data);
  try {
    // The dry run's patch, and the text as it is against the text restoring gives back
    // (the stored bytes of that version), so a change of comments or layout shows too.
    const [ans, old] = await Promise.all([
      app.api.restore(st.file, entry.commit_sha, sha, true),
      app.api.getText(st.file, entry.commit_sha),
    ]);
    if (st.restore?.entry !== entry) return;
    st.restore.text = old.text;
    const items = readable(ans.patch, st.data.content);
    const same = shaOf(st.file, ans) === sha;
    const textDiff = unifiedDiff(textOf(st.file, st.data).text, old.text);
    let summary;
    if (same) summary = h("p", { class: "muted changes-empty" }, "No changes: the file is already this version.");
    else if (!items.length) summary = onlyText(", and restoring makes a commit");
    const msg = h("input", { id: "restore-message", type: "text", maxlength: "200", autocomplete: "off" });
    fill(body, intro,
      h("h3", { id: "restore-preview-h" }, "Preview: what restoring would change"),
      summary,
      same ? null : [
        diffPair(items, textDiff),
        h("label", { for: "restore-message" }, "Commit message ", h("span", { class: "muted" }, "(optional)")),
        msg,
      ],
      h("div", { class: "actions" },
        same ? null : h("button", { type: "button", id: "restore-confirm", on: { click: () => confirm(app, st, entry, sha, msg.value) } }, "Confirm restore"),
        h("button", { type: "button", class: "secondary", id: "restore-cancel", on: { click: () => cancel(st) } }, same ? "Close" : "Cancel")));
    focusOn($("restore-confirm") || $("restore-cancel"));
  } catch (err) {
    failed(app, st, entry, body, intro, err);
  }
}

function failed(app, st, entry, body, intro, err) {
  const stale = err.status === 409 || err.status === 412;
  fill(body, intro,
    problem(err, stale ? "The file changed since you opened this version list." : "The service refused the restore."),
    h("div", { class: "actions" },
      stale ? h("button", { type: "button", on: { click: async () => { await app.loadFile(st.file); start(app, st, entry); } } }, "Check again") : null,
      h("button", { type: "button", class: "secondary", on: { click: () => cancel(st) } }, "Close")));
  focusOn($("restore-h"));
}

async function confirm(app, st, entry, sha, message) {
  const body = $("restore-body");
  const intro = body.firstChild;
  try {
    const ans = await app.api.restore(st.file, entry.commit_sha, sha, false, message.trim() || undefined);
    app.applyWrite(st, ans, st.restore?.text);
    cancel(st);
    app.flash(`Restored the version of ${short(entry.commit_sha)} as commit ${short(ans.commit_sha)}.`);
  } catch (err) {
    failed(app, st, entry, body, intro, err);
  }
}
