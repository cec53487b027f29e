// Unsaved edits, kept in this tab's sessionStorage per tenant and file (with the version they
// started from), so that signing in again after the token expired brings the editor back.

const PREFIX = "planfiles.draft.";
const key = (tenant, file) => `${PREFIX}${tenant}.${file}`;

/** Keeps `draft` ({baseSha, baseCommit, baseText, text, message}) for the tenant's file. */
export function keep(tenant, file, draft) {
  try {
    sessionStorage.setItem(key(tenant, file), JSON.stringify(draft));
  } catch {
    // A full or disabled storage keeps nothing; the editor still works.
  }
}

/** The tenant's kept draft of `file`, if any. */
export function kept(tenant, file) {
  try {
    const d = JSON.parse(sessionStorage.getItem(key(tenant, file)) || "null");
    return d && typeof d.text === "string" && typeof d.baseSha === "string" ? d : null;
  } catch {
    return null;
  }
}

export function drop(tenant, file) {
  try {
    sessionStorage.removeItem(key(tenant, file));
  } catch {
    // nothing kept
  }
}
