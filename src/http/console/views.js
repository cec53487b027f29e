// Renderers shared by the sections: problems, change lists, unified diffs, YAML with line numbers.
import { h } from "./dom.js";
import { short } from "./format.js";

/** An error answer (application/problem+json) with its title, detail and code. */
export function problem(err, lead) {
  const p = err.problem || { title: "Error", detail: String(err.message || err) };
  return h("div", { class: "problem", role: "alert" },
    lead ? h("p", { class: "problem-lead" }, lead) : null,
    h("p", { class: "problem-title" }, p.title || "Error", p.status ? ` (${p.status})` : ""),
    p.detail ? h("p", { class: "problem-detail" }, p.detail) : null,
    Array.isArray(p.errors) ? violations(p.errors, p.errors_omitted) : null,
    h("p", { class: "problem-meta" },
      p.code ? ["code ", h("code", {}, p.code)] : null,
      p.request_id ? [" · request ", h("code", {}, p.request_id)] : null,
      p.current_sha ? [" · current blob ", h("code", { title: p.current_sha }, short(p.current_sha))] : null));
}

const SIGN = { add: "+", remove: "−", change: "~", move: "↕" };

/** A readable change list (from patch.js `readable`). */
export function changes(items, emptyText = "No changes.") {
  if (!items.length) return h("p", { class: "muted changes-empty" }, emptyText);
  return h("ul", { class: "changes" },
    items.map((c) => h("li", { class: `change change-${c.kind}`, title: JSON.stringify(c.op) },
      h("span", { class: "sign", "aria-hidden": "true" }, SIGN[c.kind] || "~"), " ", c.text)));
}

/** A unified diff, its +/- lines coloured by class. */
export function unified(text) {
  if (!text) return h("p", { class: "muted" }, "The texts are the same.");
  const lines = text.replace(/\n$/, "").split("\n").map((line) => {
    let cls = "ctx";
    if (/^(diff --git|index |--- |\+\+\+ |new file|deleted file|similarity|rename)/.test(line)) cls = "meta";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    return h("span", { class: `dl dl-${cls}` }, line);
  });
  return h("pre", { class: "diff", tabindex: "0", "aria-label": "Unified diff" }, h("code", {}, lines));
}

/** YAML text with line numbers (CSS counters, so copying the text leaves them out). */
/** A schema violation as one line of text: where (line, column, JSON pointer) and why. */
export function violationText(v) {
  if (typeof v === "string") return v;
  const at = v.line ? `Line ${v.line}, column ${v.column}: ` : "";
  return `${at}${v.pointer || "/"}: ${v.message}`;
}

/** The violations of a 422 schema_violation or of an invalid stored file, as a list (each
 * with the schema keyword that failed in its title). */
export function violations(list, omitted) {
  return h("ul", { class: "violations" },
    list.map((v) => h("li", { title: typeof v === "string" ? "" : `${v.keyword} in ${v.schema}` }, violationText(v))),
    omitted ? h("li", { class: "muted" }, `and ${omitted} more`) : null);
}

/** YAML text with line numbers; lines named by `marks` (violations with a `line`) are
 * marked, with what is wrong there as their title. */
export function code(text, label, marks = []) {
  const bad = new Map();
  for (const v of marks) if (v && typeof v === "object" && v.line) bad.set(v.line, [...(bad.get(v.line) || []), violationText(v)]);
  const lines = String(text).replace(/\n$/, "").split("\n").map((line, i) => {
    const why = bad.get(i + 1);
    const cls = (/^\s*#/.test(line) ? "line comment" : "line") + (why ? " line-bad" : "");
    return h("span", why ? { class: cls, title: why.join("\n") } : { class: cls }, line + "\n");
  });
  return h("pre", { class: "code numbered", tabindex: "0", "aria-label": label }, h("code", {}, lines));
}

/** The keyed change list and the unified text side by side. */
export function diffPair(items, text) {
  return h("div", { class: "diff-pair" },
    h("div", {}, h("h3", {}, "Changes"), changes(items, text ? "No change to the content." : "No changes.")),
    h("div", {}, h("h3", {}, "Text diff"), unified(text)));
}

/** What a preview, a restore or a compare says when only the text changes: `then` ends the
 * sentence (", and saving makes a commit"). */
export function onlyText(then = "") {
  return h("p", { class: "note only-text" }, `Only the text changes (comments or layout): the content stays the same${then}.`);
}

export function commitRef(sha) {
  return h("code", { class: "sha", title: sha || "" }, sha ? short(sha) : "—");
}
