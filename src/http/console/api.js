// The planfiles HTTP API, same origin, with the bearer token in the Authorization header only.

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
  get code() {
    return this.problem.code;
  }
}

export class Api {
  /** `token()` gives the current token; `onUnauthorized(err)` is told of every 401. */
  constructor(token, onUnauthorized) {
    this.token = token;
    this.onUnauthorized = onUnauthorized;
  }

  async call(method, path, { body, ifMatch, query, accept } = {}) {
    const headers = { Accept: accept || "application/json", Authorization: `Bearer ${this.token()}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (ifMatch) headers["If-Match"] = `"${ifMatch}"`;
    const qs = query ? "?" + new URLSearchParams(query).toString() : "";
    let res;
    try {
      res = await fetch(path + qs, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
      });
    } catch (e) {
      throw new ApiError(0, { title: "Network error", detail: `The service could not be reached (${e.message}).`, code: "network" });
    }
    const text = await res.text();
    if (res.ok && accept) return { text, etag: res.headers.get("ETag") };
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!res.ok) {
      const problem = data && typeof data === "object" ? data : { title: res.statusText, detail: text.slice(0, 300) };
      const err = new ApiError(res.status, { status: res.status, ...problem });
      if (res.status === 401) this.onUnauthorized(err);
      throw err;
    }
    return data;
  }

  getFile(file, ref) {
    return this.call("GET", `/plans/${file}`, ref ? { query: { ref } } : {});
  }
  /** The file's stored text as it is (`Accept: application/yaml`), at `ref` or the head:
   * `{text, etag}`. */
  getText(file, ref) {
    return this.call("GET", `/plans/${file}`, { accept: "application/yaml", query: ref ? { ref } : undefined });
  }
  history(file, limit, cursor) {
    const query = { limit: String(limit) };
    if (cursor) query.cursor = cursor;
    return this.call("GET", `/plans/${file}/history`, { query });
  }
  diff(file, from, to) {
    const query = { from };
    if (to) query.to = to;
    return this.call("GET", `/plans/${file}/diff`, { query });
  }
  /** PUT of a whole file; `dryRun` asks for the patch only. */
  put(file, body, sha, dryRun) {
    return this.call("PUT", `/plans/${file}`, { body, ifMatch: sha, query: dryRun ? { dry_run: "true" } : undefined });
  }
  restore(file, commit, sha, dryRun, message) {
    const body = { commit };
    if (message) body.message = message;
    return this.call("POST", `/plans/${file}/restore`, { body, ifMatch: sha, query: dryRun ? { dry_run: "true" } : undefined });
  }
  proposals(state) {
    return this.call("GET", "/plans/proposals", { query: state ? { state } : undefined });
  }
  proposal(n) {
    return this.call("GET", `/plans/proposals/${n}`);
  }
  propose(body) {
    return this.call("POST", "/plans/proposals", { body });
  }
  /** An approval names the commit the approver reviewed. */
  approve(n, commit) {
    return this.call("POST", `/plans/proposals/${n}/approve`, { body: { commit } });
  }
  /** `apply` or `close`. */
  proposalStep(n, step) {
    return this.call("POST", `/plans/proposals/${n}/${step}`);
  }
  ticket() {
    return this.call("POST", "/plans/events/tickets");
  }
}
