"""The report's document model: tables of formatted cells, charts as SVG text, sections, the whole document.

Every section module (tables.py's generic ones, the studies', the timeline's) builds these; html.py and
markdown.py only lay them out, so both formats carry the same numbers. Nothing here imports a section.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fathom.analysis import anomalies as anom
from fathom.analysis.data import RunData, Throughput
from fathom.units import format_number

NA = "n/a"
INTENDED = "fault (intended)"  # the flag of a point with a `faults:` schedule


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    align: list[str]  # "l" or "r" per column
    notes: list[str] = field(default_factory=list)


@dataclass
class ChartOut:
    slug: str  # file-name part: "lat", "cpu", "eff"
    title: str
    svg: str


@dataclass
class Section:
    workload: str
    unit: str
    charts: list[ChartOut]
    tables: list[Table]
    anomalies: list[anom.Anomaly]


@dataclass
class ReportDoc:
    title: str
    generated: str
    runs: list[RunData]
    runs_table: Table
    summary: Table
    anomalies: Table | None
    sections: list[Section]
    definitions: list[str]
    env: list[tuple[str, list[tuple[str, str]]]]  # (run name, flattened key/value rows)


def fmt(v: float | None, kind: str = "g") -> str:
    """Numbers as the studies print them: IOPS and counts whole with separators, the rest 2 decimals."""
    if v is None:
        return NA
    if kind == "int":
        return f"{v:,.0f}"
    if kind == "pct":
        return f"{v:+.1f}%"
    if kind == "bw":
        return f"{v:,.2f}"
    return format_number(v)


def fmt_tp(v: float | None, tp: Throughput) -> str:
    if v is None:
        return NA
    return f"{v:,.0f} IOPS" if tp.unit == "IOPS" else f"{v:,.2f} MiB/s"
