// The "History" section: one row per commit that changed the file, newest first, paged.
import { h, fill } from "./dom.js";
import { when, subject, requestId, trailers } from "./format.js";
import { problem, commitRef } from "./views.js";

/** "Verified" for a commit the service signed; "Unverified" for any other (plain git's, a
 * key it does not list, a commit changed after signing). */
function signed(e) {
  return e.verified
    ? h("span", { class: "badge badge-verified", title: "Signed by this service's key: git verify-commit accepts it with the keys of /plans/signing-keys" }, "Verified")
    : h("span", { class: "badge badge-unverified", title: "Not signed by this service: made with plain git, or signed by a key it does not list, or changed after signing" }, "Unverified");
}

export function renderHistory(el, st, ctx, actions) {
  if (!ctx.canRead) return fill(el, h("p", { class: "muted" }, "Your token may not read this file."));
  const rows = st.entries.map((e, i) => {
    const t = when(e.date);
    const isNew = st.fresh.has(e.commit_sha);
    // "(restored from …)" unless the subject names that commit already (the default one does).
    const from = trailers(e.message)["restored-from"];
    const restored = from && !subject(e.message).includes(from.slice(0, 10)) ? from : null;
    const older = st.entries[i + 1];
    return h("tr", { class: isNew ? "is-new" : null, dataset: { commit: e.commit_sha } },
      h("td", { dataset: { label: "When" } }, h("time", { datetime: e.date, title: t.title }, t.text),
        isNew ? [" ", h("span", { class: "badge badge-new" }, "new")] : null),
      h("td", { dataset: { label: "Author" } }, h("span", { title: e.author.email }, e.author.name),
        e.pushed_by ? h("span", { class: "pushed muted" }, "pushed by ", h("span", { title: e.pushed_by.email }, e.pushed_by.name)) : null),
      // The request id under the subject, on a line of its own: a column of its own made the
      // table wider than a 1280 px screen once ids and dates stopped wrapping.
      h("td", { class: "msg", dataset: { label: "Message" } }, subject(e.message),
        restored ? h("span", { class: "muted" }, " (restored from ", commitRef(restored), ")") : null,
        requestId(e) ? h("span", { class: "rid-line muted" }, "request id ", h("code", { class: "rid", title: requestId(e) }, requestId(e))) : null),
      h("td", { dataset: { label: "Forced" } }, e.forced ? h("span", { class: "badge badge-forced" }, "forced") : h("span", { class: "muted" }, "no")),
      h("td", { dataset: { label: "Commit" } }, commitRef(e.commit_sha), " ", signed(e)),
      h("td", { class: "row-actions" },
        h("button", {
          type: "button", class: "small secondary",
          "aria-label": `View the file as it was in ${e.commit_sha.slice(0, 10)}`,
          on: { click: () => actions.view(e) },
        }, "View"),
        h("button", {
          type: "button", class: "small secondary",
          disabled: !older && !st.cursor,
          title: !older && !st.cursor ? "The first version of the file" : null,
          "aria-label": `Compare ${e.commit_sha.slice(0, 10)} with the version before it`,
          on: { click: () => actions.compareWithPrevious(e) },
        }, "Compare with previous"),
        ctx.canWrite && i > 0 ? h("button", {
          type: "button", class: "small secondary",
          "aria-label": `Restore the version of ${e.commit_sha.slice(0, 10)}`,
          on: { click: () => actions.restore(e) },
        }, "Restore…") : null));
  });
  fill(el,
    st.historyError ? problem(st.historyError, "The history could not be read.") : null,
    h("div", { class: "table-wrap" },
      h("table", { class: "history" },
        h("caption", { class: "visually-hidden" }, "Commits that changed the file, newest first"),
        h("thead", {}, h("tr", {},
          ["When", "Author", "Message", "Forced", "Commit", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: "6", class: "muted" }, st.loadingHistory ? "Loading…" : "No history."))))),
    h("div", { class: "actions" },
      st.cursor ? h("button", {
        type: "button", id: "history-older", class: "secondary", "aria-busy": st.loadingHistory ? "true" : null,
        on: { click: () => actions.older() },
      }, st.loadingHistory ? "Loading…" : "Older") : h("p", { class: "muted" }, st.entries.length ? "No older versions." : "")));
}
