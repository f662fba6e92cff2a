"""The live page: one self-contained HTML document (no external script, style, font or image).

It asks /state once a second and redraws when the state's version moved: the suite's progress, the
running point's ops/s (an open-loop point's offered rate beside it) and p50/p99 per second (SVG, fault and
steady-state marks as vertical lines), the finished points as growing curves (IOPS against the point's
position, one curve per workload, each point a dot, ringed when it reached steady state) and a table, and the
flags so far. Figures are also written as text with ids (`now-iops`, `now-p99`, `done`, `status`, rows of
`finished`) and the charts' elements carry data attributes (`data-series`, `data-key`, `data-kind`), so a
reader, or a test, can check them against the store.
"""

from __future__ import annotations

HTML = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fathom live</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1em 2em;color:#222;background:#fff}
h1{font-size:1.3em;margin:.2em 0} h2{font-size:1.05em;margin:1em 0 .3em}
.bar{background:#eee;height:10px;border-radius:5px;overflow:hidden;width:100%;max-width:60em}
.bar>div{background:#3b7dd8;height:100%}
.figs span{display:inline-block;margin-right:2em} .figs b{font-size:1.2em}
table{border-collapse:collapse} td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}
td.l,th.l{text-align:left} .flag{color:#a33} .muted{color:#777}
svg{background:#fafafa;border:1px solid #ddd}
</style></head>
<body>
<h1 id="title">fathom: waiting for the run</h1>
<div class="muted"><span id="status">-</span> · <span id="source">-</span> · updated <span id="updated">-</span></div>
<h2>Progress</h2>
<div><span id="done">0</span> of <span id="planned">?</span> point(s) finished; running: <span id="point">-</span></div>
<div class="bar"><div id="progress" style="width:0%"></div></div>
<h2>Running point</h2>
<div class="figs"><span>ops/s <b id="now-iops">-</b></span><span>offered ops/s <b id="now-offered">-</b></span>
<span>MiB/s <b id="now-mib">-</b></span>
<span>p50 <b id="now-p50">-</b> ms</span><span>p99 <b id="now-p99">-</b> ms</span>
<span>errors <b id="now-errors">-</b></span><span>second <b id="now-t">-</b></span></div>
<svg id="chart-ops" width="900" height="180"></svg>
<svg id="chart-lat" width="900" height="180"></svg>
<div id="marks" class="muted"></div>
<h2>Finished points</h2>
<svg id="chart-curve" width="900" height="180"></svg>
<table id="finished"><thead><tr><th>#</th><th class="l">point</th><th class="l">status</th><th>IOPS</th>
<th>MiB/s</th><th>p50 ms</th><th>p99 ms</th><th>offered ops/s</th><th class="l">steady state</th></tr></thead>
<tbody></tbody></table>
<h2>Flags</h2>
<ul id="flags"><li class="muted">none</li></ul>
<script>
"use strict";
let seen = -1;
const $ = id => document.getElementById(id);
const fmt = (v, d) => v === null || v === undefined ? "-" : Number(v).toFixed(d);
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
// one colour per workload of the finished points' curve, in the order the run reached them
const PALETTE = ["#3b7dd8", "#e76f51", "#2a9d8f", "#8e44ad", "#f4a261", "#264653", "#d62f8c", "#7a9a01"];
const has = v => v !== null && v !== undefined;
// a series' points as the runs of points it draws: a null value (no figure, or a gap the series leaves) ends a
// line, so nothing is drawn between figures that do not follow each other
function runs(pts) {
  const out = [[]];
  pts.forEach(p => { if (has(p[1])) out[out.length - 1].push(p); else if (out[out.length - 1].length) out.push([]); });
  return out.filter(r => r.length);
}
// series: [{name, color, dash, pts: [[x, y, dot]]}]; a dot ({key, title, steady}) draws that point on its own
function line(svg, series, marks, xlab) {
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), L = 60, B = 20;
  let xs = [], ys = [];
  series.forEach(s => s.pts.forEach(p => { if (has(p[1])) { xs.push(p[0]); ys.push(p[1]); } }));
  let out = "";
  if (!xs.length) { svg.innerHTML = '<text x="70" y="90" fill="#777">no data yet</text>'; return; }
  const mt = (marks || []).map(m => m.t).filter(has);  // a mark is never drawn off the chart
  const x0 = Math.min(...xs, ...mt), x1 = Math.max(...xs, ...mt, x0 + 1), y1 = Math.max(...ys) * 1.1 || 1;
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - 10), Y = y => H - B - y / y1 * (H - B - 10);
  for (let k = 0; k <= 4; k++) {
    const y = y1 * k / 4, lab = y >= 100 ? y.toFixed(0) : y.toPrecision(2);
    out += `<line x1="${L}" x2="${W-10}" y1="${Y(y)}" y2="${Y(y)}" stroke="#e4e4e4"/>` +
           `<text x="${L-4}" y="${Y(y)+4}" text-anchor="end" font-size="10">${lab}</text>`;
  }
  out += `<text x="${W-10}" y="${H-4}" text-anchor="end" font-size="10">` +
         `${esc(xlab)} ${x0.toFixed(0)}..${x1.toFixed(0)}</text>`;
  (marks || []).forEach(m => {
    if (!has(m.t)) return;
    const c = m.kind === "steady" ? "#2a2" : "#d22";
    out += `<line class="mark" data-kind="${esc(m.kind)}" data-t="${m.t}" x1="${X(m.t)}" x2="${X(m.t)}" y1="10" ` +
           `y2="${H-B}" stroke="${c}" stroke-dasharray="4 3"><title>${esc(m.message)}</title></line>`;
  });
  let lx = L + 6;
  series.forEach(s => {
    const attrs = `data-series="${esc(s.name)}" stroke="${s.color}"`;
    runs(s.pts).forEach(r => {
      out += `<polyline class="series" ${attrs} fill="none" stroke-width="1.5"` +
             (s.dash ? ' stroke-dasharray="6 4"' : "") +
             ` points="${r.map(p => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ")}"/>`;
      r.filter(p => p[2]).forEach(p => {
        const d = p[2], ring = d.steady ? ' stroke="#2a2" stroke-width="2.5" data-steady="1"' : "";
        out += `<circle class="dot" ${attrs} data-key="${esc(d.key)}" cx="${X(p[0]).toFixed(1)}" ` +
               `cy="${Y(p[1]).toFixed(1)}" r="4" fill="${s.color}"${ring}><title>${esc(d.title)}</title></circle>`;
      });
    });
    out += `<text class="legend" x="${lx}" y="14" font-size="11" fill="${s.color}">${esc(s.name)}</text>`;
    lx += 7 * s.name.length + 18;
  });
  svg.innerHTML = out;
}
// the running point's ops/s; an open-loop point's offered rate beside what it achieved each second
function opsSeries(p, ser) {
  const open = p && has(p.offered_rate);
  const out = [{name: open ? "achieved ops/s" : "ops/s", color: "#3b7dd8", pts: ser.map(x => [x.t, x.iops])}];
  if (open) out.push({name: "offered ops/s", color: "#777", dash: true, pts: ser.map(x => [x.t, +p.offered_rate])});
  return out;
}
const steadyText = f => has(f.steady_s) ? `reached at ${fmt(f.steady_s, 0)} s` : (f.steady_state || "-");
// the finished points: one curve per workload (a workload's points that other workloads' points interrupt are
// runs of their own), each point a dot of its own, ringed green when it reached steady state; an open-loop
// workload's offered rates as a dashed curve of its colour beside the IOPS achieved
function curves(fin) {
  const names = [...new Set(fin.map(f => f.workload))];
  return names.flatMap((w, i) => {
    const color = PALETTE[i % PALETTE.length];
    const at = (f, y, dot) => f.workload === w ? [f.n, y, dot] : [f.n, null];
    const dot = f => ({key: f.key, steady: has(f.steady_s), title: `${f.label}: ${fmt(f.iops, 0)} IOPS` +
                       (has(f.steady_s) ? `, steady state ${steadyText(f)}` : "")});
    const out = [{name: w, color, pts: fin.map(f => at(f, f.iops, dot(f)))}];
    if (fin.some(f => f.workload === w && has(f.offered_rate_ops_s)))
      out.push({name: `${w} offered`, color, dash: true, pts: fin.map(f => at(f, f.offered_rate_ops_s))});
    return out;
  });
}
function draw(s) {
  const r = s.run || {}, p = s.point;
  $("title").textContent = `fathom: ${r.name || "run"}` + (r.suite ? ` (${r.suite})` : "");
  $("status").textContent = r.status || "-";
  $("source").textContent = s.source === "store" ? "from the results store" : "live";
  $("updated").textContent = new Date(s.now * 1000).toLocaleTimeString();
  $("done").textContent = s.done;
  $("planned").textContent = r.planned === null || r.planned === undefined ? "?" : r.planned;
  $("point").textContent = p && p.status === "running" ? `[${p.n}] ${p.label}` : "none";
  $("progress").style.width = r.planned ? `${Math.min(100, 100 * s.done / r.planned)}%` : "0%";
  const ser = p ? p.series : [], last = ser.length ? ser[ser.length - 1] : null;
  $("now-iops").textContent = last ? fmt(last.iops, 0) : "-";
  $("now-offered").textContent = p && has(p.offered_rate) ? fmt(p.offered_rate, 0) : "-";
  $("now-mib").textContent = last ? fmt(last.mib_s, 1) : "-";
  $("now-p50").textContent = last ? fmt(last.p50_ms, 3) : "-";
  $("now-p99").textContent = last ? fmt(last.p99_ms, 3) : "-";
  $("now-errors").textContent = last ? last.errors : "-";
  $("now-t").textContent = last ? fmt(last.t, 0) : "-";
  const marks = p ? p.marks : [];
  line($("chart-ops"), opsSeries(p, ser), marks, "s");
  line($("chart-lat"), [{name: "p50 ms", color: "#2a9d8f", pts: ser.map(x => [x.t, x.p50_ms])},
                        {name: "p99 ms", color: "#e76f51", pts: ser.map(x => [x.t, x.p99_ms])}], marks, "s");
  $("marks").textContent = marks.map(m => `${m.kind} at ${fmt(m.t, 1)} s: ${m.message}`).join(" · ");
  const fin = s.finished || [];
  line($("chart-curve"), curves(fin), [], "point");
  $("finished").tBodies[0].innerHTML = fin.map(f => `<tr data-key="${esc(f.key)}"><td>${f.n}</td>` +
    `<td class="l">${esc(f.label)}</td><td class="l">${esc(f.status)}</td><td class="iops">${fmt(f.iops, 0)}</td>` +
    `<td>${fmt(f.bw_mib_s, 1)}</td><td>${fmt(f.p50_ms, 3)}</td><td class="p99">${fmt(f.p99_ms, 3)}</td>` +
    `<td class="offered">${fmt(f.offered_rate_ops_s, 0)}</td><td class="l steady">${esc(steadyText(f))}</td></tr>`
  ).join("");
  const fl = s.flags || [];
  $("flags").innerHTML = fl.length ? fl.map(f => `<li class="flag">${esc(f.what)}` +
    `${f.point ? " (" + esc(f.point) + ")" : ""}: ${esc(f.message)}</li>`).join("") : '<li class="muted">none</li>';
  document.body.dataset.version = s.version;
  document.body.dataset.status = r.status || "";
}
async function tick() {
  try {
    const res = await fetch("state", {cache: "no-store"});
    if (res.ok) { const s = await res.json(); if (s.version !== seen) { seen = s.version; draw(s); } }
    else $("status").textContent = `state: HTTP ${res.status}`;
  } catch (e) { $("status").textContent = "the run's server is gone (the run ended?)"; }
  setTimeout(tick, 1000);
}
tick();
</script>
</body></html>
"""
