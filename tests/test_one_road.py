"""One road for each thing: the report's anomaly rules come from a constant (not a docstring, which `python -OO`
strips), a report build runs the anomaly rules once per run and workload, and only the results store writes SQL
on the live_seconds table (pure: no engine, no cluster)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fathom.analysis import anomalies as anom
from fathom.analysis import compare
from fathom.analysis.data import RunData, StoredPoint
from fathom.report import tables

SRC = Path(__file__).resolve().parent.parent / "src" / "fathom"
RULE_NAMES = ("collapse", "short_window", "osd_cpu_dropout", "stopped_early", "health", "client_bound", "host_busy",
              "schedule_not_kept", "long_drain", "server_lost")


def test_report_tables_import_without_docstrings_and_name_the_rules():
    code = ("from fathom.report import tables\n"
            "print(next(d for d in tables.DEFINITIONS if d.startswith('Anomaly rules')))")
    done = subprocess.run([sys.executable, "-OO", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in RULE_NAMES:
        assert name in done.stdout, name
    assert all(r.split(":", 1)[0] in done.stdout for r in anom.RULES)


def _point(run_id: int, wl: str, qd: int, iops: float, **metrics: Any) -> StoredPoint:
    return StoredPoint(run="r", run_id=run_id, workload=wl, engine="fio", status="done", point_id=run_id * 100 + qd,
                       params={"iodepth": qd, "numjobs": 1, "rw": "randread", "bs": "4k"},
                       metrics={"iops": iops, "clat_ms": qd / iops * 1000, "osd_cpu": 100.0 + qd, "runtime_s": 60.0,
                                "total_ios": iops * 60, **metrics})


def _run(name: str, run_id: int) -> RunData:
    # a collapsed point and a busy host, so the summary, detail table, charts and anomaly table all have flags
    pts = [_point(run_id, wl, qd, x, host_cpu_pct=97.0 if qd == 4 else 10.0)
           for wl in ("rr", "rw") for qd, x in ((1, 1000.0), (2, 1900.0), (4, 3500.0), (8, 300.0))]
    return RunData(name, [run_id], "suite", "done", None, {}, None, pts, [])


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """anomalies.find's calls, counted per (run, workload)."""
    counted: Counter[tuple[str, str]] = Counter()
    real = anom.find

    def counting(run: RunData, workload: str, *args: Any, **kw: Any) -> list[anom.Anomaly]:
        counted[(run.name, workload)] += 1
        return real(run, workload, *args, **kw)

    monkeypatch.setattr(anom, "find", counting)
    return counted


def test_a_report_build_finds_each_runs_anomalies_once_per_workload(calls: Counter[tuple[str, str]]):
    doc = tables.build([_run("a", 1), _run("b", 2)])
    assert calls == {(r, w): 1 for r in ("a", "b") for w in ("rr", "rw")}
    # the one result reaches every place that shows it
    assert {a.kind for s in doc.sections for a in s.anomalies} == {"collapse", "host_busy"}
    summary = {(row[0], row[1]): row[-1] for row in doc.summary.rows}
    assert summary[("rr", "a")] == "2 (at peak: host_busy)"
    detail = next(t for s in doc.sections if s.workload == "rr" for t in s.tables if t.title == "rr: a")
    assert [row[-1] for row in detail.rows] == ["", "", "host_busy", "collapse"]
    assert doc.anomalies is not None and len(doc.anomalies.rows) == 8


def test_a_comparison_finds_each_runs_anomalies_once_per_workload(calls: Counter[tuple[str, str]]):
    c = compare.compare(_run("a", 1), [_run("b", 2), _run("c", 3)])
    assert calls == {(r, w): 1 for r in ("a", "b", "c") for w in ("rr", "rw")}  # the base was found twice per new
    assert {a.kind for a in c.anomalies} == {"collapse", "host_busy"} and len(c.anomalies) == 12


# a statement on the table: what SQL says before a table's name (upper case, as every statement of fathom's is)
LIVE_SQL = re.compile(r"\b(?:INTO|FROM|UPDATE|JOIN|TABLE|EXISTS|ON)\s+live_seconds\b")
SCHEMA_OWNERS = {Path("results/store.py"), Path("results/migrate.py")}


def _strings(path: Path) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_only_the_store_writes_sql_on_live_seconds():
    found = {p.relative_to(SRC) for p in SRC.rglob("*.py") if any(LIVE_SQL.search(s) for s in _strings(p))}
    assert found == SCHEMA_OWNERS, found - SCHEMA_OWNERS
