"""One self-contained HTML page: inline CSS and inline SVG, no scripts, nothing fetched."""

from __future__ import annotations

from html import escape

from fathom.report.doc import INTENDED, ReportDoc, Table

CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:0 auto;max-width:1180px;padding:16px 20px;color:#222;
line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
h3{margin-bottom:.3em}.meta{color:#666;font-size:.9em}
.tw{overflow-x:auto;margin:.5em 0 1em}
table{border-collapse:collapse;font-size:.85em}
th,td{border:1px solid #ddd;padding:3px 7px;vertical-align:top}th{background:#f4f4f4;text-align:left}
td.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:12px}
.charts figure{margin:0;border:1px solid #eee;padding:4px}
.flag{color:#c00000}.intended{color:#1f5fa8}.note{color:#555;font-size:.85em;margin:.2em 0}
details{margin:.4em 0}summary{cursor:pointer;font-weight:bold}
ul.defs li{margin-bottom:.4em;font-size:.9em}
"""


def _flag(text: str) -> str:
    # an intended fault is what the point measures, not something wrong with it: not in the anomaly colour
    cls = "intended" if text == INTENDED else "flag"
    return f'<span class="{cls}">{escape(text)}</span>'


def table_html(t: Table, heading: str = "h3") -> str:
    out = [f"<{heading}>{escape(t.title)}</{heading}>"] if t.title else []
    out.append('<div class="tw"><table><thead><tr>')
    out += [f"<th>{escape(h)}</th>" for h in t.headers]
    out.append("</tr></thead><tbody>")
    for row in t.rows:
        out.append("<tr>")
        for i, (cell, al) in enumerate(zip(row, t.align)):
            cls = ' class="r"' if al == "r" else ""
            is_flag = cell and (t.headers[i] == "flags" or (t.title == "Anomalies" and t.headers[i] == "kind"))
            cell_html = ", ".join(_flag(f) for f in cell.split(", ")) if is_flag else escape(cell)
            out.append(f"<td{cls}>{cell_html}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    out += [f'<p class="note">{escape(n)}</p>' for n in t.notes]
    return "".join(out)


def render(doc: ReportDoc) -> str:
    o = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         '<meta name="viewport" content="width=device-width, initial-scale=1">',
         f"<title>{escape(doc.title)}</title><style>{CSS}</style></head><body>",
         f"<h1>{escape(doc.title)}</h1>",
         f'<p class="meta">Generated {escape(doc.generated)} by fathom. Runs: '
         f'{escape(", ".join(r.name for r in doc.runs))}.</p>']
    o.append(table_html(doc.runs_table, "h2"))
    o.append("<h2>Summary</h2>")
    if doc.summary.rows:
        o.append(table_html(Table("", doc.summary.headers, doc.summary.rows, doc.summary.align, doc.summary.notes)))
    else:
        o.append("<p>No completed points with throughput.</p>")
    if doc.anomalies:
        o.append(table_html(doc.anomalies, "h2"))
    else:
        o.append("<h2>Anomalies</h2><p>None found by the rules below.</p>")
    for s in doc.sections:
        o.append(f'<h2 id="wl-{escape(s.workload)}">{escape(s.workload)}</h2><div class="charts">')
        for c in s.charts:
            o.append(f'<figure data-chart="{escape(c.slug)}">{c.svg}</figure>')
        o.append("</div>")
        for t in s.tables:
            o.append(table_html(t))
    o.append("<h2>Environment</h2>")
    for (name, rows), run in zip(doc.env, doc.runs):
        o.append(f"<details><summary>{escape(name)}</summary>")
        if run.source:
            o.append(f'<p class="note"><b>Source:</b> {escape(run.source)}</p>')
        if rows:
            o.append(table_html(Table("", ["key", "value"], [[k, v] for k, v in rows], ["l", "l"])))
        else:
            o.append("<p>No environment recorded.</p>")
        o.append("</details>")
    o.append('<h2>Definitions</h2><ul class="defs">')
    o += [f"<li>{escape(d)}</li>" for d in doc.definitions]
    o.append("</ul></body></html>")
    return "\n".join(o)
