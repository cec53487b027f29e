// How dates, commits and commit messages are shown.

export const short = (sha) => (sha ? String(sha).slice(0, 10) : "");

/** A date in the browser's time zone, with the full ISO text for a title. */
export function when(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return { text: String(iso), title: String(iso) };
  const text = d.toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });
  return { text, title: iso };
}

export const subject = (message) => String(message || "").split("\n")[0];

/** The trailers of a commit message (last paragraph of `Key: value` lines). */
export function trailers(message) {
  const paras = String(message || "").trim().split(/\n\s*\n/);
  const out = {};
  if (paras.length < 2) return out;
  for (const line of paras[paras.length - 1].split("\n")) {
    const m = /^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$/.exec(line);
    if (m) out[m[1].toLowerCase()] = m[2];
  }
  return out;
}

/** The request id of a history entry: the event's field, else the commit's trailer. */
export const requestId = (entry) => entry.request_id ?? trailers(entry.message)["request-id"] ?? null;

/** A value in a change list: strings as they are, the rest as compact JSON, cut at 80. */
export function value(v) {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s.length > 80 ? s.slice(0, 79) + "…" : s;
}
