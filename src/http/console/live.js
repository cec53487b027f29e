// The change stream: a native EventSource on a single-use ticket. A lost connection is closed
// and opened again with a new ticket and `since=<last event id>` (EventSource's own reconnect
// would reuse the spent ticket).

/** The proposals' steps, each a `proposal.<step>` event whose id is the step's commit. */
export const STEPS = ["opened", "updated", "approved", "applied", "closed"].map((s) => `proposal.${s}`);
const TYPES = ["head", "reset", "integration-file", "configuration-file", ...STEPS];

export class Live {
  /** `on[type](data, id)` for each event type; `status(text, state)` for the indicator. */
  constructor(api, on, status) {
    this.api = api;
    this.on = on;
    this.status = status;
    this.source = null;
    this.timer = null;
    this.lastId = null;
    this.delay = 500;
    this.stopped = true;
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.source) this.source.close();
    this.source = null;
    this.status("off", "off");
  }

  async connect() {
    if (this.stopped) return;
    this.status("connecting…", "wait");
    let ticket;
    try {
      ticket = (await this.api.ticket()).ticket;
    } catch (err) {
      if (err.status >= 400 && err.status < 500 && err.status !== 408 && err.status !== 429) {
        // 401 signs out (see Api); 403 (may read neither file), 404 (no such tenant): nothing to
        // follow, and nothing to wait for before reading (which shows why).
        this.status(`off (${err.code || err.status})`, "off");
        if (this.on.unavailable) this.on.unavailable(err);
        return;
      }
      return this.retry();
    }
    if (this.stopped) return;
    let url = `/plans/events?ticket=${encodeURIComponent(ticket)}`;
    if (this.lastId) url += `&since=${encodeURIComponent(this.lastId)}`;
    const source = new EventSource(url);
    this.source = source;
    source.addEventListener("open", () => {
      this.delay = 500;
      this.status("connected", "on");
    });
    for (const type of TYPES) {
      source.addEventListener(type, (e) => {
        if (source !== this.source) return;
        if (e.lastEventId) this.lastId = e.lastEventId;
        let data = null;
        try {
          data = JSON.parse(e.data);
        } catch {
          return;
        }
        this.on[type](data, e.lastEventId);
      });
    }
    source.addEventListener("error", () => {
      if (source !== this.source) return;
      source.close();
      this.source = null;
      this.retry();
    });
  }

  retry() {
    if (this.stopped) return;
    const wait = this.delay;
    this.delay = Math.min(this.delay * 2, 15000);
    this.status(`reconnecting in ${Math.ceil(wait / 1000)} s…`, "wait");
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), wait);
  }
}
