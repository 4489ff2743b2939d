// probe's per-token viewer (reports/viewer/): inlined into one HTML page with its data.
// No network: the data sits in the page (#ptv-meta: JSON; #ptv-blob: zlib-deflated codes in
// base 85), inflated with the browser's DecompressionStream. Token texts reach the page through
// textContent only. Values are the run directory's stored codes, decoded by tokens.json's rules
// (probe/results/token_series.py): what the tooltip shows is what the run holds.
"use strict";
(function () {
  const STEPS = { unit: 254, cent: 100 }, LOG_STEPS = { log: 4093, log8: 253, decay: 4093, decay8: 253,
                                             share: 4093, share8: 253 };
  const SPAN_STEPS = { span: 4093, span8: 253 }, DECAYS = new Set(["decay", "decay8"]);
  const EIGHT = new Set(["unit", "cent", "log8", "span8", "decay8", "share8"]), MAX_TEXT = 2000, ZOOM_TO = 400;
  // The GDN series (hybrids, --gdn) hold values on their linear-attention layers only.
  const MAIN = ["first_token", "gate", "max_abs", "loss", "received", "max_abs_dim",
                "gdn_gate", "gdn_beta", "gdn_decay", "gdn_key0"];
  const LOG_COLOUR = new Set(["max_abs", "gdn_key0"]);
  const STOPS = [[255, 255, 255], [254, 232, 200], [253, 187, 132], [227, 74, 51], [127, 0, 0]];
  const root = document.getElementById("ptv");
  const meta = JSON.parse(document.getElementById("ptv-meta").textContent);
  const runs = meta.runs;
  const state = { series: null, layer: 0, head: -1, a: 0, b: 0, query: "", matches: [], match: -1 };
  const api = { ready: false, state: state, bins: [] };
  window.probeViewer = api;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function unpack(text, n, alphabet) { // base 85 (payload.py): 5 characters per 4 bytes
    const digit = new Uint8Array(128);
    for (let i = 0; i < alphabet.length; i++) digit[alphabet.charCodeAt(i)] = i;
    const raw = new Uint8Array(Math.ceil(n / 4) * 4);
    for (let g = 0, o = 0; o < raw.length; g += 5, o += 4) {
      let v = 0;
      for (let k = 0; k < 5; k++) v = v * 85 + digit[text.charCodeAt(g + k)];
      raw[o] = v >>> 24; raw[o + 1] = (v >>> 16) & 255; raw[o + 2] = (v >>> 8) & 255; raw[o + 3] = v & 255;
    }
    return raw.subarray(0, n);
  }
  async function inflate(text) {
    const raw = unpack(text.trim(), meta.packed, meta.alphabet);
    const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate"));
    return await new Response(stream).arrayBuffer();
  }

  function table(s) {               // code -> value: the stored value, as tokens.json decodes it
    if (s.kind in STEPS) {
      const t = new Float64Array(256);
      for (let c = 0; c < 256; c++) t[c] = c === 255 ? NaN : c / STEPS[s.kind];
      return t;
    }
    const n = EIGHT.has(s.kind) ? 256 : 65536, t = new Float64Array(n);
    if (s.kind in SPAN_STEPS) {      // lo + code (hi - lo) / steps: signed values (SiLU(z))
      for (let c = 0; c < n; c++) t[c] = s.lo + c * ((s.hi - s.lo) / SPAN_STEPS[s.kind]);
    } else {
      const step = (s.hi - s.lo) / LOG_STEPS[s.kind];
      for (let c = 0; c < n; c++) t[c] = s.kind === "index" ? c : (c === 0 ? 0 : Math.exp(s.lo + (c - 1) * step));
      if (DECAYS.has(s.kind)) for (let c = 0; c < n; c++) t[c] = Math.exp(-t[c]);   // codes hold d = -ln(decay)
    }
    t[n - 1] = NaN;
    return t;
  }

  function planes(buf, offset, n) {  // uint16 codes sent as a plane of high bytes, then of low
    const bytes = new Uint8Array(buf, offset, 2 * n), out = new Uint16Array(n);
    for (let i = 0; i < n; i++) out[i] = (bytes[i] << 8) | bytes[n + i];
    return out;
  }
  function prepare(buf) {
    for (const run of runs) {
      run.token = new Uint32Array(buf, run.token.offset, run.token.length);
      run.pos = new Int32Array(buf, run.positions.offset, run.positions.length);
      run.seq = new Int32Array(run.tokens);
      let t = 0;
      for (const [row, n] of run.rows) for (let i = 0; i < n; i++) run.seq[t++] = row;
      run.lower = run.vocab.map((v) => v.toLowerCase());
      for (const s of Object.values(run.series)) {
        s.codes = EIGHT.has(s.kind) ? new Uint8Array(buf, s.offset, s.length) : planes(buf, s.offset, s.length);
        s.table = table(s);
        s.rows = s.shape[0];
        s.heads = s.shape.length === 3 ? s.shape[1] : 0;
        s.n = s.shape[s.shape.length - 1];
        // Per layer row: whether it holds any value (a GDN series has none on softmax layers).
        const none = s.table.length - 1, per = s.codes.length / s.rows;
        s.filled = [];
        for (let r = 0; r < s.rows; r++) {
          let any = false;
          for (let i = r * per; i < (r + 1) * per && !any; i++) any = s.codes[i] !== none;
          s.filled.push(any);
        }
      }
    }
  }

  // -- values ------------------------------------------------------------------------------
  function seriesOf(run, head) {
    const s = run.series[state.series];
    if (head >= 0 && run.series[state.series + "_heads"]) return run.series[state.series + "_heads"];
    return s;
  }
  function value(s, row, head, t) {
    if (!s || row >= s.rows || t >= s.n) return NaN;
    const i = s.heads ? (row * s.heads + Math.max(head, 0)) * s.n + t : row * s.n + t;
    return s.table[s.codes[i]];
  }
  function format(s, v) {
    if (Number.isNaN(v)) return "–";
    if (s.kind === "index") return String(v);
    if (s.kind === "unit") return v.toFixed(4);
    if (s.kind === "cent") return v.toFixed(2);
    if (s.kind === "log8" || s.kind === "decay8" || s.kind === "share8") return v.toPrecision(4);
    if (s.kind === "span8") return v.toPrecision(3);
    if (s.kind === "decay") return v.toPrecision(6);
    return v.toPrecision(5);
  }
  function rowOf(run) {
    const s = run.series[state.series];
    return s ? Math.min(state.layer, s.rows - 1) : 0;
  }

  // -- colour: one scale for every run shown -------------------------------------------------
  let scale = { lo: 0, hi: 1, log: false, index: false, decay: false };
  function makeScale() {
    const name = state.series;
    const kinds = runs.map((r) => r.series[name]).filter(Boolean);
    const index = kinds.some((s) => s.kind === "index");
    if (kinds.every((s) => s.kind in STEPS)) { scale = { lo: 0, hi: 1, log: false, index: false, decay: false }; return; }
    if (kinds.some((s) => s.kind in SPAN_STEPS || DECAYS.has(s.kind))) { spanScale(kinds); return; }
    let lo = Infinity, hi = -Infinity;
    for (const s of kinds) for (const c of new Set(s.codes)) {
      const v = s.table[c];
      if (Number.isFinite(v) && v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    }
    const log = LOG_COLOUR.has(name);
    if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
    scale = { lo: log ? lo : 0, hi: hi, log: log, index: index, decay: false, dims: index ? topDims(kinds) : null };
  }
  // A dimension series (max_abs_dim): the KEY_DIMS dimensions that hold most tokens' largest |h|
  // over every layer and token of the runs shown get a colour each, the rest grey. A hue per
  // dimension made unrelated dimensions look alike (125, 447 and 481 all green); massive
  // activations sit in a few dimensions, which this picks out, the same at every zoom and layer.
  const KEY_DIMS = 8;
  const DIM_COLOURS = [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189],
                       [140, 86, 75], [227, 119, 194], [23, 190, 207]];
  const OTHER_DIM = [205, 205, 205];
  function topDims(kinds) {
    const count = new Map();
    for (const s of kinds) for (const c of s.codes) {
      const v = s.table[c];
      if (!Number.isNaN(v)) count.set(v, (count.get(v) || 0) + 1);
    }
    const seen = [...count.values()].reduce((a, b) => a + b, 0);
    const top = [...count.entries()].sort((x, y) => y[1] - x[1] || x[0] - y[0]).slice(0, KEY_DIMS);
    return { colour: new Map(top.map(([dim], i) => [dim, DIM_COLOURS[i]])), count: new Map(top), seen: seen,
             others: count.size - top.length };
  }
  function spanScale(kinds) {      // signed values: their own min .. max; decays: darker = forgets more
    const decay = kinds.some((s) => DECAYS.has(s.kind));
    let lo = Infinity, hi = -Infinity;
    for (const s of [...kinds, ...runs.map((r) => r.series[state.series + "_heads"]).filter(Boolean)]) {
      if (state.head < 0 && s.heads) continue;
      if (state.head >= 0 && !s.heads && runs.some((r) => r.series[state.series + "_heads"])) continue;
      for (const c of new Set(s.codes)) {
        const v = s.table[c], x = decay ? -Math.log(v) : v;    // a decay's d = -ln(decay) >= 0
        if (Number.isFinite(x) && (!decay || x > 0)) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
      }
    }
    if (!Number.isFinite(lo)) { lo = decay ? 1e-3 : 0; hi = decay ? 1 : 1; }
    scale = { lo: lo, hi: hi, log: false, index: false, decay: decay };
  }
  function unit(v) {
    if (scale.decay) {               // log scale of d = -ln(decay): lo d (decay near 1) white
      const d = -Math.log(v);
      return d <= scale.lo ? 0 : Math.max(0, Math.min(1, Math.log(d / scale.lo) / Math.log(scale.hi / scale.lo || 2)));
    }
    if (scale.log) return v <= 0 ? 0 : Math.max(0, Math.min(1, Math.log(v / scale.lo) / Math.log(scale.hi / scale.lo || 2)));
    return Math.max(0, Math.min(1, (v - scale.lo) / ((scale.hi - scale.lo) || 1)));
  }
  function rgb(v) {
    if (Number.isNaN(v)) return [236, 236, 236];
    if (scale.index) return scale.dims.colour.get(v) || OTHER_DIM;     // a dimension: topDims
    const x = unit(v) * (STOPS.length - 1), i = Math.min(STOPS.length - 2, Math.floor(x)), f = x - i;
    return STOPS[i].map((c, j) => Math.round(c + f * (STOPS[i + 1][j] - c)));
  }

  // -- the page ----------------------------------------------------------------------------------
  const ui = {};
  function build() {
    const bar = el("div", "ptv-bar");
    ui.series = el("select"); ui.layer = el("select"); ui.head = el("select");
    const names = MAIN.filter((n) => runs.some((r) => r.series[n]));
    for (const n of names) {
      const o = el("option", "", n); o.value = n;
      o.title = (runs.find((r) => r.series[n]).series[n].about) || n;
      ui.series.append(o);
    }
    state.series = names[0];
    ui.search = el("input"); ui.search.type = "search"; ui.search.placeholder = "search a token";
    ui.found = el("span", "ptv-found", "");
    ui.next = el("button", "", "next");
    ui.out = el("button", "", "−"); ui.in = el("button", "", "+"); ui.all = el("button", "", "all");
    ui.range = el("span", "ptv-range", "");
    ui.legend = el("canvas", "ptv-legend"); ui.legend.width = 160; ui.legend.height = 12;
    ui.lo = el("span", "ptv-tick", ""); ui.hi = el("span", "ptv-tick", "");
    // The colour bar and its two ends wrap as one (a narrow window must not put "0" on one line
    // and its bar on the next); a dimension series shows a key of its dimensions instead.
    ui.scale = el("span", "ptv-scale"); ui.scale.append(ui.lo, ui.legend, ui.hi);
    ui.key = el("span", "ptv-key");
    for (const [label, control] of [["series", ui.series], ["layer", ui.layer], ["head", ui.head]]) {
      const l = el("label", "", label + " "); l.append(control); bar.append(l);
    }
    bar.append(ui.search, ui.found, ui.next, el("span", "ptv-gap"), ui.out, ui.in, ui.all, ui.range,
               el("span", "ptv-gap"), ui.scale, ui.key);
    root.append(bar);
    ui.panels = runs.map((run, i) => {
      const box = el("div", "ptv-run");
      box.append(el("div", "ptv-name", run.name + " (" + run.tokens + " tokens)"));
      box.append(el("div", "ptv-hint", "map: one row per layer, first at the top (click a row to pick it; " +
        "scroll to zoom, drag to pan); below: the picked layer, each column up to its largest value (a decay: its smallest)"));
      const heat = el("canvas", "ptv-heat"), strip = el("canvas", "ptv-strip");
      heat.dataset.run = strip.dataset.run = i;
      box.append(heat, strip);
      root.append(box);
      return { heat: heat, strip: strip };
    });
    ui.texts = el("div", "ptv-texts");
    ui.texts.style.gridTemplateColumns = "repeat(" + runs.length + ", 1fr)";
    ui.text = runs.map((run, i) => { const t = el("div", "ptv-text"); t.dataset.run = i; ui.texts.append(t); return t; });
    ui.note = el("div", "ptv-note", "");
    root.append(ui.note, ui.texts);
    ui.tip = el("div", "ptv-tip"); ui.tip.hidden = true;
    document.body.append(ui.tip);
    wire();
  }

  function fillSelects() {
    const run = runs.find((r) => r.series[state.series]);
    const s = run.series[state.series];
    ui.layer.replaceChildren();
    const types = run.layer_types || [], hybrid = new Set(types).size > 1;
    for (let r = 0; r < s.rows; r++) {
      const kind = hybrid && s.rows > 1 ? (types[r] === "linear_attention" ? " · GDN" : " · softmax") : "";
      const o = el("option", "", s.rows === 1 ? "all" : "layer " + r + kind); o.value = r;
      o.disabled = !s.filled[r];
      ui.layer.append(o);
    }
    state.layer = Math.min(state.layer, s.rows - 1);
    if (!s.filled[state.layer] && s.filled.includes(true)) state.layer = s.filled.indexOf(true);
    ui.layer.value = state.layer;
    ui.head.replaceChildren();
    const heads = run.series[state.series + "_heads"];
    const mean = el("option", "", heads ? "mean" : "–"); mean.value = -1; ui.head.append(mean);
    if (heads) for (let h = 0; h < heads.heads; h++) { const o = el("option", "", "head " + h); o.value = h; ui.head.append(o); }
    if (!heads) state.head = -1;
    ui.head.value = state.head;
    makeScale();
  }

  // -- drawing -------------------------------------------------------------------------------------
  function bins(width) {                  // pixel column -> [t0, t1) of the view
    const n = state.b - state.a, out = [];
    for (let x = 0; x < width; x++) {
      const t0 = state.a + Math.floor((x * n) / width);
      out.push([t0, Math.max(t0 + 1, state.a + Math.floor(((x + 1) * n) / width))]);
    }
    return out;
  }
  function extremes(s, row, head, t0, t1) { // min and max of a bin, and where the darkest sits
    let lo = NaN, hi = NaN, at = t0, low = t0;
    for (let t = t0; t < t1; t++) {
      const v = value(s, row, head, t);
      if (Number.isNaN(v)) continue;
      if (!(v <= hi)) { hi = v; at = t; }
      if (!(v >= lo)) { lo = v; low = t; }
    }
    return [lo, hi, scale.decay ? low : at];
  }
  function darkest(lo, hi) { return scale.decay ? lo : hi; }  // a decay shades darkest at its smallest
  function drawHeat(i) {
    const run = runs[i], canvas = ui.panels[i].heat, s = seriesOf(run, state.head);
    const width = Math.max(100, canvas.clientWidth || 1000), rows = s ? s.rows : 1;
    const rowHeight = rows > 1 ? 8 : 24;
    canvas.width = width; canvas.height = rows * rowHeight;
    const ctx = canvas.getContext("2d"), image = ctx.createImageData(width, rows * rowHeight);
    const edges = bins(width);
    for (let r = 0; r < rows; r++) {
      for (let x = 0; x < width; x++) {
        const e = extremes(s, r, state.head, edges[x][0], edges[x][1]), c = rgb(darkest(e[0], e[1]));
        for (let y = r * rowHeight; y < (r + 1) * rowHeight - (rows > 1 ? 1 : 0); y++) {
          const k = (y * width + x) * 4;
          image.data[k] = c[0]; image.data[k + 1] = c[1]; image.data[k + 2] = c[2]; image.data[k + 3] = 255;
        }
      }
    }
    ctx.putImageData(image, 0, 0);
    ctx.strokeStyle = "#0b5cad"; ctx.lineWidth = 1;
    ctx.strokeRect(0.5, rowOf(run) * rowHeight + 0.5, width - 1, rowHeight - 1);
    canvas.rowHeight = rowHeight; canvas.edges = edges;
  }
  function drawStrip(i) {
    const run = runs[i], canvas = ui.panels[i].strip, s = seriesOf(run, state.head), row = rowOf(run);
    const width = Math.max(100, canvas.clientWidth || 1000), height = 56;
    canvas.width = width; canvas.height = height;
    const ctx = canvas.getContext("2d"), edges = bins(width), drawn = [];
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, width, height);
    const y = (v) => height - 2 - (scale.index ? 0.5 : unit(v)) * (height - 4);
    for (let x = 0; x < width; x++) {
      const [lo, hi, at] = extremes(s, row, state.head, edges[x][0], edges[x][1]);
      drawn.push({ t0: edges[x][0], t1: edges[x][1], min: lo, max: hi, at: at });
      if (Number.isNaN(hi)) continue;
      // A bar up to the bin's largest value (a decay's smallest), in its colour; the range min ..
      // max darker on it.
      const top = darkest(lo, hi), bottom = darkest(hi, lo);
      ctx.fillStyle = "rgb(" + rgb(top).join(",") + ")";
      ctx.fillRect(x, Math.floor(y(top)), 1, height - Math.floor(y(top)));
      ctx.fillStyle = "rgba(31,35,40,0.55)";
      ctx.fillRect(x, Math.floor(y(top)), 1, Math.max(1, Math.ceil(y(bottom) - y(top)) + 1));
    }
    if (!s) {
      ctx.fillStyle = "#57606a"; ctx.font = "12px system-ui, sans-serif";
      ctx.fillText("this run has no " + state.series + " series", 8, 20);
    }
    for (const t of state.matches) {
      if (t < state.a || t >= state.b) continue;
      ctx.fillStyle = "#0b5cad";
      ctx.fillRect(Math.floor(((t - state.a) * width) / (state.b - state.a)), 0, 1, 4);
    }
    canvas.edges = edges;
    api.bins[i] = drawn;
  }
  function shade(span, run, t) {
    const v = value(seriesOf(run, state.head), rowOf(run), state.head, t), c = rgb(v);
    span.style.backgroundColor = "rgb(" + c.join(",") + ")";
    span.style.color = !scale.index && unit(v) > 0.62 ? "#fff" : "";
  }
  function drawText() {
    const a = state.a, b = Math.min(state.b, state.a + MAX_TEXT), hits = new Set(state.matches);
    ui.note.textContent = state.b - state.a > MAX_TEXT
      ? "The text shows tokens " + a + " to " + (b - 1) + " of the view; zoom in (click the map) to read the rest."
      : "";
    runs.forEach((run, i) => {
      const box = ui.text[i], frag = document.createDocumentFragment();
      let row = -1;
      for (let t = a; t < Math.min(b, run.tokens); t++) {
        if (run.seq[t] !== row) {
          row = run.seq[t];
          frag.append(el("span", "ptv-row", "row " + row));
        }
        const span = el("span", hits.has(t) ? "ptv-tok ptv-hit" : "ptv-tok", run.vocab[run.token[t]]);
        span.dataset.t = t;
        shade(span, run, t);
        frag.append(span);
      }
      box.replaceChildren(frag);
    });
  }
  function keyItem(colour, text) {
    const item = el("span", "ptv-key-item"), swatch = el("span", "ptv-swatch");
    swatch.style.background = "rgb(" + colour.join(",") + ")";
    item.append(swatch, text);
    return item;
  }
  function drawKey() {               // the coloured dimensions, most frequent first (topDims)
    const dims = scale.dims;
    const items = [...dims.colour.entries()].map(([dim, colour]) => {
      const item = keyItem(colour, "dim " + dim);
      item.title = "dimension " + dim + ": the largest |h| of " + dims.count.get(dim) + " of " + dims.seen +
                   " token-layer cells";
      item.dataset.dim = dim;
      return item;
    });
    if (dims.others > 0) items.push(keyItem(OTHER_DIM, dims.others + " other dim" + (dims.others === 1 ? "" : "s")));
    ui.key.replaceChildren(...items);
  }
  function drawLegend() {
    ui.scale.hidden = scale.index; ui.key.hidden = !scale.index;
    if (scale.index) {               // the key depends on the scale only, not on the view
      if (ui.key.drawnFor !== scale) { drawKey(); ui.key.drawnFor = scale; }
      return;
    }
    const ctx = ui.legend.getContext("2d");
    for (let x = 0; x < ui.legend.width; x++) {
      const f = x / (ui.legend.width - 1);
      const v = scale.decay ? Math.exp(-scale.lo * Math.pow(scale.hi / scale.lo, f))
        : scale.log ? scale.lo * Math.pow(scale.hi / scale.lo, f) : scale.lo + f * (scale.hi - scale.lo);
      ctx.fillStyle = "rgb(" + rgb(v).join(",") + ")"; ctx.fillRect(x, 0, 1, ui.legend.height);
    }
    // A decay's legend runs from its largest value (white) to its smallest (darkest).
    const ends = scale.decay ? [Math.exp(-scale.lo), Math.exp(-scale.hi)] : [scale.lo, scale.hi];
    ui.lo.textContent = String(+ends[0].toPrecision(scale.decay ? 4 : 3));
    ui.hi.textContent = String(+ends[1].toPrecision(scale.decay ? 4 : 3));
  }
  function draw() {
    ui.range.textContent = "tokens " + state.a + "–" + (state.b - 1) + " of " + total();
    runs.forEach((run, i) => { drawHeat(i); drawStrip(i); });
    drawText(); drawLegend(); fitFrame();
  }
  // The report and notebooks show this page in an iframe of a fixed height. Where the maps of
  // many layers, or a narrow window's wrapped bar, leave the text no room in it (the text boxes
  // keep their min-height), the frame grows to hold the whole page rather than hide the text
  // below a second scroll. The height needed is where the text boxes, last on the page, end at
  // their min-height: it does not depend on the frame's height, so growing cannot feed back (a
  // measure of the page's overflow flipped by a pixel on each resize, or ratcheted up in a
  // transient layout such as a full-page screenshot's). frameElement is null on a page of its
  // own and in a cross-origin or sandboxed frame: the frame then keeps its height.
  let frameHeight = null;            // the frame's height as its page set it
  function fitFrame() {
    const frame = window.frameElement;
    if (!frame) return;
    const height = parseFloat(getComputedStyle(frame).height);
    if (frameHeight === null) frameHeight = height;
    const need = ui.texts.getBoundingClientRect().top + window.scrollY
      + parseFloat(getComputedStyle(ui.texts).minHeight) + parseFloat(getComputedStyle(document.body).paddingBottom)
      + (height - window.innerHeight);          // the frame's borders, where its height holds them
    const target = Math.max(frameHeight, Math.ceil(need));
    if (target !== height) frame.style.height = target + "px";
  }
  function total() { return Math.max(...runs.map((r) => r.tokens)); }

  // -- view: pan and zoom ----------------------------------------------------------------------
  function setView(a, b) {
    const n = total(), width = Math.max(1, Math.min(n, Math.round(b - a)));
    a = Math.max(0, Math.min(n - width, Math.round(a)));
    state.a = a; state.b = a + width;
    draw();
  }
  function zoom(factor, centre) {
    const n = state.b - state.a, c = centre === undefined ? state.a + n / 2 : centre;
    const m = Math.max(8, n * factor);
    setView(c - ((c - state.a) / n) * m, c - ((c - state.a) / n) * m + m);
  }
  function tokenAt(canvas, event) {
    const x = Math.max(0, Math.min(canvas.edges.length - 1, Math.floor(event.offsetX * canvas.edges.length / canvas.clientWidth)));
    return canvas.edges[x];
  }

  // -- the tooltip: every layer's (and head's) value of one token -------------------------------
  function tip(t, x, y) {
    const tip = ui.tip;
    tip.replaceChildren();
    const run0 = runs.find((r) => t < r.tokens) || runs[0];   // the runs agree on the tokens they share
    tip.append(el("div", "ptv-tip-token", run0.vocab[run0.token[t]]));
    tip.append(el("div", "ptv-tip-where", "token " + t + " · row " + run0.seq[t] + " · position " + run0.pos[t] +
      " · id " + run0.ids[run0.token[t]] + " · " + state.series));
    const grid = el("table", "ptv-tip-table"), head = el("tr");
    head.append(el("th", "", "layer"));
    const columns = [];
    runs.forEach((run, i) => {
      const s = run.series[state.series], h = run.series[state.series + "_heads"];
      if (!s) return;
      columns.push([i, -1, s]);
      head.append(el("th", "", (runs.length > 1 ? run.name + " " : "") + (h ? "mean" : "value")));
      if (h) for (let k = 0; k < h.heads; k++) { columns.push([i, k, h]); head.append(el("th", "", "h" + k)); }
    });
    grid.append(head);
    const rows = Math.max(...columns.map((c) => c[2].rows));
    for (let r = 0; r < rows; r++) {
      if (rows > 1 && !columns.some((c) => c[2].filled[r])) continue;   // e.g. a softmax layer of a GDN series
      const tr = el("tr");
      if (r === state.layer) tr.className = "ptv-current";
      tr.append(el("th", "", rows === 1 ? "–" : String(r)));
      for (const [i, k, s] of columns) {
        const v = t < runs[i].tokens ? value(s, r, k, t) : NaN;
        const td = el("td", "", format(s, v));
        td.dataset.run = i; td.dataset.layer = r; td.dataset.head = k < 0 ? "mean" : k;
        tr.append(td);
      }
      grid.append(tr);
    }
    tip.append(grid);
    tip.hidden = false;
    const w = tip.offsetWidth, h = tip.offsetHeight;
    tip.style.left = Math.max(4, Math.min(window.innerWidth - w - 4, x + 14)) + window.scrollX + "px";
    tip.style.top = (y + h + 20 < window.innerHeight ? y + 16 : Math.max(4, y - h - 10)) + window.scrollY + "px";
  }

  // -- search ----------------------------------------------------------------------------------------
  function search(query) {
    state.query = query.toLowerCase(); state.matches = []; state.match = -1;
    if (state.query) {
      const run = runs[0], hit = run.lower.map((v) => v.includes(state.query));
      for (let t = 0; t < run.tokens; t++) if (hit[run.token[t]]) state.matches.push(t);
    }
    ui.found.textContent = state.query ? state.matches.length + " found" : "";
    draw();
  }
  function nextMatch() {
    if (!state.matches.length) return;
    state.match = (state.match + 1) % state.matches.length;
    const t = state.matches[state.match];
    setView(t - ZOOM_TO / 2, t + ZOOM_TO / 2);
    const span = ui.text[0].querySelector('[data-t="' + t + '"]');
    if (span) span.scrollIntoView({ block: "center" });
  }

  function wire() {
    ui.series.onchange = () => { state.series = ui.series.value; fillSelects(); draw(); };
    ui.layer.onchange = () => { state.layer = +ui.layer.value; draw(); };
    ui.head.onchange = () => { state.head = +ui.head.value; makeScale(); draw(); };
    ui.search.oninput = () => search(ui.search.value);
    ui.search.onkeydown = (e) => { if (e.key === "Enter") nextMatch(); };
    ui.next.onclick = nextMatch;
    ui.in.onclick = () => zoom(0.5); ui.out.onclick = () => zoom(2); ui.all.onclick = () => setView(0, total());
    for (const panel of ui.panels) for (const canvas of [panel.heat, panel.strip]) {
      canvas.addEventListener("wheel", (e) => {
        e.preventDefault();
        zoom(e.deltaY > 0 ? 1.25 : 0.8, tokenAt(canvas, e)[0]);
      }, { passive: false });
      let drag = null;
      canvas.onmousedown = (e) => { drag = { x: e.clientX, a: state.a, moved: false }; };
      window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
      canvas.onmousemove = (e) => {
        if (drag && e.buttons) {
          const dx = e.clientX - drag.x;
          if (Math.abs(dx) > 2) drag.moved = true;
          if (drag.moved) setView(drag.a - (dx * (state.b - state.a)) / canvas.clientWidth, drag.a - (dx * (state.b - state.a)) / canvas.clientWidth + state.b - state.a);
          return;
        }
        const [t0, t1] = tokenAt(canvas, e), run = runs[+canvas.dataset.run];
        const row = canvas === panel.heat ? Math.min(Math.floor(e.offsetY / canvas.rowHeight), seriesOf(run, state.head).rows - 1) : rowOf(run);
        tip(extremes(seriesOf(run, state.head), row, state.head, t0, t1)[2], e.clientX, e.clientY);
      };
      canvas.onmouseleave = () => { ui.tip.hidden = true; };
      canvas.onclick = (e) => {
        if (drag && drag.moved) return;
        const [t0] = tokenAt(canvas, e);
        if (canvas === panel.heat && canvas.rowHeight) {
          state.layer = Math.min(Math.floor(e.offsetY / canvas.rowHeight), seriesOf(runs[+canvas.dataset.run], state.head).rows - 1);
          ui.layer.value = state.layer;
        }
        if (state.b - state.a > ZOOM_TO) setView(t0 - ZOOM_TO / 2, t0 + ZOOM_TO / 2); else draw();
      };
    }
    ui.texts.addEventListener("mouseover", (e) => {
      const t = e.target.dataset && e.target.dataset.t;
      if (t !== undefined) tip(+t, e.clientX, e.clientY);
    });
    ui.texts.addEventListener("mouseleave", () => { ui.tip.hidden = true; });
    window.addEventListener("resize", () => draw());
  }

  api.setView = setView;
  api.select = (series, layer, head) => {
    state.series = series; ui.series.value = series; fillSelects();
    state.layer = layer; ui.layer.value = layer;
    state.head = head === undefined ? -1 : head; ui.head.value = state.head;
    makeScale(); draw();
  };
  api.value = (run, series, layer, head, t) => value(runs[run].series[series], layer, head, t);
  api.search = (q) => { ui.search.value = q; search(q); return state.matches.length; };
  api.scale = () => scale;

  inflate(document.getElementById("ptv-blob").textContent).then((buf) => {
    prepare(buf);
    build();
    fillSelects();
    setView(0, total());
    api.ready = true;
    api.readyAt = performance.now();
    document.body.dataset.ready = "1";
  }).catch((err) => {
    root.textContent = "The viewer could not read its data: " + err;
    console.error(err);
  });
})();
