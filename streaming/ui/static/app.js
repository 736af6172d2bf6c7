// aiodstream's web UI: reads /api/v1 and draws Spark's Streaming and Structured Streaming views as SVG.
// No library, no build step: one script served by the package. Routes live in the URL's hash:
//   #/                          the contexts
//   #/streaming/<name>          a context's batches, delays, receivers (Spark's Streaming tab)
//   #/batch/<name>/<batchId>    one batch and its output operations
//   #/query/<name>              a query's progress (Spark's Structured Streaming tab)
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const state = { config: null, contexts: {}, timer: null, route: null };
const PHASES = ["triggerExecution", "latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets"];
const COLORS = ["#1f6fb2", "#e07b39", "#2e7d32", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d"];

// -- helpers --

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = v; else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const c of children.flat(Infinity)) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const enc = encodeURIComponent;
// A context's name as one segment of an API path. A browser takes "." and ".." as dot segments even
// percent-encoded (%2E%2E) and drops them, so their dots go encoded twice; the server reads those back.
function ctx(name) { return name === "." || name === ".." ? name.replace(/\./g, "%252E") : enc(name); }
async function api(path) {
  const response = await fetch("api/v1/" + path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status} ${await response.text()}`);
  return response.json();
}

// Each unit is chosen after rounding to what it shows, so a value never reads "60 s", "60 min" or "1000 ms".
function fmtMs(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 9.95 && !Number.isInteger(ms)) return `${ms.toFixed(1)} ms`;
  if (ms < 999.5) return `${Math.round(ms)} ms`;
  if (ms < 9995) return `${(ms / 1000).toFixed(2)} s`;
  if (ms < 59950) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  const m = Math.round(ms / 60000);
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
function fmtNum(n, digits = 2) {
  if (n === null || n === undefined || Number.isNaN(n)) return "-";
  return Number.isInteger(n) ? n.toLocaleString("en-US") : n.toLocaleString("en-US", { maximumFractionDigits: digits });
}
function pad(n, w = 2) { return String(n).padStart(w, "0"); }
// Times are shown in UTC, and labelled so where they appear (Spark's UI shows the driver's zone, which a browser does
// not know; the console's pprint headers and foreachRDD's times are the driver's local time, as pyspark's).
function fmtTime(ms) {
  if (ms === null || ms === undefined) return "-";
  const d = new Date(ms);
  return `${d.getUTCFullYear()}/${pad(d.getUTCMonth() + 1)}/${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.${pad(d.getUTCMilliseconds(), 3)}`;
}
function fmtClock(ms) { const d = new Date(ms); return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`; }

// -- charts --

// A timeline: one polyline and one dot per point per series; each dot carries its data (data-x, data-y).
function timeline(series, { name, unit = "", width = 520, height = 160 } = {}) {
  const m = { l: 52, r: 10, t: 10, b: 22 };
  const all = series.flatMap((s) => s.points);
  const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
  const xmin = xs.length ? Math.min(...xs) : 0, xmax = xs.length ? Math.max(...xs) : 1;
  const ymaxData = ys.length ? Math.max(...ys) : 0;
  const ymax = ymaxData > 0 ? ymaxData * 1.1 : 1;
  const w = width - m.l - m.r, h = height - m.t - m.b;
  const sx = (x) => m.l + (xmax === xmin ? w / 2 : ((x - xmin) / (xmax - xmin)) * w);
  const sy = (y) => m.t + h * (1 - y / ymax);
  const root = svg("svg", { class: "chart timeline", "data-chart": name, width, height, viewBox: `0 0 ${width} ${height}`,
    "data-ymax": ymax, "data-plot-top": m.t, "data-plot-height": h, role: "img", "aria-label": `${name} over time` });
  for (const f of [0, 0.5, 1]) {
    const y = m.t + h * (1 - f);
    root.append(svg("line", { class: "grid", x1: m.l, x2: m.l + w, y1: y, y2: y }));
    root.append(svg("text", { x: m.l - 4, y: y + 3, "text-anchor": "end" }, fmtTick(ymax * f, unit)));
  }
  root.append(svg("line", { class: "axis", x1: m.l, x2: m.l, y1: m.t, y2: m.t + h }));
  root.append(svg("line", { class: "axis", x1: m.l, x2: m.l + w, y1: m.t + h, y2: m.t + h }));
  if (xs.length) {
    root.append(svg("text", { x: m.l, y: height - 6 }, fmtClock(xmin)));
    root.append(svg("text", { x: m.l + w, y: height - 6, "text-anchor": "end" }, fmtClock(xmax)));
  } else {
    root.append(svg("text", { x: m.l + w / 2, y: m.t + h / 2, "text-anchor": "middle" }, "no data yet"));
  }
  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    if (s.points.length > 1) {  // drawn by time: with concurrent jobs a batch may complete before an older one
      const byTime = [...s.points].sort((a, b) => a[0] - b[0]);
      root.append(svg("polyline", { class: "line", stroke: color, points: byTime.map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ") }));
    }
    const g = svg("g", { class: "series", "data-series": s.name || name });
    for (const [x, y] of s.points) {
      g.append(svg("circle", { class: "pt", r: s.points.length > 200 ? 1.5 : 2.5, fill: color, cx: sx(x).toFixed(2), cy: sy(y).toFixed(2),
        "data-x": x, "data-y": y }, svg("title", {}, `${fmtTime(x)}: ${fmtAxis(y, unit)}`)));
    }
    root.append(g);
  });
  return root;
}

function fmtCompact(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(0)}k`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return fmtNum(v, v < 10 ? 2 : 0);
}

// Axis labels: short (the unit is in the row's title).
function fmtTick(v, unit) {
  if (unit === "ms") return fmtMs(v);
  if (unit === "bytes") return fmtAxis(v, unit);
  return fmtCompact(v);
}

// Spark's "Global Watermark Gap" of a progress report: how far the batch's timestamp (its trigger's start) is ahead of
// the global watermark, in ms; none before the watermark has moved (Spark charts only a watermark above 0).
function watermarkGapMs(q) {
  const watermark = q.eventTime && q.eventTime.watermark ? Date.parse(q.eventTime.watermark) : 0;
  return watermark > 0 ? Date.parse(q.timestamp) - watermark : null;
}

function fmtAxis(v, unit) {
  if (unit === "ms") return fmtMs(v);
  if (unit === "bytes") return v >= 1048576 ? `${(v / 1048576).toFixed(1)} MiB` : v >= 1024 ? `${(v / 1024).toFixed(1)} KiB` : `${Math.round(v)} B`;
  return `${fmtNum(v, v < 10 ? 2 : 0)}${unit ? " " + unit : ""}`;
}

// A histogram of the same values: 10 equal bins from 0 to the largest value; each bar carries its bin and count.
function histogram(values, { name, unit = "", width = 260, height = 160, bins = 10 } = {}) {
  const m = { l: 34, r: 10, t: 10, b: 22 };
  const top = values.length ? Math.max(...values) : 0;
  const span = top > 0 ? top : 1;
  const counts = new Array(bins).fill(0);
  for (const v of values) counts[Math.min(bins - 1, Math.floor((v / span) * bins))] += 1;
  const cmax = Math.max(1, ...counts);
  const w = width - m.l - m.r, h = height - m.t - m.b, bw = w / bins;
  const root = svg("svg", { class: "chart histogram", "data-chart": name, width, height, viewBox: `0 0 ${width} ${height}`,
    "data-total": values.length, role: "img", "aria-label": `${name} histogram` });
  root.append(svg("line", { class: "axis", x1: m.l, x2: m.l + w, y1: m.t + h, y2: m.t + h }));
  root.append(svg("text", { x: m.l - 4, y: m.t + 8, "text-anchor": "end" }, String(cmax)));
  root.append(svg("text", { x: m.l - 4, y: m.t + h, "text-anchor": "end" }, "0"));
  root.append(svg("text", { x: m.l, y: height - 6 }, fmtTick(0, unit)));
  root.append(svg("text", { x: m.l + w, y: height - 6, "text-anchor": "end" }, fmtTick(span, unit)));
  counts.forEach((c, i) => {
    const bh = (c / cmax) * h;
    const lo = (span * i) / bins, hi = (span * (i + 1)) / bins;
    root.append(svg("rect", { class: "bar", x: (m.l + i * bw + 1).toFixed(1), y: (m.t + h - bh).toFixed(1), width: Math.max(0, bw - 2).toFixed(1),
      height: bh.toFixed(1), "data-lo": lo, "data-hi": hi, "data-count": c }, svg("title", {}, `${fmtAxis(lo, unit)} – ${fmtAxis(hi, unit)}: ${c}`)));
  });
  return root;
}

function legend(names) {
  return el("div", { class: "legend" }, names.map((n, i) => el("span", {}, el("i", { style: `background:${COLORS[i % COLORS.length]}` }), n)));
}

// -- data --

// What the page knows of one context: completed batches by seq (bounded), the active ones, its progress.
function ctxState(name) {
  if (!state.contexts[name]) state.contexts[name] = { seq: 0, batches: [], active: [], stats: null, receivers: [], progress: [], progressSeq: 0 };
  return state.contexts[name];
}

async function refreshContext(name, { withProgress = false } = {}) {
  const c = ctxState(name);
  const base = `contexts/${ctx(name)}`;
  const [stats, batches, receivers] = await Promise.all([
    api(`${base}/streaming/statistics`), api(`${base}/streaming/batches?since=${c.seq}`), api(`${base}/streaming/receivers`)]);
  c.stats = stats;
  c.receivers = receivers;
  c.active = batches.filter((b) => b.status !== "COMPLETED");
  const fresh = batches.filter((b) => b.status === "COMPLETED").sort((a, b) => a.seq - b.seq);  // in completion order
  if (fresh.length) {
    c.batches.push(...fresh);
    c.seq = fresh[fresh.length - 1].seq;
    const keep = stats.numRetainedCompletedBatches;
    if (c.batches.length > keep) c.batches.splice(0, c.batches.length - keep);
  }
  if (withProgress) {
    const fresh = await api(`${base}/progress?since=${c.progressSeq}`);
    if (fresh.length) {
      c.progress.push(...fresh);
      c.progressSeq = fresh[fresh.length - 1].seq;
      const keep = state.config.retainedBatches;
      if (c.progress.length > keep) c.progress.splice(0, c.progress.length - keep);
    }
  }
  return c;
}

// -- pages --

function link(href, text, attrs = {}) { return el("a", { href, ...attrs }, text); }

// A failure: its headline, and the rest (the traceback when the UI shows them) on a click when there is more.
function failure(summary, full) {
  if (!full || full.trim() === summary.trim()) return el("span", { class: "error-summary" }, summary);
  return el("details", {}, el("summary", {}, summary), el("pre", { class: "error" }, full));
}

function navFor(name, stats, current) {
  const nav = document.getElementById("nav");
  nav.replaceChildren(link("#/", "Contexts", { class: current === "home" ? "current" : null }));
  if (!name) return;
  nav.append(link(`#/streaming/${enc(name)}`, "Streaming", { class: current === "streaming" ? "current" : null }));
  if (stats && (stats.progressReports > 0 || stats.queryId)) nav.append(link(`#/query/${enc(name)}`, "Structured Streaming", { class: current === "query" ? "current" : null }));
  if (state.config && state.config.metrics) nav.append(link("metrics/", "Metrics"));
}

function stateBadge(s) {
  if (s.kind === "trace") return el("span", { class: "badge" }, "trace");
  if (s.exception) return el("span", { class: "badge bad" }, "failed");
  if (s.terminated) return el("span", { class: "badge" }, "stopped");
  return el("span", { class: "badge ok" }, s.startTime ? "running" : "not started");
}

async function homePage() {
  const contexts = await api("contexts");
  if (contexts.length === 1 && state.route.firstLoad) { location.replace(`#/streaming/${enc(contexts[0].name)}`); return null; }
  navFor(null, null, "home");
  const rows = contexts.map((s) => el("tr", { "data-context": s.name },
    el("td", {}, link(`#/streaming/${enc(s.name)}`, s.name)), el("td", {}, s.kind), el("td", {}, stateBadge(s)),
    el("td", { class: "num" }, s.batchDuration === null ? "-" : fmtMs(s.batchDuration)),
    el("td", { class: "num" }, fmtNum(s.numTotalCompletedBatches)), el("td", { class: "num" }, fmtNum(s.numFailedBatches)),
    el("td", { class: "num" }, fmtNum(s.numProcessedRecords)),
    el("td", { class: "num" }, fmtMs(s.avgSchedulingDelay)), el("td", { class: "num" }, fmtMs(s.avgProcessingTime)),
    el("td", { class: "num" }, fmtMs(s.avgTotalDelay))));
  return [el("h1", {}, "Streaming contexts"),
    contexts.length ? el("table", { id: "contexts" }, el("thead", {}, el("tr", {}, ["Name", "Kind", "State", "Interval", "Batches", "Failed", "Records",
      "Avg scheduling delay", "Avg processing time", "Avg total delay"].map((h) => el("th", {}, h)))), el("tbody", {}, rows))
      : el("p", { class: "muted" }, "Nothing is attached yet: StreamingUI.attach(ssc), or StreamingContext(..., uiPort=...).")];
}

function statRow(title, avgText, chartName, points, unit, extra) {
  const values = points.map((p) => p[1]);
  return el("tr", { "data-metric": chartName },
    el("td", { class: "metric" }, el("div", {}, title), el("div", { class: "value" }, avgText), extra ? el("div", { class: "muted" }, extra) : ""),
    el("td", {}, timeline([{ name: chartName, points }], { name: chartName, unit })),
    el("td", {}, histogram(values, { name: chartName, unit })));
}

function batchesTable(id, batches, name, { active = false } = {}) {
  const head = ["Batch Time (UTC)", "Records", "Scheduling Delay", "Processing Time"].concat(active ? ["Status"] : ["Total Delay"]).concat(["Output Ops: Succeeded/Total"]);
  const rows = batches.map((b) => el("tr", { "data-batch-id": b.batchId, class: b.numFailedOutputOps ? "failed" : null },
    el("td", {}, link(`#/batch/${enc(name)}/${b.batchId}`, fmtTime(b.batchId))),
    el("td", { class: "num" }, fmtNum(b.inputSize)),
    el("td", { class: "num", "data-field": "schedulingDelay" }, fmtMs(b.schedulingDelay)),
    el("td", { class: "num", "data-field": "processingTime" }, fmtMs(b.processingTime)),
    active ? el("td", {}, b.status.toLowerCase()) : el("td", { class: "num", "data-field": "totalDelay" }, fmtMs(b.totalDelay)),
    el("td", {}, `${b.numCompletedOutputOps}/${b.numTotalOutputOps}`, b.numFailedOutputOps ? el("span", { class: "badge bad" }, ` ${b.numFailedOutputOps} failed`) : "",
      b.firstFailureReason ? el("div", { class: "muted" }, b.firstFailureReason) : "")));
  return el("table", { id }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

async function streamingPage(name) {
  const c = await refreshContext(name);
  const s = c.stats;
  navFor(name, s, "streaming");
  const done = c.batches;
  const interval = s.batchDuration;
  const pts = (f) => done.filter((b) => f(b) !== null && f(b) !== undefined).map((b) => [b.batchId, f(b)]);
  const since = s.startTimeMs !== null && done.length ? Math.max(...done.map((b) => b.batchId)) - s.startTimeMs : null;
  const out = [
    el("h1", {}, `Streaming Statistics: ${name} `, stateBadge(s)),
    el("p", { class: "summary", id: "summary" }, interval ? `${s.kind === "trace" ? "Recorded" : "Running"} batches of ${fmtMs(interval)}` : "Batches",
      since !== null ? ` for ${fmtMs(since)} since ${fmtTime(s.startTimeMs)} UTC` : "",
      ` (${fmtNum(s.numTotalCompletedBatches)} completed batches, ${fmtNum(s.numProcessedRecords)} records)`,
      s.numFailedBatches ? el("span", { class: "badge bad" }, ` ${s.numFailedBatches} failed`) : ""),
  ];
  if (s.exception) out.push(el("div", { class: "query-failure" }, "The query failed: ", failure(s.exceptionHeadline, s.exception)));
  const inputs = Object.keys(done.reduce((acc, b) => Object.assign(acc, b.inputs), {}));
  const ratePoints = interval ? done.map((b) => [b.batchId, (b.inputSize * 1000) / interval]) : [];
  out.push(el("table", { class: "stats", id: "statistics" }, el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "Timelines"), el("th", {}, "Histograms"))),
    el("tbody", {},
      statRow("Input Rate", s.avgInputRate === null ? "-" : `${fmtNum(s.avgInputRate)} records/s`, "inputRate", ratePoints, "",
        inputs.length ? `from ${inputs.map((i) => s.inputNames[i] || "input " + i).join(", ")}` : null),
      statRow("Scheduling Delay", `avg ${fmtMs(s.avgSchedulingDelay)}`, "schedulingDelay", pts((b) => b.schedulingDelay), "ms"),
      statRow("Processing Time", `avg ${fmtMs(s.avgProcessingTime)}`, "processingTime", pts((b) => b.processingTime), "ms"),
      statRow("Total Delay", `avg ${fmtMs(s.avgTotalDelay)}`, "totalDelay", pts((b) => b.totalDelay), "ms"))));
  if (c.receivers.length) {
    out.push(el("h2", {}, `Receivers (${s.numActiveReceivers} active, ${s.numInactiveReceivers} inactive)`));
    out.push(el("table", { id: "receivers" }, el("thead", {}, el("tr", {}, ["Receiver", "Status", "Location", "Executor", "Avg Events/s", "Event Rate", "Last Error"].map((h) => el("th", {}, h)))),
      el("tbody", {}, c.receivers.map((r) => el("tr", { "data-stream-id": r.streamId },
        el("td", {}, r.streamName), el("td", {}, r.isActive ? el("span", { class: "badge ok" }, "active") : el("span", { class: "badge" }, "inactive")),
        el("td", {}, r.executorHost || "-"), el("td", {}, r.executorId || "-"), el("td", { class: "num" }, fmtNum(r.avgEventRate)),
        el("td", {}, timeline([{ name: `receiver-${r.streamId}`, points: r.eventRates }], { name: `receiverRate-${r.streamId}`, width: 260, height: 70 })),
        el("td", {}, r.lastErrorMessage ? failure(`${r.lastErrorTime}: ${r.lastErrorMessage}`, r.lastError) : "-"))))));
  }
  out.push(el("h2", {}, `Active Batches (${c.active.length})`));
  out.push(batchesTable("active-batches", c.active, name, { active: true }));
  const shown = done.slice(-100).sort((a, b) => b.batchId - a.batchId);  // newest batch time first, as Spark's table
  out.push(el("h2", {}, `Completed Batches (last ${shown.length} out of ${fmtNum(s.numTotalCompletedBatches)})`));
  out.push(batchesTable("completed-batches", shown, name));
  return out;
}

