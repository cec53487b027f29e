// The "Current version" section: status, blob id, head commit, errors and the YAML text.
import { h, fill } from "./dom.js";
import { render as yaml } from "./yaml.js";
import { when } from "./format.js";
import { problem, code, commitRef, violations } from "./views.js";

export const shaOf = (file, data) => (file === "integration-file" ? data.file_sha : data.sha);

/** The text shown for a file answer, and whether it is the stored text. */
export function textOf(file, data) {
  if (file === "integration-file") return { text: data.raw_content, stored: true };
  if (typeof data.stored_text === "string") return { text: data.stored_text, stored: true };
  return { text: yaml(data.content), stored: false };
}

/** An older version of the file (a history row's "View"), with the way back. */
function renderVersion(el, st, ctx) {
  const v = st.viewing;
  const t = when(v.entry.date);
  const back = h("button", { type: "button", id: "view-back", class: "secondary", on: { click: () => ctx.stopViewing() } }, "Back to the current version");
  const head = h("div", { class: "notice", role: "status" }, "You are looking at the version of commit ", commitRef(v.entry.commit_sha), ", ",
    h("time", { datetime: v.entry.date, title: t.title }, t.text), ". ", back);
  if (v.error) return fill(el, head, problem(v.error, "This version could not be read."));
  if (!v.data) return fill(el, head, h("p", { class: "muted" }, "Loading…"));
  return fill(el, head,
    h("dl", { class: "facts meta" },
      h("div", {}, h("dt", {}, "Status"), h("dd", {}, h("span", { class: `badge badge-${v.data.status || "valid"}` }, v.data.status || "valid"))),
      h("div", {}, h("dt", {}, "Blob id"), h("dd", {}, commitRef(shaOf(st.file, v.data))))),
    h("h3", {}, "Stored YAML text in this version"),
    v.data.validation_errors && v.data.validation_errors.length
      ? h("div", { class: "problem", role: "alert" },
          h("p", { class: "problem-title" }, "This version is invalid"),
          violations(v.data.validation_errors))
      : null,
    code(v.text, "Stored YAML text of this version with line numbers", v.data.validation_errors || []));
}

export function renderCurrent(el, st, ctx) {
  if (!ctx.canRead) return fill(el, h("p", { class: "muted" }, "Your token may not read this file."));
  if (st.viewing) return renderVersion(el, st, ctx);
  if (st.error) return fill(el, problem(st.error, "The file could not be read."));
  if (!st.data) return fill(el, h("p", { class: "muted" }, "Loading…"));
  const d = st.data;
  const status = d.status || "valid";
  const { text, stored } = textOf(st.file, d);
  const last = st.entries[0];
  fill(el,
    h("dl", { class: "facts meta" },
      h("div", {}, h("dt", {}, "Status"), h("dd", {}, h("span", { class: `badge badge-${status}` }, status))),
      h("div", {}, h("dt", {}, "Blob id"), h("dd", {}, commitRef(shaOf(st.file, d)))),
      h("div", {}, h("dt", {}, "Head of main"), h("dd", {}, commitRef(ctx.head))),
      h("div", {}, h("dt", {}, "Last changed in"), h("dd", {}, commitRef(last && last.commit_sha)))),
    d.validation_errors && d.validation_errors.length
      ? h("div", { class: "problem", role: "alert" },
          h("p", { class: "problem-title" }, "The stored file is invalid"),
          violations(d.validation_errors))
      : null,
    h("h3", { id: "current-text-h" }, stored ? "Stored YAML text" : "Content as YAML (rendered)"),
    stored ? null : h("p", { class: "note" },
      "The stored text could not be read, so this is rendered from the parsed content: ",
      "comments and layout of the stored file are not shown."),
    code(text, stored ? "Stored YAML text with line numbers" : "Rendered YAML with line numbers",
      stored ? d.validation_errors || [] : []));
}
