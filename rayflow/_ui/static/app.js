// rayflow's topology page: reads the JSON API once a second and draws the tables and the plots.
// Plain JS, no library: the page is served by the driver with no internet. Every text that comes
// from the topology (ids, errors) is set as textContent, never as HTML.
"use strict";

const TOKEN_KEY = "rayflow-token"; // the token, kept for this tab only: never in a URL
let tokenRequired = false;
const WINDOW_SECS = 300; // how far back the plots reach: 5 minutes (1 at least, to begin with)
const MIN_WINDOW_SECS = 60;
const COLORS = ["#c7862b", "#4a7bb0", "#2e7d32", "#8e44ad", "#b3261e", "#00838f", "#6d4c41", "#5c6bc0"];
// One colour per component, in the topology's order: its id in the tables and its line in the
// plots are drawn in it, so a line is found in the tables by its colour.
const colors = new Map();
const colorOf = (id) => {
  if (!colors.has(id)) colors.set(id, COLORS[colors.size % COLORS.length]);
  return colors.get(id);
};
let since = 0;
let points = [];
let stopped = false;
let started = Date.now() / 1000;

const $ = (id) => document.getElementById(id);
const num = (v) => (v === null || v === undefined ? "" : Math.round(v).toLocaleString("en-US"));
const ms = (v) => (v ? v.toFixed(2) : "-");
const duration = (secs) => {
  const s = Math.max(0, Math.round(secs));
  const [h, m] = [Math.floor(s / 3600), Math.floor((s % 3600) / 60)];
  return h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
};
const ratio = (v) => (v === null || v === undefined ? "" : v.toFixed(3));
const amount = (name, v) =>
  name === "memory" || name.endsWith("_memory") ? `${+(v / 2 ** 30).toPrecision(3)} GiB` : `${+v.toPrecision(3)}`;
const resources = (r) => Object.entries(r || {}).map(([name, v]) => `${name} ${amount(name, v)}`).join(", ");
const STATE_CLASS = { running: "", "not answering": "dead", "given up": "dead" }; // others: starting

async function get(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.json();
}

function cell(row, text, { field, value, cls } = {}) {
  const td = row.insertCell();
  td.textContent = text;
  if (field) td.dataset.field = field;
  if (value !== undefined && value !== null) td.dataset.value = value;
  if (cls) td.className = cls;
  if (cls === "error" && text) td.title = text; // one line in the table; the whole of it on hover
  return td;
}

function fill(table, rows, build) {
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const item of rows) build(body.insertRow(), item);
}

function counters(row, m, names) {
  for (const name of names) cell(row, num(m[name]), { field: name, value: m[name] });
}

function label(row, id, kind) {
  const td = cell(row, id, { field: "id" });
  td.className = `text kind-${kind}`;
  td.style.color = colorOf(id);
  row.dataset.component = id;
}

function showComponents(components) {
  const entries = Object.entries(components).filter(([, m]) => m.kind !== "acker");
  fill($("spouts"), entries.filter(([, m]) => m.kind === "spout"), (row, [id, m]) => {
    label(row, id, "spout");
    counters(row, m, ["tasks", "emitted", "transferred"]);
    cell(row, ms(m.complete_latency_ms.mean), { field: "complete_latency_ms", value: m.complete_latency_ms.mean });
    counters(row, m, ["acked", "failed", "pending", "restarts"]);
    cell(row, m.last_error || "", { field: "last_error", cls: "error" });
  });
  fill($("bolts"), entries.filter(([, m]) => m.kind === "bolt"), (row, [id, m]) => {
    label(row, id, "bolt");
    counters(row, m, ["tasks", "emitted", "transferred"]);
    cell(row, ratio(m.capacity), { field: "capacity", value: m.capacity });
    cell(row, ms(m.execute_latency_ms.mean), { field: "execute_latency_ms", value: m.execute_latency_ms.mean });
    counters(row, m, ["executed"]);
    cell(row, ms(m.process_latency_ms.mean), { field: "process_latency_ms", value: m.process_latency_ms.mean });
    const batch = m.batch_size ? m.batch_size.mean : null; // a BatchBolt's mean batch size
    cell(row, batch === null ? "" : batch.toFixed(1), { field: "batch_size", value: batch });
    counters(row, m, ["acked", "failed", "restarts"]);
    cell(row, m.last_error || "", { field: "last_error", cls: "error" });
  });
}

