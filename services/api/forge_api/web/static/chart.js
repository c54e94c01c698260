// A small line chart in SVG, written for the job page: several series against one x axis (step or
// epoch), points added live, drag to zoom, wheel to zoom around the pointer, keyboard zoom and pan,
// a reset button, a hover readout, and a legend whose checkboxes show or hide series.
import { el, fmtNumber } from "./common.js";

const SVGNS = "http://www.w3.org/2000/svg";
const HEIGHT = 260;
const MARGIN = { l: 58, r: 14, t: 12, b: 34 };
const PALETTE = 8;
let chartCount = 0;

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** First index whose x is >= value. */
function lowerBound(xs, value) {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Round tick positions covering [lo, hi], about ``count`` of them. */
export function ticks(lo, hi, count, integer = false) {
  const span = hi - lo;
  if (!(span > 0) || !isFinite(span)) return [lo];
  const raw = span / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  let step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  if (integer) step = Math.max(1, Math.round(step));
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9 && out.length < 50; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function tickLabel(v) {
  const abs = Math.abs(v);
  if (abs !== 0 && (abs >= 1e5 || abs < 1e-3)) return v.toExponential(1);
  return String(Number(v.toPrecision(6)));
}

export class Chart {
  /**
   * @param {HTMLElement} figure  a <figure> holding a <figcaption>
   * @param {{xLabel: string, visibleByDefault?: (name: string) => boolean}} options
   */
  constructor(figure, { xLabel, visibleByDefault = () => true }) {
    this.figure = figure;
    this.xLabel = xLabel;
    this.visibleByDefault = visibleByDefault;
    this.series = new Map();
    this.zoom = null; // [x0, x1] while zoomed
    this.view = null; // the domain last drawn
    this.drag = null;
    this.pending = false;
    this.id = `chart${++chartCount}`;
    const caption = figure.querySelector("figcaption");
    this.caption = caption ? caption.textContent : "Chart";

    this.reset = el("button", { type: "button", class: "small", disabled: true, onclick: () => this.setZoom(null) }, "Reset zoom");
    this.zoomText = el("span", { class: "muted", text: "Showing everything" });
    this.svg = svg("svg", { role: "img", preserveAspectRatio: "none", "aria-label": `${this.caption}: no data yet` });
    this.plot = el("div", {
      class: "chart-plot", tabindex: "0", role: "group",
      "aria-label": `${this.caption}. Keys: plus and minus zoom, left and right arrows pan, 0 resets.`,
    });
    this.plot.append(this.svg);
    this.readout = el("p", { class: "readout muted" });
    this.legend = el("fieldset", { class: "legend" }, el("legend", { class: "visually-hidden", text: `Series shown in ${this.caption}` }));
    figure.append(el("div", { class: "chart-toolbar" }, this.reset, this.zoomText), this.plot, this.readout, this.legend);
    figure.dataset.points = "0";

    this.svg.addEventListener("pointerdown", (e) => this.onDown(e));
    this.svg.addEventListener("pointermove", (e) => this.onMove(e));
    this.svg.addEventListener("pointerup", (e) => this.onUp(e));
    this.svg.addEventListener("pointercancel", () => { this.drag = null; this.schedule(); });
    this.svg.addEventListener("pointerleave", () => this.hover(null));
    this.svg.addEventListener("dblclick", () => this.setZoom(null));
    this.svg.addEventListener("wheel", (e) => this.onWheel(e), { passive: false });
    this.plot.addEventListener("keydown", (e) => this.onKey(e));
    if (window.ResizeObserver) new ResizeObserver(() => this.schedule()).observe(this.plot);
    this.schedule();
  }

  // ---- data -------------------------------------------------------------------------------------------

  seriesOf(name) {
    let s = this.series.get(name);
    if (s) return s;
    const cls = `s${this.series.size % PALETTE}`;
    const checkbox = el("input", { type: "checkbox", checked: this.visibleByDefault(name), onchange: () => { s.visible = checkbox.checked; this.schedule(); } });
    const value = el("span", { class: "num muted" });
    this.legend.append(el("label", {}, checkbox, el("span", { class: `swatch ${cls}`, "aria-hidden": "true" }), name, " ", value));
    s = { name, cls, xs: [], ys: [], visible: checkbox.checked, checkbox, value };
    this.series.set(name, s);
    if (![...this.series.values()].some((x) => x.visible)) { s.visible = checkbox.checked = true; }
    return s;
  }

  /** Add (or replace) the point at ``x`` of series ``name``. */
  add(name, x, y) {
    if (!Number.isFinite(x) || !Number.isFinite(y)) return;
    const s = this.seriesOf(name);
    const n = s.xs.length;
    if (!n || x > s.xs[n - 1]) {
      s.xs.push(x);
      s.ys.push(y);
    } else {
      const i = lowerBound(s.xs, x);
      if (s.xs[i] === x) s.ys[i] = y;
      else { s.xs.splice(i, 0, x); s.ys.splice(i, 0, y); }
    }
    this.schedule();
  }

  get points() {
    let n = 0;
    for (const s of this.series.values()) n += s.xs.length;
    return n;
  }

  // ---- zoom -------------------------------------------------------------------------------------------

  extent() {
    let lo = Infinity;
    let hi = -Infinity;
    for (const s of this.series.values()) {
      if (!s.visible || !s.xs.length) continue;
      lo = Math.min(lo, s.xs[0]);
      hi = Math.max(hi, s.xs[s.xs.length - 1]);
    }
    return lo <= hi ? [lo, hi] : null;
  }

  setZoom(range) {
    const full = this.extent();
    if (range && full) {
      let [a, b] = range;
      const span = b - a;
      const fullSpan = full[1] - full[0];
      if (span >= fullSpan) range = null;
      else {
        if (a < full[0]) { a = full[0]; b = a + span; }
        if (b > full[1]) { b = full[1]; a = b - span; }
        range = [a, b];
      }
    }
    this.zoom = range;
    this.schedule();
  }

  zoomBy(factor, center) {
    const [x0, x1] = this.view || this.extent() || [0, 1];
    const c = center ?? (x0 + x1) / 2;
    const span = x1 - x0;
    if (factor < 1 && span * factor < 1e-9) return;
    this.setZoom([c - (c - x0) * factor, c + (x1 - c) * factor]);
  }

  // ---- interaction --------------------------------------------------------------------------------------

  localX(event) {
    const rect = this.svg.getBoundingClientRect();
    return ((event.clientX - rect.left) * this.width) / (rect.width || 1);
  }

  invert(px) {
    const [x0, x1] = this.view;
    return x0 + ((px - MARGIN.l) / (this.width - MARGIN.l - MARGIN.r)) * (x1 - x0);
  }

  onDown(event) {
    if (event.button !== 0 || !this.view) return;
    const px = this.localX(event);
    if (px < MARGIN.l || px > this.width - MARGIN.r) return;
    this.drag = { from: px, to: px };
    this.svg.setPointerCapture(event.pointerId);
    event.preventDefault();
  }

  onMove(event) {
    if (!this.view) return;
    const px = Math.max(MARGIN.l, Math.min(this.width - MARGIN.r, this.localX(event)));
    if (this.drag) {
      this.drag.to = px;
      this.drawBrush();
    }
    this.hover(px);
  }

  onUp(event) {
    if (!this.drag) return;
    const { from, to } = this.drag;
    this.drag = null;
    if (this.svg.hasPointerCapture(event.pointerId)) this.svg.releasePointerCapture(event.pointerId);
    if (Math.abs(to - from) > 4) this.setZoom([this.invert(Math.min(from, to)), this.invert(Math.max(from, to))]);
    else this.schedule();
  }

  onWheel(event) {
    if (!this.view) return;
    event.preventDefault();
    const factor = event.deltaY < 0 ? 0.8 : 1.25;
    this.zoomBy(factor, this.invert(this.localX(event)));
  }

  onKey(event) {
    const view = this.view;
    if (!view) return;
    const span = view[1] - view[0];
    const keys = {
      "+": () => this.zoomBy(0.8),
      "=": () => this.zoomBy(0.8),
      "-": () => this.zoomBy(1.25),
      _: () => this.zoomBy(1.25),
      ArrowLeft: () => this.zoom && this.setZoom([view[0] - span * 0.1, view[1] - span * 0.1]),
      ArrowRight: () => this.zoom && this.setZoom([view[0] + span * 0.1, view[1] + span * 0.1]),
      0: () => this.setZoom(null),
      Home: () => this.setZoom(null),
      Escape: () => this.setZoom(null),
    };
    const action = keys[event.key];
    if (!action) return;
    event.preventDefault();
    action();
  }

  hover(px) {
    if (this.cursor) this.cursor.setAttribute("visibility", px === null ? "hidden" : "visible");
    if (px === null || !this.view) {
      this.readout.textContent = "";
      return;
    }
    this.cursor.setAttribute("x1", px);
    this.cursor.setAttribute("x2", px);
    const x = this.invert(px);
    const parts = [];
    let at = null;
    for (const s of this.series.values()) {
      if (!s.visible || !s.xs.length) continue;
      let i = lowerBound(s.xs, x);
      if (i > 0 && (i === s.xs.length || x - s.xs[i - 1] < s.xs[i] - x)) i -= 1;
      at = at ?? s.xs[i];
      parts.push(`${s.name} ${fmtNumber(s.ys[i])}`);
    }
    this.readout.textContent = parts.length ? `${this.xLabel} ${fmtNumber(at)}: ${parts.join(", ")}` : "";
  }

  drawBrush() {
    if (!this.brush || !this.drag) return;
    const a = Math.min(this.drag.from, this.drag.to);
    this.brush.setAttribute("x", a);
    this.brush.setAttribute("width", Math.abs(this.drag.to - this.drag.from));
    this.brush.setAttribute("visibility", "visible");
  }

  // ---- drawing ----------------------------------------------------------------------------------------

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    const W = Math.max(240, Math.round(this.plot.clientWidth || 600));
    const H = HEIGHT;
    this.width = W;
    const pw = W - MARGIN.l - MARGIN.r;
    const ph = H - MARGIN.t - MARGIN.b;
    const root = this.svg;
    root.setAttribute("viewBox", `0 0 ${W} ${H}`);
    root.replaceChildren();
    this.figure.dataset.points = String(this.points);
    this.figure.dataset.series = [...this.series.keys()].join(",");
    for (const s of this.series.values()) s.value.textContent = s.ys.length ? fmtNumber(s.ys[s.ys.length - 1]) : "";

    const full = this.extent();
    this.reset.disabled = !this.zoom;
    if (!full) {
      this.view = null;
      root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "No data yet"));
      root.setAttribute("aria-label", `${this.caption}: no data yet`);
      this.zoomText.textContent = "";
      return;
    }
    let [x0, x1] = this.zoom || full;
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    this.view = [x0, x1];
    this.zoomText.textContent = this.zoom
      ? `Zoomed: ${this.xLabel} ${fmtNumber(x0)} to ${fmtNumber(x1)} of ${fmtNumber(full[0])} to ${fmtNumber(full[1])}`
      : `Showing every ${this.xLabel}`;

    // y range over the visible points in the x range
    let y0 = Infinity;
    let y1 = -Infinity;
    const visible = [...this.series.values()].filter((s) => s.visible && s.xs.length);
    const spans = new Map();
    for (const s of visible) {
      const lo = Math.max(0, lowerBound(s.xs, x0) - 1);
      const hi = Math.min(s.xs.length, lowerBound(s.xs, x1) + 2);
      spans.set(s, [lo, hi]);
      for (let i = lo; i < hi; i++) {
        if (s.xs[i] < x0 || s.xs[i] > x1) continue;
        if (s.ys[i] < y0) y0 = s.ys[i];
        if (s.ys[i] > y1) y1 = s.ys[i];
      }
    }
    if (!(y0 <= y1)) { y0 = 0; y1 = 1; }
    if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 0.5; y1 += Math.abs(y1) * 0.1 || 0.5; }
    const pad = (y1 - y0) * 0.06;
    y0 -= pad;
    y1 += pad;
    const sx = (x) => MARGIN.l + ((x - x0) / (x1 - x0)) * pw;
    const sy = (y) => MARGIN.t + ph - ((y - y0) / (y1 - y0)) * ph;

    // grid and axes
    const axis = svg("g", { class: "axis" });
    const integerX = visible.every((s) => s.xs.every(Number.isInteger));
    for (const t of ticks(y0, y1, 5)) {
      const y = sy(t);
      axis.append(svg("line", { class: "gridline", x1: MARGIN.l, x2: W - MARGIN.r, y1: y, y2: y }));
      axis.append(svg("text", { x: MARGIN.l - 6, y: y + 4, "text-anchor": "end" }, tickLabel(t)));
    }
    for (const t of ticks(x0, x1, Math.max(2, Math.floor(pw / 90)), integerX)) {
      const x = sx(t);
      axis.append(svg("line", { x1: x, x2: x, y1: MARGIN.t + ph, y2: MARGIN.t + ph + 5 }));
      axis.append(svg("text", { x, y: MARGIN.t + ph + 18, "text-anchor": "middle" }, tickLabel(t)));
    }
    axis.append(svg("path", { d: `M${MARGIN.l},${MARGIN.t}V${MARGIN.t + ph}H${W - MARGIN.r}`, fill: "none" }));
    axis.append(svg("text", { x: W - MARGIN.r, y: H - 2, "text-anchor": "end" }, this.xLabel));
    root.append(axis);

    // series, decimated to at most two points per pixel column
    const clipId = `${this.id}-clip`;
    const defs = svg("defs");
    const clip = svg("clipPath", { id: clipId });
    clip.append(svg("rect", { x: MARGIN.l - 4, y: MARGIN.t - 4, width: pw + 8, height: ph + 8 })); // whole dots at the edges
    defs.append(clip);
    root.append(defs);
    const layer = svg("g", { "clip-path": `url(#${clipId})` });
    for (const s of visible) {
      const [lo, hi] = spans.get(s);
      const count = hi - lo;
      let d = "";
      if (count > pw * 2) {
        let col = -1;
        let minY = 0;
        let maxY = 0;
        const flush = () => { if (col >= 0) d += `${d ? "L" : "M"}${col},${sy(minY).toFixed(1)}L${col},${sy(maxY).toFixed(1)}`; };
        for (let i = lo; i < hi; i++) {
          const c = Math.round(sx(s.xs[i]));
          if (c !== col) { flush(); col = c; minY = maxY = s.ys[i]; }
          else { minY = Math.min(minY, s.ys[i]); maxY = Math.max(maxY, s.ys[i]); }
        }
        flush();
      } else {
        for (let i = lo; i < hi; i++) d += `${i === lo ? "M" : "L"}${sx(s.xs[i]).toFixed(1)},${sy(s.ys[i]).toFixed(1)}`;
      }
      layer.append(svg("path", { d, class: `series ${s.cls}` }));
      if (count <= 60) {
        for (let i = lo; i < hi; i++) layer.append(svg("circle", { cx: sx(s.xs[i]).toFixed(1), cy: sy(s.ys[i]).toFixed(1), r: 3, class: `dot ${s.cls}` }));
      }
    }
    root.append(layer);

    this.cursor = svg("line", { class: "cursor", y1: MARGIN.t, y2: MARGIN.t + ph, visibility: "hidden" });
    this.brush = svg("rect", { class: "brush", y: MARGIN.t, height: ph, visibility: "hidden" });
    root.append(this.cursor, this.brush);
    this.drawBrush();

    const latest = visible.map((s) => `${s.name} ${fmtNumber(s.ys[s.ys.length - 1])}`).join(", ");
    root.setAttribute("aria-label", `${this.caption}: ${this.points} points up to ${this.xLabel} ${fmtNumber(full[1])}; latest ${latest}`);
  }
}
