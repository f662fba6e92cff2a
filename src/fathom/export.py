"""One row per point, as CSV, JSON or Parquet: identity, parameters, then METRIC_COLUMNS (units in the names).

Columns: run_id, run, suite, idx, key, workload, engine, rep, status, rw, bs
(bytes), iodepth, numjobs, rwmixread, runtime_s, ramp_s, target, pool, then every
metric of fathom.model.METRIC_COLUMNS (iops, bw_mib_s, total_ios, clat_ms,
clat_stdev_ms, p50/p90/p99/p999_ms, p99_all_ms, drain_s, the open-loop
offered_rate_ops_s, achieved_rate_ops_s, intended_ops, issued_ops, unissued_ops and
schedule_kept (empty in closed loop), usr_cpu, sys_cpu, ...), then for every daemon
kind of fathom.model.DAEMON_KINDS (osd, rgw, mds, mon, mgr, ganesha, fuse) its
{kind}_cpu (% of one core summed over the threads of all daemons of that kind),
{kind}_cores (the same in cores), {kind}_mem_mib (RSS MiB, summed) and
{kind}_ctx_switches_s (per second, summed), empty where the kind was not sampled;
then host_cpu_pct, engine_cpu_pct, started, ended (epoch s) and error.

Every metric's window (what span of time it covers) and source (merged histograms,
summed counts, sampled /proc) come with it: `dictionary()` (`fathom export
--columns`) and, in Parquet, each field's metadata (description, window, source).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from typing import Any

from fathom.model import METRIC_COLUMNS, figure_window, open_loop_metrics
from fathom.store import Store

ID_COLUMNS = ("run_id", "run", "suite", "idx", "key", "workload", "engine", "rep", "status")
PARAM_COLUMNS = {"rw": "rw", "bs": "bs", "iodepth": "iodepth", "numjobs": "numjobs", "rwmixread": "rwmixread",
                 "runtime": "runtime_s_planned", "ramp_time": "ramp_s", "target": "target", "pool": "pool"}
TAIL_COLUMNS = ("engine_cpu_pct", "started", "ended", "error")


def columns() -> list[str]:
    cols = [*ID_COLUMNS, *PARAM_COLUMNS.values(), *METRIC_COLUMNS, *TAIL_COLUMNS]
    return list(dict.fromkeys(cols))  # a metric may also be a tail column (engine_cpu_pct): once


DICTIONARY_COLUMNS = ["column", "meaning", "window", "source"]
_ID_MEANINGS = {"run_id": "the run's id in the store", "run": "the run's name", "suite": "the suite it ran",
                "idx": "the point's position in the run", "key": "the point's key (its parameters)",
                "workload": "the workload's name", "engine": "the load generator", "rep": "the repetition, from 1",
                "status": "done, failed or skipped", "engine_cpu_pct": METRIC_COLUMNS["engine_cpu_pct"],
                "started": "when the point started, epoch s", "ended": "when it ended, epoch s",
                "error": "why the point failed"}


def dictionary() -> list[dict[str, Any]]:
    """Every export column: its meaning, the window it covers and its source (empty for identity columns)."""
    out = []
    params = {v: k for k, v in PARAM_COLUMNS.items()}
    for c in columns():
        meaning = METRIC_COLUMNS.get(c) or _ID_MEANINGS.get(c) or f"the workload's {params.get(c, c)} parameter"
        window, source = figure_window(c) or ("", "")
        out.append({"column": c, "meaning": meaning, "window": window, "source": source})
    return out


def rows(store: Store, run_id: int) -> list[dict[str, Any]]:
    run = store.run(run_id)
    out = []
    for p in store.points(run_id):
        m = p["metrics"] or {}
        q = p["params"] or {}
        row: dict[str, Any] = {"run_id": run.id, "run": run.name, "suite": run.suite, "idx": p["idx"],
                               "key": p["key"], "workload": p["workload"], "engine": p["engine"],
                               "rep": _rep(p["key"]), "status": p["status"]}
        for k, col in PARAM_COLUMNS.items():
            row[col] = q.get(k)
        for k in (*METRIC_COLUMNS, "engine_cpu_pct"):
            row[k] = m.get(k)
        # points stored before intended_ops and issued_ops were metrics: from the schedule stored in the result
        sched = ((p["result"] or {}).get("extra") or {}).get("schedule")
        for k, v in open_loop_metrics(sched).items():
            if row.get(k) is None:
                row[k] = v
        row["started"], row["ended"], row["error"] = p["started"], p["ended"], p["error"]
        out.append(row)
    return out


def _rep(key: str) -> int:
    for part in key.split("/"):
        if part.startswith("rep="):
            return int(part[4:])
    return 1


def write(rs: list[dict[str, Any]], fmt: str, path: str | None, cols: list[str] | None = None) -> int:
    cols = cols or columns()
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in rs:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
        _emit(buf.getvalue(), path)
    elif fmt == "json":
        _emit(json.dumps([{k: r.get(k) for k in cols} for r in rs], indent=1) + "\n", path)
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"run_id": pa.int64(), "idx": pa.int64(), "rep": pa.int64(), "bs": pa.int64(),
                 "iodepth": pa.int64(), "numjobs": pa.int64(), "rwmixread": pa.int64(), "total_ios": pa.int64(),
                 "errors": pa.int64(), "intended_ops": pa.int64(), "issued_ops": pa.int64(),
                 "unissued_ops": pa.int64(), "schedule_kept": pa.bool_()}
        # text-valued metrics too (a float column would refuse "reached", "ok")
        strings = {"run", "suite", "key", "workload", "engine", "status", "rw", "target", "pool", "error",
                   "steady_state", "rgw_reconciled"}
        about = {d["column"]: d for d in dictionary()}
        fields = [pa.field(c, types.get(c, pa.string() if c in strings else pa.float64()),
                           metadata={k: about[c][k] for k in ("meaning", "window", "source") if about[c][k]})
                  for c in cols]
        schema = pa.schema(fields)
        data = {c: [_cast(r.get(c), schema.field(c).type) for r in rs] for c in cols}
        pq.write_table(pa.table(data, schema=schema), path)  # type: ignore[arg-type]
    else:
        raise ValueError(fmt)
    return len(rs)


def _cast(v: Any, t: Any) -> Any:
    import pyarrow as pa

    if v is None:
        return None
    if t == pa.int64():
        return int(v)
    if t == pa.float64():
        return float(v)
    if t == pa.bool_():
        return bool(v)
    return str(v)


def _emit(text: str, path: str | None) -> None:
    if path:
        with open(path, "w", newline="") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
