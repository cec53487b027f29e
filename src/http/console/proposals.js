// The "Proposals" section: the tenant's open proposals (who, what, how many approvals), each
// one's changes against main, and Approve, Apply and Close as the token allows; "Propose"
// from the editor sends its text as a proposal instead of saving it.
import { h, fill, $, focusOn } from "./dom.js";
import { short, when } from "./format.js";
import { problem, unified } from "./views.js";
import { FILES } from "./session.js";

export const APPROVE = "planfiles.proposals.approve";
/** How often the open proposals are read again while signed in (each step's event reads them
 * at once; this is for a change stream that is down). */
const POLL_MS = 5000;

/** Reads the open proposals now, at each step's event, and every few seconds, until sign-out. */
export function start(app) {
  app.proposals = { list: [], required: 0, shown: null, error: null };
  load(app);
  app.timers.push(setInterval(() => load(app), POLL_MS));
}

/** Reads the open proposals again and shows them. */
export async function load(app) {
  const api = app.api;
  if (!api || !app.session || !readsAny(app)) return render(app);
  try {
    const page = await api.proposals("open");
    if (app.api !== api) return;
    app.proposals.list = page.proposals;
    app.proposals.error = null;
    if (page.proposals.length) app.proposals.required = page.proposals[0].approvals_required;
  } catch (err) {
    if (app.api !== api) return;
    app.proposals.error = err;
  }
  render(app);
}

const readsAny = (app) => app.session.permissions.includes(APPROVE) || Object.keys(FILES).some((f) => app.session.canRead(f));

/** Whether the tenant asks for approval (known once a proposal or a refused save said so). */
export const required = (app) => Boolean(app.proposals && app.proposals.required > 0);

function render(app) {
  const body = $("proposals-body");
  if (!app.session || !app.proposals) return fill(body);
  const st = app.proposals;
  const me = app.session.claims.sub;
  const rows = st.list.map((p) => {
    const approvals = p.approvals.length;
    const mine = p.author.sub === me;
    const approved = p.approvals.some((a) => a.by.sub === me);
    const canApprove = app.session.permissions.includes(APPROVE) && !mine && !approved;
    const canApply = (mine || approved) && approvals >= p.approvals_required;
    const t = when(p.created);
    return h("li", { class: "proposal", dataset: { number: String(p.number) } },
      h("p", { class: "proposal-title" }, h("strong", {}, `#${p.number} `), p.title),
      h("p", { class: "muted" }, `by ${p.author.name} (${p.author.sub}), `,
        h("time", { datetime: p.created, title: t.title }, t.text), ` · ${p.files.join(", ")} · `,
        h("span", { class: "approvals" }, `${approvals} of ${p.approvals_required} approval${p.approvals_required === 1 ? "" : "s"}`),
        approvals ? ` (${p.approvals.map((a) => a.by.name).join(", ")})` : ""),
      h("div", { class: "actions" },
        h("button", { type: "button", class: "secondary", on: { click: () => show(app, p.number) } }, "Show changes"),
        canApprove ? h("button", { type: "button", on: { click: () => act(app, p, "approve") } }, "Approve") : null,
        canApply ? h("button", { type: "button", on: { click: () => act(app, p, "apply") } }, "Apply") : null,
        mine ? h("button", { type: "button", class: "secondary", on: { click: () => act(app, p, "close") } }, "Close") : null),
      st.shown && st.shown.number === p.number ? st.shown.view : null);
  });
  fill(body,
    st.error ? problem(st.error, "The proposals could not be read.") : null,
    rows.length ? h("ul", { class: "proposals" }, rows) : h("p", { class: "muted" }, "No open proposals."));
}

/** Shows proposal `n`'s changes against the current version of each file. */
async function show(app, n) {
  const st = app.proposals;
  st.shown = { number: n, view: h("p", { class: "muted", role: "status" }, "Loading…") };
  render(app);
  try {
    const p = await app.api.proposal(n);
    st.shown = {
      number: n,
      view: h("div", { class: "proposal-changes" },
        p.stale ? h("p", { class: "stale" }, "A file it changes moved on since it was proposed: its author must update it before it applies.") : null,
        p.message ? h("p", { class: "proposal-message" }, p.message) : null,
        p.diffs.map((d) => [h("h4", {}, `${d.file}: from the current version`), unified(d.from_main.text)])),
    };
  } catch (err) {
    st.shown = { number: n, view: problem(err) };
  }
  render(app);
}

/** Approves (the commit shown in the list), applies or closes `p`. */
async function act(app, p, step) {
  const done = { approve: "Approved", apply: "Applied", close: "Closed" }[step];
  try {
    const after = step === "approve" ? await app.api.approve(p.number, p.commit) : await app.api.proposalStep(p.number, step);
    app.flash(step === "apply" ? `${done} proposal #${p.number} as commit ${short(after.applied_commit)}.` : `${done} proposal #${p.number}.`);
    if (app.proposals.shown && app.proposals.shown.number === p.number) app.proposals.shown = null;
  } catch (err) {
    app.proposals.shown = { number: p.number, view: problem(err, `Not ${done.toLowerCase()}.`) };
  }
  await load(app);
  focusOn($("proposals-h"));
}

/** Sends the editor's text as a proposal: the title is the commit message (or says which file). */
export async function propose(app, st) {
  const ed = st.edit;
  const part = st.file === "integration-file" ? { content: ed.text } : { payload: ed.text, file_sha: ed.baseSha };
  const title = ed.message.trim() || `Change the ${st.file.replace("-", " ")}`;
  fill($("editor-result"), h("p", { class: "muted", role: "status" }, "Proposing…"));
  try {
    const p = await app.api.propose({ [st.file]: part, title });
    app.proposals.required = p.approvals_required;
    return p;
  } catch (err) {
    fill($("editor-result"), problem(err, "The proposal was refused."));
    focusOn($("editor-result"));
    return null;
  }
}
