"""Markdown with pipe tables; charts are SVG files written next to the .md and linked."""

from __future__ import annotations

import re
from pathlib import Path

from fathom.report.doc import ReportDoc, Table


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def table_md(t: Table, heading: str = "###") -> str:
    out = [f"{heading} {t.title}", ""] if t.title else []
    if t.headers:
        out.append("| " + " | ".join(_cell(h) for h in t.headers) + " |")
        out.append("|" + "|".join("---:" if a == "r" else ":---" for a in t.align) + "|")
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
        out.append("")
    out += [f"*{_cell(n)}*" + "\n" for n in t.notes]
    return "\n".join(out)


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", s).strip("-") or "x"


def render(doc: ReportDoc, md_path: Path) -> tuple[str, dict[Path, str]]:
    """The Markdown text and the SVG files to write beside it (path -> content)."""
    stem = md_path.stem
    files: dict[Path, str] = {}
    o = [f"# {doc.title}", "", f"Generated {doc.generated} by fathom.", "", table_md(doc.runs_table, "##"),
         "## Summary", ""]
    o.append(table_md(Table("", doc.summary.headers, doc.summary.rows, doc.summary.align, doc.summary.notes))
             if doc.summary.rows else "No completed points with throughput.\n")
    o.append(table_md(doc.anomalies, "##") if doc.anomalies else "## Anomalies\n\nNone found by the rules below.\n")
    for s in doc.sections:
        o += [f"## {s.workload}", ""]
        for c in s.charts:
            name = f"{stem}-{slug(s.workload)}-{c.slug}.svg"
            files[md_path.parent / name] = c.svg
            o += [f"![{c.title}]({name})", ""]
        o += [table_md(t) for t in s.tables]
    o += ["## Environment", ""]
    for (name, rows), run in zip(doc.env, doc.runs):
        o += ["<details>", f"<summary>{name}</summary>", ""]
        if run.source:
            o += [f"**Source:** {run.source}", ""]
        o.append(table_md(Table("", ["key", "value"], [[k, v] for k, v in rows], ["l", "l"]))
                 if rows else "No environment recorded.\n")
        o += ["</details>", ""]
    o += ["## Definitions", ""] + [f"- {d}" for d in doc.definitions] + [""]
    return "\n".join(o), files
