// The "Compare versions" section: any two loaded versions, or one with the one before it.
import { h, fill, $, focusOn } from "./dom.js";
import { short, when, subject } from "./format.js";
import { readable } from "./patch.js";
import { problem, diffPair, commitRef, onlyText } from "./views.js";

function option(e, selected) {
  const t = when(e.date);
  return h("option", { value: e.commit_sha, selected }, `${short(e.commit_sha)} · ${t.text} · ${subject(e.message)}`);
}

/** Fills the From/To lists with the loaded history, keeping the choices made. */
export function renderOptions(st) {
  const from = $("compare-from"), to = $("compare-to");
  const keepFrom = from.value || (st.entries[1] && st.entries[1].commit_sha) || "";
  const keepTo = to.value;
  fill(from, st.entries.map((e) => option(e, e.commit_sha === keepFrom)));
  fill(to, h("option", { value: "" }, "Current version (main)"), st.entries.map((e) => option(e, e.commit_sha === keepTo)));
  if (!st.entries.length) from.append(h("option", { value: "" }, "No versions loaded"));
}

/** Runs a diff and shows it; `from`/`to` are commits (`to` "" for main). */
export async function compare(app, st, from, to) {
  const body = $("compare-body");
  if (!from) return fill(body, h("p", { class: "muted" }, "Pick a version to compare from."));
  st.compared = null;
  fill(body, h("p", { class: "muted", role: "status" }, "Comparing…"));
  try {
    const [diff, before] = await Promise.all([
      app.api.diff(st.file, from, to || undefined),
      app.api.getFile(st.file, from),
    ]);
    if (app.current !== st.file) return;
    const items = readable(diff.patch, before.content);
    st.compared = { from, to, head: diff.to.commit_sha };
    // A change of comments or layout alone is a change too: no "0 changes" beside its text diff.
    const count = items.length ? `: ${items.length} change${items.length === 1 ? "" : "s"} to the content.` : ".";
    fill(body,
      h("div", { id: "compare-stale", class: "note", role: "status", hidden: true }),
      h("p", { class: "compare-sides" }, "From commit ", commitRef(diff.from.commit_sha), " to commit ",
        commitRef(diff.to.commit_sha), to ? "" : " (the current version)", count),
      !items.length && diff.text ? onlyText() : null,
      diffPair(items, diff.text));
  } catch (err) {
    fill(body, problem(err, "The versions could not be compared."));
  }
  focusOn($("compare-h"));
  // On a narrow screen the result is below the form: bring it up.
  body.scrollIntoView({ block: "start" });
}

/** A comparison with the current version goes out of date when the file changes: it says
 * so (the result stays, to read). */
export function markStale(st) {
  if (!st.compared || st.compared.to) return;
  const note = $("compare-stale");
  if (!note) return;
  note.textContent = "The file has changed since this comparison: the current version is newer than the one compared. Compare again to see it.";
  note.hidden = false;
}

/** The commit before `entry` in the file's history (loading one more page when needed). */
export async function previousOf(app, st, entry) {
  const i = st.entries.findIndex((e) => e.commit_sha === entry.commit_sha);
  if (i >= 0 && st.entries[i + 1]) return st.entries[i + 1].commit_sha;
  for (let tries = 0; st.cursor && tries < 50; tries++) {
    const cursor = st.cursor;
    await app.older(st.file);
    const j = st.entries.findIndex((e) => e.commit_sha === entry.commit_sha);
    if (j < 0) return null; // the history was read again meanwhile
    if (st.entries[j + 1]) return st.entries[j + 1].commit_sha;
    if (st.cursor === cursor) await new Promise((r) => setTimeout(r, 200)); // another load was running
  }
  return null;
}

export async function compareWithPrevious(app, st, entry) {
  const prev = await previousOf(app, st, entry);
  if (!prev) return fill($("compare-body"), h("p", { class: "muted" }, "This is the first version of the file."));
  renderOptions(st);
  $("compare-from").value = prev;
  $("compare-to").value = entry.commit_sha;
  return compare(app, st, prev, entry.commit_sha);
}