function showTasks(tasks) {
  fill($("tasks"), Object.entries(tasks), (row, [task, m]) => {
    row.dataset.task = task;
    cell(row, task, { field: "task" });
    cell(row, m.component, { field: "component", cls: `text kind-${m.kind}` }).style.color = colorOf(m.component);
    const state = m.state || (m.alive ? "running" : "not answering");
    cell(row, state, { field: "state", value: state, cls: `text ${STATE_CLASS[state] ?? "waiting"}` });
    const node = m.node_ip || (m.node_id || "").slice(0, 8);
    cell(row, node, { field: "node", value: m.node_ip, cls: "text" }).title = m.node_id ? `node ${m.node_id}` : "";
    cell(row, m.pid ?? "", { field: "pid" });
    // A chained task runs in its host task's process: its pid, node and restarts are the host's.
    const chained = m.host !== undefined && m.host !== null && String(m.host) !== task;
    const host = cell(row, chained ? `in task ${m.host}` : "", { field: "host", value: m.host, cls: "text" });
    host.title = chained ? `chained: runs in the process of task ${m.host}` : "";
    cell(row, resources(m.resources), { field: "resources", value: JSON.stringify(m.resources || {}), cls: "text" });
    const gpus = (m.gpu_ids || []).join(", ");
    cell(row, gpus, { field: "gpu_ids", value: gpus, cls: "text" });
    counters(row, m, ["emitted", "transferred", "acked", "failed", "executed"]);
    cell(row, ms(m.latency_ms), { field: "latency_ms", value: m.latency_ms });
    cell(row, ratio(m.capacity), { field: "capacity", value: m.capacity });
    counters(row, m, ["restarts"]);
    cell(row, m.last_error || "", { field: "last_error", cls: "error" });
  });
}

function showErrors(errors) {
  $("no-errors").hidden = errors.length > 0;
  $("errors").hidden = errors.length === 0;
  fill($("errors"), errors, (row, e) => {
    cell(row, new Date(e.time * 1000).toLocaleTimeString(), { field: "time", value: e.time, cls: "text" });
    cell(row, e.component, { field: "component", cls: "text" });
    cell(row, e.task, { field: "task" });
    cell(row, num(e.count), { field: "count", value: e.count });
    cell(row, e.error, { field: "error", cls: "error" });
  });
}

function showState(state) {
  const badge = $("state");
  badge.textContent = state;
  badge.className = `state ${state}`;
  $("activate").disabled = state !== "inactive";
  $("deactivate").disabled = state !== "active";
  $("kill").disabled = state === "killed";
}

// -- plots -------------------------------------------------------------------------------------
const SVG = "http://www.w3.org/2000/svg";

function svg(parent, tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  parent.appendChild(node);
  return node;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 4, 6, 8, 10]) if (m * step >= value) return m * step;
  return 10 * step;
}

function plot(chart, series, now, span, unit) {
  chart.replaceChildren();
  const [W, H, left, right, top, bottom] = [640, 220, 52, 130, 24, 24];
  const x0 = now - span;
  const values = series.flatMap((s) => s.points.map((p) => p[1]));
  const ymax = niceMax(Math.max(0, ...values));
  const x = (t) => left + ((t - x0) / span) * (W - left - right);
  const y = (v) => H - bottom - (v / ymax) * (H - top - bottom);
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4;
    svg(chart, "line", { class: "grid", x1: left, x2: W - right, y1: y(v), y2: y(v) });
    svg(chart, "text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, v >= 1000 ? `${+(v / 1000).toPrecision(3)}k` : `${+v.toPrecision(3)}`);
  }
  for (let i = 5; i >= 0; i--) {
    const ago = (span * i) / 5;
    const text = !i ? "now" : span > 120 ? `-${+(ago / 60).toFixed(1)}m` : `-${Math.round(ago)}s`;
    svg(chart, "text", { x: x(now - ago), y: H - 6, "text-anchor": "middle" }, text);
  }
  svg(chart, "text", { x: left - 6, y: 12, "text-anchor": "end" }, unit);
  series.forEach((s, i) => {
    const color = colorOf(s.name);
    const shown = s.points.filter((p) => p[0] >= x0);
    if (shown.length > 1) {
      const d = shown.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
      svg(chart, "path", { class: "line", d, stroke: color });
    }
    svg(chart, "rect", { x: W - right + 12, y: top + 16 * i, width: 10, height: 10, fill: color });
    svg(chart, "text", { x: W - right + 27, y: top + 9 + 16 * i }, s.name);
  });
}

