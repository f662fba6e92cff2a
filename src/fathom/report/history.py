"""`fathom history` as text, and as one page (self-contained HTML, or Markdown with SVG charts beside it):
one trend chart per suite, workload and figure, each level a line, change points marked, every run named."""

from __future__ import annotations

import time
from html import escape
from pathlib import Path

from fathom.analysis.history import METHOD, TIME, History, Series, unit, value_text
from fathom.analysis.stats import p_cell
from fathom.errors import FathomError
from fathom.report import svg
from fathom.report.doc import Table
from fathom.report.html import CSS, table_html
from fathom.report.markdown import slug, table_md

_v = value_text


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(t))


def _by(h: History) -> str:
    return "in the order they were made" if h.by == TIME else f"by label {h.by}"


def change_rows(h: History) -> list[list[str]]:
    return [[s.suite, s.workload, s.level, s.figure, c.first, c.last_before, _v(c.before, s.figure),
             _v(c.after, s.figure), f"{c.ratio:.3f}x" + (f" [{c.ci[0]:.3f}, {c.ci[1]:.3f}]" if c.ci else ""),
             p_cell(c.p_value), c.verdict] for s in h.series for c in s.changes]


CHANGE_HEADERS = ["suite", "workload", "level", "figure", "first after", "last before", "mean before", "mean after",
                  "ratio [95%]", "p", "verdict"]


def gate_lines(h: History) -> list[str]:
    if h.tolerance is None:
        return []
    head = (f"Gate (--fail-on-change {h.tolerance * 100:g}%): the newest position of each of {h.judged} series "
            f"against the segment before it, a t prediction test on the logs at {h.gate_alpha:.2g} per series")
    out = [head + (": FIRED" if h.fired else ": passed")] + [f"  {f.text()}" for f in h.fired]
    return out + lacking_lines(h)


def lacking_lines(h: History) -> list[str]:
    """The series the gate did not judge because the newest position has no point for them, one line each."""
    if not h.lacking:
        return []
    newest = "run" if h.by == TIME else "position"
    return ([f"not judged: {len(h.lacking)} series the newest {newest} has no point for"]
            + [f"  {s.suite}: {s.name}: none in {s.newest} (last in {s.positions[-1].key})" for s in h.lacking])


def text(h: History) -> str:
    first, last = min(r.created for r in h.runs), max(r.created for r in h.runs)
    o = [f"fathom history: {len(h.runs)} runs of {', '.join(h.suites)} {_by(h)}, {_when(first)} to {_when(last)}",
         f"Method: {METHOD}"]
    o += [f"left out: {x}" for x in h.left_out]
    o.append("")
    rows = change_rows(h)
    if rows:
        o.append(f"Change points ({len(rows)} in {len({id(s) for s in h.series if s.changes})} of "
                 f"{len(h.series)} series)")
        o += _columns(CHANGE_HEADERS, rows)
    else:
        o.append(f"No change point in {len(h.series)} series.")
    o += ["", "Series: segments (mean over each stretch between change points, from its first position)"]
    for s in h.series:
        segs = " | ".join(f"{_v(m, s.figure)} from {s.positions[a].key}" for a, _, m in s.segments)
        o.append(f"  {s.suite} {s.name}: {len(s.positions)} positions, newest {_v(s.positions[-1].mean, s.figure)}"
                 f"; {segs or s.note}")
    g = gate_lines(h)
    if g:
        o += [""] + g
    return "\n".join(o) + "\n"


def _columns(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [headers, *rows]]


def charts(h: History) -> list[tuple[str, str, str, str]]:
    """(suite, workload, slug, svg) per suite, workload and figure; each level a line."""
    out = []
    groups: dict[tuple[str, str, str], list[Series]] = {}
    for s in h.series:
        groups.setdefault((s.suite, s.workload, s.figure), []).append(s)
    for (suite, wl, fig), ss in groups.items():
        keys = list(dict.fromkeys(p.key for s in ss for p in s.positions))
        numeric = h.by != TIME and all(p.x is not None for s in ss for p in s.positions)
        xs = {k: i for i, k in enumerate(keys)}
        lines = []
        for s in ss:
            pts = [svg.SPoint(p.x if numeric else xs[p.key], p.mean,  # type: ignore[arg-type]
                              err_lo=min(p.samples) if len(p.samples) > 1 else None,
                              err_hi=max(p.samples) if len(p.samples) > 1 else None) for p in s.positions]
            lines.append(svg.Series(_level(s) or fig, pts))
        marks = [((s.positions[c.at].x if numeric else xs[c.first]),
                  f"{(c.ratio - 1) * 100:+.0f}%" + (f" {_level(s)}" if len(ss) > 1 else ""))
                 for s in ss for c in s.changes]
        axis = ss[0].axis
        chart = svg.Chart(
            f"{suite}: {wl}, {fig}", h.by if numeric else ("run" if h.by == TIME else f"{h.by}"),
            f"{fig} ({unit(fig)})" if unit(fig) else fig, lines, x_categories=None if numeric else keys,
            y_zero=True, note=(f"lines: {axis} levels; dashed: change points (ratio after/before); bars: "
                               "min-max of repetitions, cut at the axis"), vmarks=marks,  # type: ignore[arg-type]
            y_fit_values=True)
        out.append((suite, wl, slug(fig), svg.render(chart)))
    return out


