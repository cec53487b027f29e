// RFC 6902 patches as readable changes: array items of cloud accounts and folders are named by
// their account_id / path, resolved against the document as each operation finds it.
import { value } from "./format.js";

const unescape = (s) => s.replace(/~1/g, "/").replace(/~0/g, "~");
export const segments = (ptr) => (ptr === "" ? [] : ptr.slice(1).split("/").map(unescape));

const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));
const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** What an array element is called: `account 1234…`, `folder src/`, else null. */
function keyed(item) {
  if (!isObj(item)) return null;
  if (typeof item.account_id === "string" || typeof item.account_id === "number") {
    return { kind: "account", id: String(item.account_id) };
  }
  if (typeof item.path === "string") return { kind: "folder", id: item.path };
  return null;
}

/** Labels of the containers along `segs` (all but the last), for "… of <context>". */
function context(doc, segs) {
  const labels = [];
  let node = doc;
  for (let i = 0; i < segs.length - 1; i++) {
    const seg = segs[i];
    if (Array.isArray(node)) {
      const item = node[Number(seg)];
      const k = keyed(item);
      if (k) {
        if (labels.length && labels[labels.length - 1].array) labels.pop(); // "aws" says no more than the id
        labels.push({ text: k.kind === "account" ? k.id : `folder ${k.id}` });
      } else {
        labels.push({ text: `item ${Number(seg) + 1}` });
      }
      node = item;
    } else if (isObj(node)) {
      node = own(node, seg);
      labels.push({ text: seg, array: Array.isArray(node) });
    } else {
      throw new Error(`no container at ${seg}`);
    }
  }
  return { labels: labels.map((l) => l.text), parent: node };
}

const of = (labels) => (labels.length ? ` of ${labels.join(" › ")}` : "");

function describe(doc, op) {
  const segs = segments(op.path);
  if (segs.length === 0) return { kind: "change", text: "replaced the whole file" };
  const { labels, parent } = context(doc, segs);
  const last = segs[segs.length - 1];
  if (op.op === "move") {
    const fsegs = segments(op.from);
    const { parent: fparent } = context(doc, fsegs);
    const moved = Array.isArray(fparent) ? fparent[Number(fsegs[fsegs.length - 1])] : fparent?.[fsegs[fsegs.length - 1]];
    const k = keyed(moved);
    const name = k ? `${k.kind} ${k.id}` : value(moved);
    const to = Array.isArray(parent) ? ` to position ${last === "-" ? parent.length : Number(last) + 1}` : ` to ${last}`;
    return { kind: "move", text: `moved ${name}${to}${of(labels)}` };
  }
  if (Array.isArray(parent)) {
    const old = last === "-" ? undefined : parent[Number(last)];
    const item = op.op === "add" ? op.value : old;
    const k = keyed(item) || (op.op === "replace" ? keyed(op.value) : null);
    // The array's own name is the last context label: "regions of 1234…".
    const arrName = labels.length ? labels[labels.length - 1] : "list";
    const where = `${arrName}${of(labels.slice(0, -1))}`;
    if (k) {
      const name = `${k.kind} ${k.id}`;
      const extra = labels.length > 1 ? ` in ${where}` : "";
      if (op.op === "add") return { kind: "add", text: `added ${name}${extra}` };
      if (op.op === "remove") return { kind: "remove", text: `removed ${name}${extra}` };
      return { kind: "change", text: `replaced ${name}${extra}` };
    }
    if (op.op === "add") return { kind: "add", text: `${where}: + ${value(op.value)}` };
    if (op.op === "remove") return { kind: "remove", text: `${where}: − ${value(old)}` };
    return { kind: "change", text: `${where}: ${value(old)} → ${value(op.value)}` };
  }
  const name = `${last}${of(labels)}`;
  if (op.op === "add") return { kind: "add", text: `added ${name}: ${value(op.value)}` };
  if (op.op === "remove") return { kind: "remove", text: `removed ${name}` };
  if (op.op === "replace") return { kind: "change", text: `${name}: ${value(parent?.[last])} → ${value(op.value)}` };
  return { kind: "change", text: `${op.op} ${op.path}` };
}

// Own properties only: a key such as "__proto__" in a tenant's file is data, never the
// object's prototype.
const own = (node, key) => (isObj(node) && Object.hasOwn(node, key) ? node[key] : undefined);

function get(doc, segs) {
  let node = doc;
  for (const s of segs) node = Array.isArray(node) ? node[Number(s)] : own(node, s);
  return node;
}

/** Applies one operation to `doc` in place (the root may be replaced: returns the result). */
function apply(doc, op) {
  const segs = segments(op.path);
  if (segs.length === 0) return clone(op.value);
  let val = clone(op.value);
  if (op.op === "move" || op.op === "copy") {
    const fsegs = segments(op.from);
    val = clone(get(doc, fsegs));
    if (op.op === "move") doc = apply(doc, { op: "remove", path: op.from });
  }
  if (op.op === "test") return doc;
  const parent = get(doc, segs.slice(0, -1));
  const last = segs[segs.length - 1];
  if (Array.isArray(parent)) {
    const i = last === "-" ? parent.length : Number(last);
    if (!(i >= 0 && i <= parent.length)) throw new Error(`bad index ${op.path}`);
    if (op.op === "remove") parent.splice(i, 1);
    else if (op.op === "replace") parent[i] = val;
    else parent.splice(i, 0, val);
  } else if (isObj(parent)) {
    if (op.op === "remove") delete parent[last];
    else Object.defineProperty(parent, last, { value: val, writable: true, enumerable: true, configurable: true });
  } else {
    throw new Error(`no container for ${op.path}`);
  }
  return doc;
}

/**
 * The changes of `patch` applied to `from` (the content the patch starts at), one
 * {kind: add|remove|change|move, text, op} per operation, in order. When the patch does not
 * fit `from`, the rest are shown by their JSON pointers.
 */
export function readable(patch, from) {
  let doc = clone(from ?? {});
  let fits = true;
  return (patch || []).map((op) => {
    if (fits) {
      try {
        const d = describe(doc, op);
        doc = apply(doc, op);
        return { ...d, op };
      } catch {
        fits = false;
      }
    }
    const kind = op.op === "add" ? "add" : op.op === "remove" ? "remove" : "change";
    return { kind, text: `${op.op} ${op.path}${"value" in op ? ": " + value(op.value) : ""}`, op };
  });
}
