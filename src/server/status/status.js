// The status page: polls /api/status, keeps the polled values in memory, and
// draws per surface the models side by side on the chosen metric, K, window
// and scope over time, with 95% bands where the report carries standard
// errors; then the pipeline's health and the settings in force.
"use strict";

const POLL_MS = 2000;
const HISTORY = 900; // polls kept: the server's history (360 samples of the last hour) and 18 minutes of polls every 2 s
const Z95 = 1.959963984540054;
const SINCE_START = "since start";
// Model colours avoid red, which marks what is worse than the control.
const COLORS = ["#1f6fd1", "#e08a00", "#2e9b4b", "#8a4fc7", "#0f8f8f", "#6b4f2a", "#c2387f", "#5b6573"];
const SVG = "http://www.w3.org/2000/svg";

const history = []; // {t, reports: {window name: report}, counters, health}
const models = []; // every model seen, in order of first sight: its color index
let settings = null;
let failures = 0;

const $ = (id) => document.getElementById(id);

// An empty map keyed by names that clients chose (models, surfaces): with
// no prototype, a model called "constructor" or "toString" is a key like
// any other, not a property every object inherits.
const byName = () => Object.create(null);

// The characters a page shows as nothing or that break a line: controls,
// line and paragraph separators, and Unicode's default ignorable code points
// (zero-width spaces and joiners, the byte order mark, direction marks, ...);
// and the backslash that starts an escape.
const HIDDEN = /[\\\p{Cc}\u2028\u2029\p{Default_Ignorable_Code_Point}]/gu;

// `text` with what it hides written as \u{..} and a backslash doubled, as
// the tables of `rankwatch replay` and `query` print names:
// "mod\u200bel" must not pass for "model".
function shown(text) {
  return String(text).replace(HIDDEN, (c) => (c === "\\" ? "\\\\" : "\\u{" + c.codePointAt(0).toString(16) + "}"));
}

function element(tag, attributes, text) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = shown(text);
  return node;
}

function color(model) {
  let index = models.indexOf(model);
  if (index < 0) {
    models.push(model);
    index = models.length - 1;
  }
  return COLORS[index % COLORS.length];
}

function number(value, digits) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return value.toFixed(digits);
}

function count(value) {
  return Number.isFinite(value) ? Math.round(value).toLocaleString("en") : "–";
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 120) return value.toFixed(1) + " s";
  if (value < 7200) return (value / 60).toFixed(1) + " min";
  return (value / 3600).toFixed(1) + " h";
}

// ---- polling -------------------------------------------------------------