function showPlots() {
  const now = points.length ? points[points.length - 1].time : Date.now() / 1000;
  const names = (key) => [...new Set(points.flatMap((p) => Object.keys(p[key])))];
  const seriesOf = (key) =>
    names(key).map((name) => ({
      name,
      points: points.filter((p) => p[key][name] !== null && p[key][name] !== undefined).map((p) => [p.time, p[key][name]]),
    }));
  const first = points.length ? points[0].time : now;
  const span = Math.min(WINDOW_SECS, Math.max(MIN_WINDOW_SECS, now - first));
  plot($("throughput"), seriesOf("throughput"), now, span, "tuples/s");
  plot($("latency"), seriesOf("complete_latency_ms"), now, span, "ms");
}

// -- refresh and actions -------------------------------------------------------------------------
function stop(message) {
  stopped = true;
  showState("killed");
  const banner = $("banner");
  banner.textContent = message;
  banner.hidden = false;
}

async function refresh() {
  if (stopped) return;
  try {
    const [metrics, history, errors] = await Promise.all([
      get("/api/metrics"),
      get(`/api/history?since=${since}`),
      get("/api/errors"),
    ]);
    showState(metrics.state);
    showComponents(metrics.components);
    showTasks(metrics.tasks);
    showErrors(errors.errors);
    points = points.concat(history.points);
    if (points.length) since = points[points.length - 1].time;
    const cutoff = since - WINDOW_SECS;
    points = points.filter((p) => p.time >= cutoff);
    showPlots();
    $("uptime").textContent = metrics.time ? `up ${duration(metrics.time - started)}` : "";
    $("uptime").dataset.time = metrics.time ?? "";
    if (metrics.state === "killed") stop("The topology was killed.");
  } catch (error) {
    if (!stopped) {
      $("banner").textContent = `Cannot reach the topology's server (${error.message}): it stops when the topology is killed.`;
      $("banner").hidden = false;
    }
  }
}

// The token: without one (loopback) the server takes any value; with one, the page asks for it
// once and keeps it in this tab's sessionStorage, so it never travels in a URL.
function token() {
  if (!tokenRequired) return "local";
  let value = sessionStorage.getItem(TOKEN_KEY);
  if (!value) {
    value = window.prompt("The token of this page (the one given to serve_ui, or RAYFLOW_UI_TOKEN):");
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
  }
  return value;
}

async function act(action, question) {
  if (!window.confirm(question)) return;
  const value = token();
  if (!value) return;
  const response = await fetch(`/api/${action}`, { method: "POST", headers: { "X-Rayflow-Token": value } });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    if (response.status === 403) sessionStorage.removeItem(TOKEN_KEY); // asked again next time
    window.alert(`${action} refused: ${answer.error || response.status}`);
    return;
  }
  if (answer.state === "killed") stop("The topology was killed.");
  else showState(answer.state);
  refresh();
}

async function start() {
  const legacy = new URLSearchParams(location.search).get("token"); // a link from before: out of the URL
  if (legacy) {
    sessionStorage.setItem(TOKEN_KEY, legacy);
    history.replaceState(null, "", location.pathname);
  }
  const topology = await get("/api/topology");
  tokenRequired = topology.token_required;
  document.title = `${topology.name} · rayflow`;
  $("name").textContent = topology.name;
  started = topology.started;
  topology.components.forEach((c) => colorOf(c.id));
  showState(topology.state);
  const graph = $("graph");
  if (topology.graph) {
    const img = document.createElement("img");
    img.alt = `the topology ${topology.name}`;
    img.src = "/api/graph.svg";
    img.onerror = async () => {
      const answer = await fetch("/api/graph.svg").then((r) => r.json()).catch(() => ({}));
      graph.textContent = `No drawing: ${answer.error || "the graph could not be rendered"}`;
    };
    graph.appendChild(img);
  } else {
    graph.textContent = topology.components.map((c) => `${c.id} (${c.kind} × ${c.tasks})`).join(" · ");
  }
  const name = topology.name;
  $("activate").onclick = () => act("activate", `Activate topology ${name}? Its spouts will emit.`);
  $("deactivate").onclick = () =>
    act("deactivate", `Deactivate topology ${name}? Its spouts stop emitting; pending trees still complete.`);
  $("kill").onclick = () => act("kill", `Kill topology ${name}? Every task stops; this cannot be undone.`);
  await refresh();
  setInterval(refresh, 1000);
}

start().catch((error) => {
  $("banner").textContent = `Cannot load the topology: ${error.message}`;
  $("banner").hidden = false;
});