async function batchPage(name, batchId) {
  const base = `contexts/${ctx(name)}/streaming/batches/${enc(batchId)}`;
  const [stats, b, ops] = await Promise.all([api(`contexts/${ctx(name)}/streaming/statistics`), api(base), api(`${base}/operations`)]);
  navFor(name, stats, "batch");
  const facts = [["Batch Duration", fmtMs(stats.batchDuration)], ["Status", b.status.toLowerCase()], ["Input data size", `${fmtNum(b.inputSize)} records`],
    ["Scheduling delay", fmtMs(b.schedulingDelay)], ["Processing time", fmtMs(b.processingTime)], ["Total delay", fmtMs(b.totalDelay)]];
  const jobLinks = (ids) => (ids === null || ids === undefined) ? el("span", { class: "muted" }, stats.sparkUi ? "-" : "no Spark UI")
    : ids.length ? ids.map((id, i) => [i ? ", " : "", stats.sparkUi ? link(`${stats.sparkUi}/jobs/job/?id=${id}`, String(id), { class: "spark-job" }) : String(id)]) : "none";
  return [
    el("h1", {}, `Details of batch at ${fmtTime(b.batchId)} UTC`),
    el("dl", { class: "facts", id: "batch-facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("h2", {}, "Output Operations"),
    el("table", { id: "operations" }, el("thead", {}, el("tr", {}, ["Output Op Id", "Description", "Duration", "Status", "Spark Jobs", "Error"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ops.map((op) => el("tr", { "data-op-id": op.outputOpId, class: op.failureReason ? "failed" : null },
        el("td", { class: "num" }, op.outputOpId), el("td", {}, op.name, op.description && op.description !== op.name ? el("div", { class: "muted" }, op.description) : ""),
        el("td", { class: "num", "data-field": "duration" }, fmtMs(op.duration)),
        el("td", {}, op.failureReason ? el("span", { class: "badge bad" }, "failed") : op.endTimeMs !== null ? el("span", { class: "badge ok" }, "succeeded") : "running"),
        el("td", {}, jobLinks(op.jobIds)),
        el("td", {}, op.failureReason ? failure(op.failureHeadline, op.failureReason) : "-"))))),
    el("p", {}, link(`#/streaming/${enc(name)}`, "← all batches")),
  ];
}

async function queryPage(name) {
  const c = await refreshContext(name, { withProgress: true });
  const s = c.stats;
  navFor(name, s, "query");
  const p = c.progress;
  const at = (q) => Date.parse(q.timestamp);
  const series = (f) => p.filter((q) => f(q) !== null && f(q) !== undefined).map((q) => [at(q), f(q)]);
  const sumState = (q, key) => (q.stateOperators && q.stateOperators.length) ? q.stateOperators.reduce((a, op) => a + (op[key] || 0), 0) : null;
  const last = p.length ? p[p.length - 1] : null;
  const phases = PHASES.filter((ph) => p.some((q) => q.durationMs && q.durationMs[ph] !== undefined));
  const out = [
    el("h1", {}, `Streaming Query Statistics: ${name} `, stateBadge(s)),
    el("dl", { class: "facts", id: "query-facts" },
      el("dt", {}, "Id"), el("dd", {}, s.queryId || "-"), el("dt", {}, "Run id"), el("dd", {}, s.runId || "-"),
      el("dt", {}, "Progress reports"), el("dd", {}, fmtNum(s.progressReports)),
      el("dt", {}, "Latest batch"), el("dd", {}, last ? `${last.batchId} at ${last.timestamp}` : "-"),
      el("dt", {}, "Global watermark"), el("dd", {}, last && last.eventTime && last.eventTime.watermark ? last.eventTime.watermark : "-")),
  ];
  if (s.exception) out.push(el("div", { class: "query-failure" }, "The query failed: ", failure(s.exceptionHeadline, s.exception)));
  const rows = [
    ["Input Rate", "inputRowsPerSecond", series((q) => q.inputRowsPerSecond), "rows/s"],
    ["Process Rate", "processedRowsPerSecond", series((q) => q.processedRowsPerSecond), "rows/s"],
    ["Input Rows", "numInputRows", series((q) => q.numInputRows), "rows"],
    ["Batch Duration", "batchDuration", series((q) => q.batchDuration), "ms"],
  ];
  const watermarkGap = series(watermarkGapMs);
  if (watermarkGap.length) rows.push(["Global Watermark Gap", "watermarkGap", watermarkGap, "ms"]);
  if (p.some((q) => q.stateOperators && q.stateOperators.length)) {
    rows.push(["Aggregated Number Of Total State Rows", "numRowsTotal", series((q) => sumState(q, "numRowsTotal")), "rows"]);
    rows.push(["Aggregated Number Of Updated State Rows", "numRowsUpdated", series((q) => sumState(q, "numRowsUpdated")), "rows"]);
    rows.push(["Aggregated State Memory Used In Bytes", "memoryUsedBytes", series((q) => sumState(q, "memoryUsedBytes")), "bytes"]);
    rows.push(["Aggregated Number Of Rows Dropped By Watermark", "numRowsDroppedByWatermark", series((q) => sumState(q, "numRowsDroppedByWatermark")), "rows"]);
  }
  const tbody = el("tbody", {}, rows.map(([title, key, points, unit]) => {
    const avg = points.length ? points.reduce((a, x) => a + x[1], 0) / points.length : null;
    return statRow(title, avg === null ? "-" : `avg ${fmtAxis(avg, unit)}`, key, points, unit);
  }));
  if (phases.length) {
    tbody.append(el("tr", { "data-metric": "operationDuration" }, el("td", { class: "metric" }, el("div", {}, "Operation Duration")),
      el("td", { colspan: 2 }, legend(phases), timeline(phases.map((ph) => ({ name: ph, points: series((q) => q.durationMs ? q.durationMs[ph] ?? null : null) })),
        { name: "operationDuration", unit: "ms", width: 780 }))));
  }
  out.push(el("table", { class: "stats", id: "query-statistics" }, el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "Timelines"), el("th", {}, "Histograms"))), tbody));
  const recent = p.slice(-50).reverse();
  out.push(el("h2", {}, `Recent Progress (last ${recent.length} of ${fmtNum(s.progressReports)})`));
  out.push(el("table", { id: "progress" }, el("thead", {}, el("tr", {}, ["Batch", "Timestamp", "Input Rows", "Input Rate", "Process Rate", "Batch Duration", "Sink"].map((h) => el("th", {}, h)))),
    el("tbody", {}, recent.map((q) => el("tr", { "data-batch": q.batchId },
      el("td", { class: "num" }, q.batchId), el("td", {}, q.timestamp), el("td", { class: "num" }, fmtNum(q.numInputRows)),
      el("td", { class: "num" }, fmtNum(q.inputRowsPerSecond)), el("td", { class: "num" }, fmtNum(q.processedRowsPerSecond)),
      el("td", { class: "num" }, fmtMs(q.batchDuration)), el("td", {}, q.sink ? q.sink.description : "-"))))));
  return out;
}

// -- routing and live refresh --

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  return { page: parts[0] || "home", args: parts.slice(1) };
}