async function poll() {
  try {
    const response = await fetch("api/status", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const status = await response.json();
    remember(status);
    failures = 0;
    render();
  } catch (error) {
    failures += 1;
    const state = $("state");
    state.textContent = "cannot reach the server (" + error.message + "); retrying";
    state.classList.add("down");
  }
  window.setTimeout(poll, POLL_MS);
}

function remember(status) {
  const firstPoll = settings === null;
  settings = status.settings;
  const reports = { [SINCE_START]: status.since_start };
  for (const entry of status.windows) reports[entry.window] = entry.report;
  history.push({
    t: status.time_s,
    reports,
    counters: status.since_start.counters,
    health: status.health,
  });
  if (history.length > HISTORY) history.shift();
  if (firstPoll) fillChoices(status);
  else addMetricChoices(status.since_start);
}

// ---- choices -------------------------------------------------------------

function fillChoices(status) {
  const ks = $("k");
  for (const k of settings.k) ks.append(element("option", { value: String(k) }, String(k)));
  ks.value = settings.k.includes(10) ? "10" : String(settings.k[0]);
  const windows = $("window");
  for (const name of [...settings.windows, SINCE_START]) {
    windows.append(element("option", { value: name }, name));
  }
  windows.value = settings.windows.length > 0 ? settings.windows[0] : SINCE_START;
  addMetricChoices(status.since_start);
  readHash();
  for (const id of ["metric", "k", "window", "scope"]) {
    $(id).addEventListener("change", () => {
      writeHash();
      render();
    });
  }
}

function addMetricChoices(report) {
  const select = $("metric");
  const first = select.options.length === 0;
  const known = new Set([...select.options].map((option) => option.value));
  for (const group of report.groups) {
    for (const key of Object.keys(group.metrics)) {
      const name = key.split("@")[0];
      if (known.has(name)) continue;
      known.add(name);
      select.append(element("option", { value: name }, name));
    }
  }
  if (!first || known.size === 0) return;
  const wanted = new URLSearchParams(window.location.hash.slice(1)).get("metric");
  select.value = known.has(wanted) ? wanted : known.has("ndcg") ? "ndcg" : select.options[0].value;
}

function readHash() {
  const wanted = new URLSearchParams(window.location.hash.slice(1));
  for (const id of ["metric", "k", "window", "scope"]) {
    const value = wanted.get(id);
    if (value && [...$(id).options].some((option) => option.value === value)) $(id).value = value;
  }
}

function writeHash() {
  const chosen = new URLSearchParams();
  for (const id of ["metric", "k", "window", "scope"]) chosen.set(id, $(id).value);
  window.history.replaceState(null, "", "#" + chosen.toString());
}

function choice() {
  return {
    metric: $("metric").value,
    key: $("metric").value + "@" + $("k").value,
    window: $("window").value,
    scope: $("scope").value,
  };
}

// ---- rendering -----------------------------------------------------------

function render() {
  const latest = history[history.length - 1];
  const state = $("state");
  state.classList.remove("down");
  state.textContent = "updated " + new Date(latest.t * 1000).toLocaleTimeString("en-GB") +
    " · " + history.length + " polls kept in this page";
  renderQuality(choice());
  renderHealth(latest);
  renderSettings();
}

// A surface, label or value as a place shows it: quoted (as JSON) when it
// holds a space, "=" or a quote, so that no two groups read alike (surface
// "home country=de" with country "us" had been drawn in one chart with
// surface "home" and country "de country=us").
function part(text) {
  return text === "" || /[\s="]/.test(text) ? JSON.stringify(text) : text;
}

// A surface with its segment values, if any ("home country=de"): one key per group.
function place(group) {
  const segments = Object.entries(group.segments || {}).map(([label, value]) => part(label) + "=" + part(value));
  return [part(group.surface)].concat(segments).join(" ");
}

// The points of every (surface and segments, model) on the chosen metric: {place: {model: [{t, mean, se}]}}.
function series(chosen) {
  const bySurface = byName();
  for (const poll of history) {
    const report = poll.reports[chosen.window];
    if (!report) continue;
    for (const group of report.groups) {
      const entry = group.metrics[chosen.key];
      if (!entry) continue;
      const se = entry["se_" + chosen.scope];
      const models = (bySurface[place(group)] = bySurface[place(group)] || byName());
      (models[group.model] = models[group.model] || []).push({
        t: poll.t,
        mean: entry[chosen.scope],
        se: Number.isFinite(se) ? se : null,
        lists: chosen.scope === "all" ? group.lists : group.engaged_lists,
      });
    }
  }
  return bySurface;
}

function renderQuality(chosen) {
  const container = $("surfaces");
  const bySurface = series(chosen);
  const surfaces = Object.keys(bySurface).sort();
  container.replaceChildren();
  if (surfaces.length === 0) {
    const health = history[history.length - 1].health;
    const open = health.open_impressions > 0 && health.first_finalization_in_s !== null
      ? " " + count(health.open_impressions) + " lists are open; the first is finalized in about " + seconds(health.first_finalization_in_s) + "."
      : "";
    container.append(element("p", { class: "empty" },
      "No finalized list in this window yet: lists finalize once their attribution window and the allowed lateness have passed." + open));
  }
  for (const surface of surfaces) {
    const card = element("article", { class: "surface", "data-surface": surface });
    card.append(element("h3", {}, surface + " · " + chosen.key + " (" + chosen.scope + "), " + chosen.window));
    card.append(chart(bySurface[surface], chosen, settledAt(surface, chosen)));
    card.append(legend(bySurface[surface]));
    container.append(card);
  }
  renderComparisons(chosen);
  renderInterleaving(chosen);
  renderSplits();
  renderPositions();
  renderCoverage(chosen);
}

function extent(lines) {
  let low = Infinity;
  let high = -Infinity;
  let start = Infinity;
  let end = -Infinity;
  for (const points of Object.values(lines)) {
    for (const p of points) {
      const half = p.se === null ? 0 : Z95 * p.se;
      low = Math.min(low, p.mean - half);
      high = Math.max(high, p.mean + half);
      start = Math.min(start, p.t);
      end = Math.max(end, p.t);
    }
  }
  // The axis fits what is drawn, with a margin, so that bands are not hairlines.
  if (!Number.isFinite(low)) return { low: 0, high: 1, start: end - 60, end };
  const span = Math.max(high - low, 0.01);
  low = Math.max(Math.min(low, high) - span * 0.1, low >= 0 ? 0 : -Infinity);
  high = high + span * 0.1;
  if (end - start < 60) start = end - 60;
  return { low, high, start, end };
}

function ticks(low, high, wanted) {
  const raw = (high - low) / wanted;
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const out = [];
  for (let v = Math.ceil(low / step) * step; v <= high + 1e-12; v += step) out.push(v);
  return { values: out, digits: Math.max(0, -Math.floor(Math.log10(step))) };
}

// When each comparison on `surface` (a place: surface and segments) was first
// settled in the polls kept, on the chosen metric and window:
// [{t, model, worse}] for the comparisons whose anytime bound excludes 0.
function settledAt(surface, chosen) {
  const found = new Map();
  for (const poll of history) {
    const report = poll.reports[chosen.window];
    const lists = report ? listsByPlace(report) : {};
    for (const c of (report && report.comparisons) || []) {
      if (c.metric !== chosen.key || place(c) !== surface || found.has(c.model)) continue;
      const state = standing(c, lists);
      if (state === "worse" || state === "better") found.set(c.model, { t: poll.t, model: c.model, worse: state === "worse" });
    }
  }
  return Array.from(found.values());
}

// The lists each side of a comparison needs before the page calls it
// settled, as the alert rules wait for (rankwatch:comparison_min_lists):
// one list, or lists that all scored the same, have a standard error of 0,
// and then the anytime bound is a single point that says nothing.
const MIN_LISTS = 30;

// The lists of each model at each place of `report`: {place: {model: lists}}.
function listsByPlace(report) {
  const lists = byName();
  for (const g of report.groups || []) (lists[place(g)] = lists[place(g)] || byName())[g.model] = g.lists;
  return lists;
}

// Where a comparison stands, given `lists` of listsByPlace: "few" until both
// models have MIN_LISTS lists, then "worse" or "better" once its anytime bound
// excludes 0, else "open".
function standing(c, lists) {
  const here = lists[place(c)] || {};
  if (!Array.isArray(c.cs95) || Math.min(here[c.model] || 0, here[c.control] || 0) < MIN_LISTS) return "few";
  if (c.cs95[1] < 0) return "worse";
  if (c.cs95[0] > 0) return "better";
  return "open";
}

function chart(lines, chosen, settled) {
  const width = 600;
  const height = 240;
  const margin = { left: 46, right: 12, top: 10, bottom: 26 };
  const box = extent(lines);
  const x = (t) => margin.left + ((t - box.start) / (box.end - box.start)) * (width - margin.left - margin.right);
  const y = (v) => height - margin.bottom - ((v - box.low) / (box.high - box.low)) * (height - margin.top - margin.bottom);
  const svg = element("svg:svg", {
    class: "chart",
    viewBox: "0 0 " + width + " " + height,
    role: "img",
    "aria-label": chosen.key + " over time per model",
  });
  const grid = ticks(box.low, box.high, 4);
  for (const v of grid.values) {
    svg.append(element("svg:line", { class: "axis", x1: margin.left, x2: width - margin.right, y1: y(v), y2: y(v) }));
    svg.append(element("svg:text", { x: margin.left - 6, y: y(v) + 4, "text-anchor": "end" }, v.toFixed(grid.digits)));
  }
  for (const fraction of [0, 0.5, 1]) {
    const t = box.start + fraction * (box.end - box.start);
    const anchor = fraction === 0 ? "start" : fraction === 1 ? "end" : "middle";
    svg.append(element("svg:text", { x: x(t), y: height - 8, "text-anchor": anchor },
      new Date(t * 1000).toLocaleTimeString("en-GB")));
  }
  for (const model of Object.keys(lines).sort()) {
    const points = lines[model];
    const stroke = color(model);
    const banded = points.filter((p) => p.se !== null);
    if (banded.length > 0) {
      const upper = banded.map((p) => x(p.t) + "," + y(p.mean + Z95 * p.se));
      const lower = banded.map((p) => x(p.t) + "," + y(p.mean - Z95 * p.se)).reverse();
      svg.append(element("svg:polygon", {
        class: "band", "data-model": model, points: upper.concat(lower).join(" "),
        fill: stroke, "fill-opacity": "0.15", stroke: "none",
      }));
    }
    svg.append(element("svg:polyline", {
      class: "line", "data-model": model, fill: "none", stroke, "stroke-width": "2",
      points: points.map((p) => x(p.t) + "," + y(p.mean)).join(" "),
    }));
    const last = points[points.length - 1];
    svg.append(element("svg:circle", { cx: x(last.t), cy: y(last.mean), r: 3.5, fill: stroke }));
  }
  // A marker where a comparison's anytime bound first excluded 0.
  for (const mark of settled || []) {
    if (mark.t < box.start) continue;
    svg.append(element("svg:line", {
      class: "settled-mark", x1: x(mark.t), x2: x(mark.t), y1: margin.top, y2: height - margin.bottom,
      stroke: mark.worse ? "#b42318" : "#2e7d32", "stroke-dasharray": "4 3",
    }));
    const late = x(mark.t) > width * 0.6;
    svg.append(element("svg:text", {
      class: "settled-label", x: x(mark.t) + (late ? -4 : 4), y: margin.top + 10, "text-anchor": late ? "end" : "start",
    }, mark.model + (mark.worse ? " worse: settled" : " better: settled")));
  }
  return svg;
}

// CTR by rank per model, since start: credited clicks at a rank over the lists that reached it.
function renderPositions() {
  const container = $("positions");
  container.replaceChildren();
  const latest = history[history.length - 1].reports[SINCE_START];
  const groups = ((latest && latest.groups) || []).filter((g) => (g.positions || []).length > 0);
  if (groups.length === 0) return;
  container.append(element("h3", {}, "Click-through rate by rank, since start"));
  const bySurface = byName();
  for (const g of groups) (bySurface[place(g)] = bySurface[place(g)] || []).push(g);
  const grid = element("div", { class: "surfaces" });
  for (const surface of Object.keys(bySurface).sort()) {
    const lines = byName();
    for (const g of bySurface[surface]) {
      lines[g.model] = g.positions.filter((p) => p.lists > 0)
        .map((p) => ({ rank: p.rank, ctr: (p.interactions.click || 0) / p.lists }));
    }
    const card = element("article", { class: "surface", "data-positions": surface });
    card.append(element("h3", {}, surface + " · clicks per list reaching each rank"));
    card.append(rankChart(lines));
    grid.append(card);
  }
  container.append(grid);
}

function rankChart(lines) {
  const width = 600;
  const height = 180;
  const margin = { left: 46, right: 12, top: 10, bottom: 26 };
  const all = Object.values(lines).flat();
  const depth = Math.max(...all.map((p) => p.rank), 2);
  const high = Math.max(...all.map((p) => p.ctr), 0.01) * 1.1;
  const x = (rank) => margin.left + ((rank - 1) / (depth - 1)) * (width - margin.left - margin.right);
  const y = (v) => height - margin.bottom - (v / high) * (height - margin.top - margin.bottom);
  const svg = element("svg:svg", { class: "chart", viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "click-through rate by rank per model" });
  const grid = ticks(0, high, 3);
  for (const v of grid.values) {
    svg.append(element("svg:line", { class: "axis", x1: margin.left, x2: width - margin.right, y1: y(v), y2: y(v) }));
    svg.append(element("svg:text", { x: margin.left - 6, y: y(v) + 4, "text-anchor": "end" }, v.toFixed(grid.digits)));
  }
  for (const rank of [1, Math.ceil(depth / 2), depth]) {
    svg.append(element("svg:text", { x: x(rank), y: height - 8, "text-anchor": "middle" }, "rank " + rank));
  }
  for (const model of Object.keys(lines).sort()) {
    svg.append(element("svg:polyline", {
      class: "line", "data-model": model, fill: "none", stroke: color(model), "stroke-width": "2",
      points: lines[model].map((p) => x(p.rank) + "," + y(p.ctr)).join(" "),
    }));
  }
  return svg;
}

// Coverage and exposure per group for the chosen window.
function renderCoverage(chosen) {
  const container = $("coverage");
  container.replaceChildren();
  const latest = history[history.length - 1].reports[chosen.window];
  const groups = ((latest && latest.groups) || []).filter((g) => g.coverage);
  if (groups.length === 0) return;
  container.append(element("h3", {}, "Coverage and exposure, " + chosen.window));
  const table = element("table");
  const head = element("tr");
  for (const title of ["surface", "model", "items shown", "items engaged", "exposure Gini", "exposure entropy"]) {
    head.append(element("th", { class: title.startsWith("items") || title.startsWith("exposure") ? "n" : "" }, title));
  }
  table.append(head);
  for (const g of groups) {
    const row = element("tr");
    const c = g.coverage;
    row.append(element("td", {}, place(g)), element("td", {}, g.model));
    row.append(element("td", { class: "n" }, count(c.items_shown) + (c.exact ? "" : " ~")));
    row.append(element("td", { class: "n" }, count(c.items_engaged) + (c.exact ? "" : " ~")));
    row.append(element("td", { class: "n" }, number(c.exposure_gini, 3)), element("td", { class: "n" }, number(c.exposure_entropy, 3)));
    table.append(row);
  }
  const wrap = element("div", { class: "comparisons" });
  wrap.append(table);
  container.append(wrap);
}

function legend(lines) {
  const list = element("ul", { class: "legend" });
  for (const model of Object.keys(lines).sort()) {
    const points = lines[model];
    const last = points[points.length - 1];
    const item = element("li", { class: "series", "data-model": model, "data-value": String(last.mean) });
    item.append(element("span", { class: "swatch", "aria-hidden": "true" }));
    item.lastChild.style.background = color(model);
    item.append(element("span", { class: "model" }, model));
    item.append(element("span", { class: "value" }, number(last.mean, 4)));
    const interval = last.se === null ? "" : "± " + number(Z95 * last.se, 4) + " · ";
    item.append(element("span", { class: "detail" }, interval + count(last.lists) + " lists"));
    list.append(item);
  }
  return list;
}

function renderComparisons(chosen) {
  const container = $("comparisons");
  container.replaceChildren();
  const latest = history[history.length - 1].reports[chosen.window];
  const rows = ((latest && latest.comparisons) || []).filter((c) => c.metric === chosen.key);
  if (rows.length === 0) return;
  container.append(element("h3", {}, "Against the control: " + chosen.key + " (all lists), " + chosen.window));
  const wrap = element("div", { class: "comparisons" });
  const table = element("table");
  const head = element("tr");
  for (const title of ["surface", "model", "control", "difference", "anytime 95%", "95% interval", "what it says"]) {
    const kind = title === "95% interval" ? "n wide" : ["difference", "anytime 95%"].includes(title) ? "n" : "";
    head.append(element("th", { class: kind }, title));
  }
  table.append(head);
  const broken = brokenSplits();
  const lists = listsByPlace(latest);
  for (const c of rows) {
    const row = element("tr", standing(c, lists) === "worse" ? { class: "worse" } : {});
    const where = element("td", {}, place(c));
    if (broken.has(place(c))) where.append(element("span", { class: "untrusted" }, " split broken: not to be trusted"));
    row.append(where, element("td", {}, c.model), element("td", {}, c.control));
    row.append(element("td", { class: "n" }, number(c.diff, 4)));
    row.append(element("td", { class: "n" }, range(c.cs95)), element("td", { class: "n wide" }, range(c.ci95)));
    row.append(element("td", { class: "sentence" }, comparisonSentence(c, chosen.key, lists)));
    table.append(row);
  }
  wrap.append(table);
  container.append(wrap);
}

function range(pair) {
  return Array.isArray(pair) ? "[" + number(pair[0], 4) + ", " + number(pair[1], 4) + "]" : "–";
}

// The places (surface and segments) whose traffic split failed its check, since start.
function brokenSplits() {
  const latest = history[history.length - 1].reports[SINCE_START];
  return new Set(((latest && latest.splits) || []).filter((s) => s.mismatch).map(place));
}

// One plain sentence on a comparison: which model is better on the metric,
// by how much, and whether the anytime-valid bound settles it.
function comparisonSentence(c, key, lists) {
  if (!Array.isArray(c.cs95)) return "";
  const by = number(Math.abs(c.diff), 4);
  const state = standing(c, lists);
  if (state === "worse") return c.control + " is better than " + c.model + " on " + key + " by " + by + "; settled (the anytime 95% bound is below 0).";
  if (state === "better") return c.model + " is better than " + c.control + " on " + key + " by " + by + "; settled (the anytime 95% bound is above 0).";
  const leader = c.diff >= 0 ? c.model : c.control;
  if (state === "few") {
    const here = lists[place(c)] || {};
    const counts = count(here[c.model] || 0) + " of " + c.model + ", " + count(here[c.control] || 0) + " of " + c.control;
    return leader + " leads on " + key + " by " + by + ", too few lists to tell (" + counts + "; " + MIN_LISTS + " of each needed).";
  }
  return leader + " leads on " + key + " by " + by + ", not settled yet: the anytime 95% bound still includes 0.";
}

// One plain sentence on an interleaving experiment: who is preferred, by how
// much, and whether the anytime-valid bound says it is settled.
function verdict(e) {
  const share = (value) => Math.abs(value * 100).toFixed(1) + "%";
  if (e.lists === 0) return "No interleaved list yet.";
  const leader = e.preference >= 0 ? e.a : e.b;
  if (e.lists < MIN_LISTS) return leader + " leads by " + share(e.preference) + " of lists, too few lists to tell (" + count(e.lists) + "; " + MIN_LISTS + " needed).";
  const [lo, hi] = e.cs95;
  if (lo > 0) return "Users prefer " + e.a + " to " + e.b + ": it wins " + share(e.preference) + " more lists; settled (the anytime 95% bound excludes 0).";
  if (hi < 0) return "Users prefer " + e.b + " to " + e.a + ": it wins " + share(e.preference) + " more lists; settled (the anytime 95% bound excludes 0).";
  return leader + " leads by " + share(e.preference) + " of lists, but not settled yet: the anytime 95% bound still includes 0.";
}

function renderInterleaving(chosen) {
  const container = $("interleaving");
  container.replaceChildren();
  const latest = history[history.length - 1].reports[chosen.window];
  const rows = (latest && latest.interleaving) || [];
  if (rows.length === 0) return;
  container.append(element("h3", {}, "Interleaving: preference per pair of rankers, " + chosen.window));
  const wrap = element("div", { class: "comparisons" });
  const table = element("table");
  const head = element("tr");
  for (const title of ["surface", "a", "b", "lists", "wins a / b / ties", "preference", "anytime 95%", "what it says"]) {
    head.append(element("th", { class: ["lists", "preference", "anytime 95%", "wins a / b / ties"].includes(title) ? "n" : "" }, title));
  }
  table.append(head);
  for (const e of rows) {
    const settled = e.lists >= MIN_LISTS && Array.isArray(e.cs95) && (e.cs95[0] > 0 || e.cs95[1] < 0);
    const row = element("tr", settled ? { class: "settled" } : {});
    const where = element("td", {}, place(e));
    if (chosen.window === SINCE_START && e.first_pick_p_value <= 0.01) {
      where.append(element("span", { class: "untrusted" }, " unfair coin: not to be trusted"));
    }
    row.append(where, element("td", {}, e.a), element("td", {}, e.b));
    row.append(element("td", { class: "n" }, count(e.lists)));
    row.append(element("td", { class: "n" }, count(e.wins_a) + " / " + count(e.wins_b) + " / " + count(e.ties)));
    row.append(element("td", { class: "n" }, number(e.preference, 4)), element("td", { class: "n" }, range(e.cs95)));
    row.append(element("td", { class: "sentence" }, verdict(e)));
    table.append(row);
  }
  wrap.append(table);
  container.append(wrap);
}

function renderSplits() {
  const container = $("splits");
  container.replaceChildren();
  const latest = history[history.length - 1].reports[SINCE_START];
  const rows = (latest && latest.splits) || [];
  if (rows.length === 0) return;
  container.append(element("h3", {}, "Traffic split against expected_split, since start"));
  const table = element("table");
  const head = element("tr");
  for (const title of ["surface", "lists (expected share)", "p-value", "verdict"]) head.append(element("th", {}, title));
  table.append(head);
  for (const s of rows) {
    const row = element("tr", s.mismatch ? { class: "untrusted" } : {});
    const lists = Object.entries(s.lists).map(([model, n]) => model + " " + count(n) + " (" + number(s.expected[model], 2) + ")").join(", ");
    row.append(element("td", {}, place(s)), element("td", {}, lists), element("td", { class: "n" }, s.p_value.toPrecision(3)));
    row.append(element("td", {}, s.mismatch ? "mismatch: the split is broken, comparisons here are not to be trusted" : "as expected"));
    table.append(row);
  }
  const wrap = element("div", { class: "comparisons" });
  wrap.append(table);
  container.append(wrap);
}

function rate(field) {
  if (history.length < 2) return null;
  const a = history[history.length - 2];
  const b = history[history.length - 1];
  const dt = b.t - a.t;
  return dt > 0 ? (field(b) - field(a)) / dt : null;
}

function sum(counts) {
  return Object.values(counts || {}).reduce((a, b) => a + b, 0);
}

function renderHealth(latest) {
  const c = latest.counters;
  const h = latest.health;
  const perSecond = (value) => (value === null ? "–" : count(value) + "/s");
  const figures = [
    ["events received", perSecond(rate((p) => p.health.events_received))],
    ["rejected", perSecond(rate((p) => sum(p.counters.rejected)))],
    ["events since start", count(h.events_received)],
    ["accepted", count(h.events_accepted)],
    ["interactions credited", count(c.credited)],
    ["unattributed", count(sum(c.unattributed))],
    ["late impressions", count(c.late.impressions)],
    ["duplicates", count(sum(c.duplicates))],
    ["shed under limits", count(sum(c.shed))],
    ["open impressions", count(h.open_impressions)],
    ["waiting interactions", count(h.waiting_interactions)],
    ["overflowed impressions", count(h.overflowed_impressions)],
    ["groups", count(h.groups)],
    ["watermark lag", seconds(h.watermark_lag_s)],
    ["finalization lag", seconds(h.finalization_lag_s)],
  ];
  const list = $("health");
  list.replaceChildren();
  for (const [name, value] of figures) {
    const figure = element("div");
    figure.append(element("dt", {}, name), element("dd", {}, value));
    list.append(figure);
  }
  countTable($("rejected"), c.rejected, "none");
  countTable($("unattributed"), c.unattributed, "none");
}

function countTable(table, counts, none) {
  table.replaceChildren();
  const entries = Object.entries(counts || {});
  if (entries.length === 0) {
    const row = element("tr");
    row.append(element("td", { class: "empty" }, none));
    table.append(row);
    return;
  }
  for (const [reason, n] of entries) {
    const row = element("tr");
    row.append(element("td", {}, reason), element("td", { class: "n" }, count(n)));
    table.append(row);
  }
}

function renderSettings() {
  const table = $("settings");
  if (table.childElementCount > 0) return;
  for (const [name, value] of Object.entries(settings)) {
    let text;
    if (value === null) text = "none";
    else if (Array.isArray(value)) text = value.join(", ");
    else if (typeof value === "object") text = Object.entries(value).map(([k, v]) => k + " = " + v).join(", ");
    else text = String(value);
    const row = element("tr");
    row.append(element("td", {}, name), element("td", {}, text));
    table.append(row);
  }
}

// The history the server kept, so that the charts start with the last hour;
// then a poll every 2 s.
async function start() {
  try {
    const response = await fetch("api/history", { cache: "no-store" });
    if (response.ok) {
      for (const status of await response.json()) remember(status);
    }
  } catch (error) {
    // No history: the charts start with the first poll.
  }
  poll();
}

start();
