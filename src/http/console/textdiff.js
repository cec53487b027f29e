// A line diff of two texts in the browser (Myers' O(ND) algorithm), as a unified diff with a
// few lines of context: what a preview shows before anything is written.

/** The edit script between the line arrays `a` and `b`: [{op: " "|"-"|"+", line}]. */
function script(a, b) {
  const n = a.length, m = b.length, max = n + m;
  const v = new Map([[1, 0]]);
  const trace = [];
  for (let d = 0; d <= max; d++) {
    trace.push(new Map(v));
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && (v.get(k - 1) ?? -1) < (v.get(k + 1) ?? -1)) ? v.get(k + 1) ?? 0 : (v.get(k - 1) ?? 0) + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) { x++; y++; }
      v.set(k, x);
      if (x >= n && y >= m) return backtrack(trace, a, b, d);
    }
  }
  return [];
}

function backtrack(trace, a, b, d) {
  const out = [];
  let x = a.length, y = b.length;
  for (; d > 0; d--) {
    const v = trace[d];
    const k = x - y;
    const prevK = k === -d || (k !== d && (v.get(k - 1) ?? -1) < (v.get(k + 1) ?? -1)) ? k + 1 : k - 1;
    const prevX = v.get(prevK) ?? 0, prevY = prevX - prevK;
    while (x > prevX && y > prevY) out.push({ op: " ", line: a[--x] }), y--;
    if (x === prevX) out.push({ op: "+", line: b[--y] });
    else out.push({ op: "-", line: a[--x] });
  }
  while (x > 0 && y > 0) out.push({ op: " ", line: a[--x] }), y--;
  return out.reverse();
}

const lines = (text) => (text === "" ? [] : String(text).replace(/\n$/, "").split("\n"));

/** The unified diff of `before` and `after` (hunks of changed lines with `context` lines
 * around), or "" when the texts are the same. Large inputs fall back to whole replacement. */
export function unifiedDiff(before, after, context = 3) {
  if (before === after) return "";
  const a = lines(before), b = lines(after);
  const ops = a.length + b.length > 20000
    ? [...a.map((line) => ({ op: "-", line })), ...b.map((line) => ({ op: "+", line }))]
    : script(a, b);
  const out = [];
  let i = 0, oldLine = 1, newLine = 1;
  while (i < ops.length) {
    if (ops[i].op === " ") { i++; oldLine++; newLine++; continue; }
    // A hunk: back up `context` lines, then run on while changes come within 2*context.
    let start = i;
    let back = 0;
    while (back < context && start > 0 && ops[start - 1].op === " ") { start--; back++; }
    let end = i;
    let quiet = 0;
    while (end < ops.length && quiet <= 2 * context) {
      quiet = ops[end].op === " " ? quiet + 1 : 0;
      end++;
    }
    end -= Math.max(0, quiet - context);
    const hunk = ops.slice(start, end);
    const o0 = oldLine - back, n0 = newLine - back;
    const oCount = hunk.filter((x) => x.op !== "+").length, nCount = hunk.filter((x) => x.op !== "-").length;
    out.push(`@@ -${o0},${oCount} +${n0},${nCount} @@`);
    for (const x of hunk) out.push(x.op + x.line);
    for (const x of ops.slice(i, end)) {
      if (x.op !== "+") oldLine++;
      if (x.op !== "-") newLine++;
    }
    i = end;
  }
  return out.join("\n") + "\n";
}
