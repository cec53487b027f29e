// Display only: the parsed configuration as YAML-like text (the API gives no stored text for
// this file). Never sent back to the service.

const PLAIN = /^[A-Za-z0-9_./][A-Za-z0-9_ ./*@%+-]*$|^-[A-Za-z0-9_./][A-Za-z0-9_ ./*@%+-]*$/;
const AMBIGUOUS = /^(?:true|false|yes|no|on|off|y|n|null|~|[-+]?[0-9][0-9_.:eEx+-]*|\.inf|\.nan)$/i;

function scalar(v) {
  if (v === null) return "null";
  if (typeof v !== "string") return JSON.stringify(v);
  if (v === "" || !PLAIN.test(v) || AMBIGUOUS.test(v) || v.endsWith(" ")) return JSON.stringify(v);
  return v;
}

const empty = (v) => (Array.isArray(v) ? v.length === 0 : v !== null && typeof v === "object" && Object.keys(v).length === 0);
const nested = (v) => v !== null && typeof v === "object" && !empty(v);
const flow = (v) => (Array.isArray(v) ? "[]" : "{}");

function lines(v, indent, out) {
  const pad = " ".repeat(indent);
  if (Array.isArray(v)) {
    for (const item of v) {
      if (nested(item) && !Array.isArray(item)) {
        const sub = [];
        lines(item, indent + 2, sub);
        sub[0] = pad + "- " + sub[0].slice(indent + 2);
        out.push(...sub);
      } else if (nested(item)) {
        out.push(pad + "-");
        lines(item, indent + 2, out);
      } else {
        out.push(pad + "- " + (empty(item) ? flow(item) : scalar(item)));
      }
    }
  } else {
    for (const [k, val] of Object.entries(v)) {
      const key = scalar(k);
      if (nested(val)) {
        out.push(`${pad}${key}:`);
        lines(val, indent + 2, out);
      } else {
        out.push(`${pad}${key}: ${empty(val) ? flow(val) : scalar(val)}`);
      }
    }
  }
  return out;
}

/** YAML-like text of a JSON value whose top level is a mapping. */
export function render(content) {
  if (!nested(content)) return "{}\n";
  return lines(content, 0, []).join("\n") + "\n";
}