def _level(s: Series) -> str:
    if s.level == "-":
        return ""
    return s.level if s.axis == "level" else f"{s.axis}={s.level}"


def _runs_table(h: History) -> Table:
    return Table("Runs", ["#", "run", "suite", "made", "labels"],
                 [[str(i + 1), r.name, r.suite, _when(r.created), ", ".join(f"{k}={v}" for k, v in r.labels.items())]
                  for i, r in enumerate(h.runs)], ["r", "l", "l", "l", "l"])


def _change_table(h: History) -> Table:
    return Table("Change points", CHANGE_HEADERS, change_rows(h), ["l"] * 6 + ["r"] * 4 + ["l"],
                 [f"Method: {METHOD}", "ratio: mean after / mean before over the adjacent segments; "
                  "verdict by the figure's direction (throughput up is better, latency up is worse)."])


def html(h: History) -> str:
    title = f"fathom history: {', '.join(h.suites)}"
    o = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         '<meta name="viewport" content="width=device-width, initial-scale=1">',
         f"<title>{escape(title)}</title><style>{CSS}</style></head><body>", f"<h1>{escape(title)}</h1>",
         f'<p class="meta">Generated {escape(_when(time.time()))} by fathom: {len(h.runs)} runs {_by(h)}, '
         f"{len(h.series)} series.</p>"]
    o += [f'<p class="note">{escape(x)}</p>' for x in gate_lines(h)]
    rows = change_rows(h)
    o.append(table_html(_change_table(h), "h2") if rows else "<h2>Change points</h2><p>None found.</p>")
    made = charts(h)
    for suite in h.suites:
        o.append(f"<h2>{escape(suite)}</h2>")
        for wl in dict.fromkeys(w for s, w, _, _ in made if s == suite):
            o.append(f"<h3>{escape(wl)}</h3><div class=\"charts\">")
            o += [f'<figure data-chart="{escape(sl)}">{body}</figure>' for s, w, sl, body in made
                  if s == suite and w == wl]
            o.append("</div>")
    o.append(table_html(_runs_table(h), "h2"))
    o += [f'<p class="note">left out: {escape(x)}</p>' for x in h.left_out]
    o.append("</body></html>")
    return "\n".join(o)


def markdown(h: History, path: Path) -> tuple[str, dict[Path, str]]:
    files: dict[Path, str] = {}
    o = [f"# fathom history: {', '.join(h.suites)}", "",
         f"Generated {_when(time.time())} by fathom: {len(h.runs)} runs {_by(h)}, {len(h.series)} series.", ""]
    o += [f"{x}  " for x in gate_lines(h)] + [""]
    o.append(table_md(_change_table(h), "##") if change_rows(h) else "## Change points\n\nNone found.\n")
    made = charts(h)
    for suite in h.suites:
        o += [f"## {suite}", ""]
        for s, wl, sl, body in made:
            if s == suite:
                name = f"{path.stem}-{slug(suite)}-{slug(wl)}-{sl}.svg"
                files[path.parent / name] = body
                o += [f"![{suite} {wl} {sl}]({name})", ""]
    o.append(table_md(_runs_table(h), "##"))
    o += [f"left out: {x}  " for x in h.left_out]
    return "\n".join(o) + "\n", files


def write(h: History, out: Path) -> list[Path]:
    try:
        if out.suffix == ".md":
            body, files = markdown(h, out)
            out.write_text(body)
            for p, content in files.items():
                p.write_text(content)
            return [out, *files]
        if out.suffix not in (".html", ".htm"):
            raise FathomError(f"-o {out}: expected a .html or .md file")
        out.write_text(html(h))
        return [out]
    except OSError as exc:
        raise FathomError(f"cannot write {out}: {exc.strerror or exc}") from None