async function render() {
  clearTimeout(state.timer);
  const route = state.route;
  const status = document.getElementById("status");
  let live = false;
  try {
    if (!state.config) state.config = await api("config");
    let content;
    if (route.page === "streaming") content = await streamingPage(route.args[0]);
    else if (route.page === "batch") content = await batchPage(route.args[0], route.args[1]);
    else if (route.page === "query") content = await queryPage(route.args[0]);
    else content = await homePage();
    if (content === null) return;
    if (route !== state.route) return;  // navigated meanwhile
    document.getElementById("app").replaceChildren(...content);
    const stats = route.args[0] ? state.contexts[route.args[0]]?.stats : null;
    live = route.page === "home" || !stats || (stats.live && !stats.terminated);
    status.textContent = live ? `live · updated ${new Date().toLocaleTimeString()}` : "not live: a recorded run or a stopped context";
    document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
  } catch (err) {
    status.textContent = `could not update: ${err.message}`;
    live = true;
  }
  route.firstLoad = false;
  if (live && route.page !== "batch") state.timer = setTimeout(render, state.config ? state.config.refreshMs : 1000);
}

window.addEventListener("hashchange", () => { state.route = { ...parseRoute(), firstLoad: false }; render(); });
state.route = { ...parseRoute(), firstLoad: true };
render();
