// Small DOM helpers: build elements without innerHTML, so nothing from the API is ever markup.

/** h("li", {class: "x", title: "y"}, "text", child, [more]) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === "hidden" || k === "disabled" || k === "checked" || k === "selected") el[k] = Boolean(v);
    else if (k === "value") el.value = v;
    else if (k === "style") throw new Error("no inline styles (CSP)");
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const $ = (id) => document.getElementById(id);

/** Moves focus to `el` with the page at its top: the brand and the header in view (on a
 * phone the signed-in header is a quarter of the screen, and scrolling to `el` hid it). */
export function focusAtTop(el) {
  el.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

/** Moves focus to `el` (a heading with tabindex=-1 or a control) and brings it into view. */
export function focusOn(el) {
  if (!el) return;
  el.focus({ preventScroll: true });
  el.scrollIntoView({ block: "nearest" });
}
