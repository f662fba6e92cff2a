"""Export: one row per point, the study's columns with units in their names, CSV/JSON/Parquet agree."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
from conftest import run_fathom

from fathom.results import export, model, usage
from fathom.results.model import METRIC_COLUMNS, OpStats, PointResult, base_metrics
from fathom.results.store import Store


def make_db(path):
    with Store(path) as st:
        old = st.create_run("old", suite="osd-classic")
        st.record_point(old, 0, "x", "x", "fio", {"rw": "read", "bs": 4096, "iodepth": 1, "numjobs": 1}, "done",
                        metrics={"iops": 1.0})
        run = st.create_run("new", suite="osd-classic")
        for i, depth in enumerate((1, 8)):
            r = PointResult(engine="fio", runtime_s=2.0, client_user_s=0.2, client_sys_s=0.1, wall_s=3.0,
                            ops={"read": OpStats(ops=2000 * depth, bytes=2000 * depth * 65536, runtime_s=2.0,
                                                 lat_mean_ns=1.5e6, lat_stdev_ns=0.5e6,
                                                 percentiles_ns={"p50": 1e6, "p90": 2e6, "p99": 3e6,
                                                                 "p999": 4e6})})
            m = base_metrics(r)
            m.update(osd_cpu=150.0, osd_mem_mib=512.0, usr_cpu=12.5, sys_cpu=7.5, rgw_cpu=40.0, rgw_cores=0.4,
                     rgw_mem_mib=200.0, rgw_ctx_switches_s=900.0, mds_mem_mib=30.0)
            st.record_point(run, i, f"seqread64k/iodepth={depth}", "seqread64k", "fio",
                            {"rw": "read", "bs": 65536, "iodepth": depth, "numjobs": 4, "runtime": 2.0,
                             "ramp_time": 1.0, "target": "rbd", "pool": "rbd"}, "done", metrics=m)
    return run


def test_rows_and_units(tmp_path):
    db = tmp_path / "e.db"
    run = make_db(db)
    with Store(db) as st:
        rows = export.rows(st, run)
    assert len(rows) == 2
    r = rows[1]
    assert (r["workload"], r["iodepth"], r["numjobs"], r["bs"], r["rw"]) == ("seqread64k", 8, 4, 65536, "read")
    assert r["iops"] == 8000.0 and r["total_ios"] == 16000
    assert r["bw_mib_s"] == 8000 * 65536 / 2**20 == 500.0  # MiB/s
    assert r["clat_ms"] == 1.5 and r["clat_stdev_ms"] == 0.5 and r["p99_ms"] == 3.0 and r["p999_ms"] == 4.0
    assert (r["osd_cpu"], r["osd_mem_mib"], r["usr_cpu"], r["sys_cpu"]) == (150.0, 512.0, 12.5, 7.5)
    cols = export.columns()
    assert all(c in cols for c in METRIC_COLUMNS) and cols.index("workload") < cols.index("iops")


def test_cli_formats_agree(tmp_path):
    db = tmp_path / "e.db"
    make_db(db)
    run_fathom("export", "--db", str(db), "--format", "csv", "-o", str(tmp_path / "e.csv"), check=True)
    run_fathom("export", "--db", str(db), "-o", str(tmp_path / "e.parquet"), check=True)  # format from suffix
    js = json.loads(run_fathom("export", "--db", str(db), "--format", "json", check=True).stdout)
    rows = list(csv.DictReader((tmp_path / "e.csv").open()))
    table = pq.read_table(tmp_path / "e.parquet").to_pylist()
    assert len(rows) == len(js) == len(table) == 2  # latest run by default
    assert rows[1]["iops"] == "8000.0" and js[1]["iops"] == 8000.0 and table[1]["iops"] == 8000.0
    assert table[1]["iodepth"] == 8 and table[1]["p50_ms"] == 1.0
    assert list(rows[0].keys()) == export.columns() == list(js[0].keys()) == list(table[0].keys())
    old = json.loads(run_fathom("export", "old", "--db", str(db), "--format", "json", check=True).stdout)
    assert len(old) == 1 and old[0]["run"] == "old"
    p = run_fathom("export", "--db", str(tmp_path / "none.db"), "--format", "csv")
    assert p.returncode != 0 and "no results store" in p.stderr and "Traceback" not in p.stderr
    p = run_fathom("export", "nope", "--db", str(db))
    assert p.returncode != 0 and "no run 'nope'" in p.stderr
    # every figure says what window it covers and where it comes from: in the dictionary and in Parquet
    about = {d["column"]: d for d in json.loads(run_fathom("export", "--columns", "--format", "json",
                                                           check=True).stdout)}
    assert list(about) == export.columns()
    assert "merged latency histograms" in about["p99_ms"]["source"] and "ramp" in about["p99_ms"]["window"]
    assert "telemetry window" in about["osd_cpu"]["window"] and "telemetry window" in about["rgw_mem_mib"]["window"]
    assert "measured phase" in about["client_cpu_us_per_op"]["window"]
    assert all(about[c]["window"] for c in METRIC_COLUMNS if c not in ("client_hosts", "engines", "start_skew_ms",
                                                                       "clients_lost"))
    meta = pq.read_schema(tmp_path / "e.parquet").field("p99_ms").metadata
    assert meta[b"source"].decode() == about["p99_ms"]["source"]


def test_every_daemon_kind_has_its_columns(tmp_path):
    cols = export.columns()
    daemon = [c for kind in model.DAEMON_KINDS for c in model.daemon_columns(kind)]
    assert len(daemon) == 4 * len(model.DAEMON_KINDS) and all(c in METRIC_COLUMNS for c in daemon)
    i = cols.index("osd_cpu")  # after the client metrics, kind by kind, then host and engine CPU
    assert cols[i:i + len(daemon)] == daemon and cols.index("usr_cpu") < i
    assert cols[i + len(daemon):i + len(daemon) + 5] == ["host_cpu_pct", "engine_cpu_pct", "bound", "bound_use_pct",
                                                         "started"]
    db = tmp_path / "e.db"
    make_db(db)
    run_fathom("export", "--db", str(db), "--format", "csv", "-o", str(tmp_path / "e.csv"), check=True)
    run_fathom("export", "--db", str(db), "-o", str(tmp_path / "e.parquet"), check=True)
    js = json.loads(run_fathom("export", "--db", str(db), "--format", "json", check=True).stdout)
    with (tmp_path / "e.csv").open() as f:
        c = next(csv.DictReader(f))
    j, q = js[0], pq.read_table(tmp_path / "e.parquet").to_pylist()[0]
    assert (c["rgw_cpu"], c["rgw_cores"], c["rgw_mem_mib"]) == ("40.0", "0.4", "200.0")
    assert c["rgw_ctx_switches_s"] == "900.0"
    assert (j["rgw_cpu"], j["mds_mem_mib"], q["rgw_mem_mib"], q["mds_mem_mib"]) == (40.0, 30.0, 200.0, 30.0)
    # kinds that were not sampled are empty, never 0
    assert c["mon_cpu"] == "" and j["mon_cpu"] is None and q["mgr_mem_mib"] is None and q["mds_cpu"] is None


def test_open_loop_counts_are_exported_in_every_format(tmp_path):
    """intended_ops and issued_ops beside unissued_ops: what the schedule asked, what was issued, what was not,
    summed over engines; empty in closed loop; from the stored schedule for points stored before they were
    metrics."""
    cols = export.columns()
    i = cols.index("offered_rate_ops_s")
    assert cols[i:i + 6] == ["offered_rate_ops_s", "achieved_rate_ops_s", "intended_ops", "issued_ops",
                             "unissued_ops", "schedule_kept"]
    about = {d["column"]: d for d in export.dictionary()}
    assert about["issued_ops"]["window"] == about["unissued_ops"]["window"] != ""
    assert "intended" in about["intended_ops"]["meaning"] and "issued" in about["issued_ops"]["meaning"]
    sched = {"rate": 800.0, "arrival": "poisson", "offered_rate": 800.0, "intended_ops": 3200, "issued_ops": 3100,
             "unissued_ops": 100, "achieved_rate": 760.0, "schedule_kept": False, "ops": 3100}
    r = PointResult(engine="fathom-engine", runtime_s=4.0, ops={"read": OpStats(ops=3040, bytes=3040 * 4096,
                                                                                runtime_s=4.0)},
                    extra={"schedule": sched})
    m = base_metrics(r)
    assert (m["intended_ops"], m["issued_ops"], m["unissued_ops"]) == (3200, 3100, 100)
    db = tmp_path / "e.db"
    with Store(db) as st:
        run = st.create_run("open", suite="s")
        params = {"rw": "randread", "bs": 4096, "iodepth": 4, "numjobs": 1, "rate": 800.0}
        st.record_point(run, 0, "a/rate=800", "a", "fathom-engine", params, "done", metrics=m)
        old = {k: v for k, v in m.items() if k not in ("intended_ops", "issued_ops")}  # stored before
        st.record_point(run, 1, "b/rate=800", "b", "fathom-engine", params, "done", metrics=old,
                        result={"extra": {"schedule": sched}})
        closed = base_metrics(PointResult(engine="fathom-engine", runtime_s=4.0, ops={"read": OpStats(
            ops=10, bytes=40960, runtime_s=4.0)}))
        st.record_point(run, 2, "c", "c", "fathom-engine", params, "done", metrics=closed)
    run_fathom("export", "--db", str(db), "--format", "csv", "-o", str(tmp_path / "e.csv"), check=True)
    run_fathom("export", "--db", str(db), "-o", str(tmp_path / "e.parquet"), check=True)
    js = json.loads(run_fathom("export", "--db", str(db), "--format", "json", check=True).stdout)
    rows = list(csv.DictReader((tmp_path / "e.csv").open()))
    table = pq.read_table(tmp_path / "e.parquet").to_pylist()
    for got in (js, table):
        assert [(x["intended_ops"], x["issued_ops"], x["unissued_ops"]) for x in got] == [
            (3200, 3100, 100), (3200, 3100, 100), (None, None, None)]
    assert [(x["intended_ops"], x["issued_ops"]) for x in rows] == [("3200", "3100"), ("3200", "3100"), ("", "")]


def test_long_tables_name_their_columns_and_units(tmp_path):
    """The servers and counters tables: each column's meaning (also without a run), counter units by name, and no
    rows for a run without samples or counters (the points export is unchanged by them)."""
    assert export.table_columns("points") == export.columns()
    for table in ("servers", "counters"):
        cols = export.table_columns(table)
        assert cols[:len(export.ID_COLUMNS)] == list(export.ID_COLUMNS)
        assert {"host", "daemon", "figure", "value", "unit"} <= set(cols)
        about = json.loads(run_fathom("export", "--table", table, "--columns", "--format", "json",
                                      check=True).stdout)
        assert [d["column"] for d in about] == cols and all(d["meaning"] for d in about)
    assert export.counter_unit("osd.op_w") == "count" and export.counter_unit("osd.op_w_in_bytes") == "bytes"
    assert export.counter_unit("osd.op_r_outb") == "bytes" and export.counter_unit("osd.op_w_inb") == "bytes"
    assert export.counter_unit("osd.op_w_latency", "sum") == "s" == export.counter_unit("bluestore.commit_lat", "avg")
    assert export.counter_unit("osd.op_w_latency", "count") == "count"
    assert export.counter_unit("osd.op_before_queue_op_lat", "avg") == "s"
    assert export.counter_unit("bluestore.translated", "avg") == "count/event"
    db = tmp_path / "e.db"
    make_db(db)
    for table in ("servers", "counters"):
        p = run_fathom("export", "--db", str(db), "--table", table, check=True)
        assert p.stdout.splitlines() == [",".join(export.table_columns(table))]
    assert "per host" not in run_fathom("show", "--db", str(db), check=True).stdout


def test_a_daemon_whose_figures_sum_several_processes_is_marked_in_the_export_and_show(tmp_path):
    """Two processes named mon.a on a host, neither with the pid the cluster gives (another cluster's beside it): the
    sampler counts both and its sources event says so; `export --table servers` and `show` mark the sum."""
    db = tmp_path / "a.db"
    with Store(db) as st:
        run = st.create_run("r")
        t0 = 1000.0
        samples = [{"ts": t0 + i, "dt": 1.0, "source": name, "kind": kind, "pid": pid, "cpu_pct": 10.0,
                    "rss_mib": 100.0, "host": "h1", "via": "ssh"}
                   for i in range(1, 4) for name, kind, pid in (("mon.a", "mon", 7), ("osd.0", "osd", 8))]
        samples += [{"ts": t0 + i, "dt": 1.0, "source": "host", "kind": "host", "pid": None, "cpu_pct": 20.0,
                     "host": "h1", "via": "ssh"} for i in range(1, 4)]
        r = PointResult(engine="fathom-engine", runtime_s=3.0,
                        ops={"read": OpStats(ops=10, bytes=40960, runtime_s=3.0)})
        sources = {"kind": "sources", "message": "server hosts", "data": {"hosts": {"h1": {"ambiguous": ["mon.a"]}}}}
        m, _ = usage.point_metrics(r, {"ramp_time": 0}, samples, t0, t0 + 3.0, [], [sources])
        assert r.extra["server_hosts"]["h1"]["ambiguous"] == ["mon.a"]
        st.record_point(run, 0, "w", "w", "fathom-engine", {"ramp_time": 0}, "done", metrics=m,
                        result=r.to_dict(), started=t0, ended=t0 + 3.0, telemetry=samples, events=[sources])
    with Store(db) as st:
        rows = export.server_rows(st, run)
    assert {row["daemon"] for row in rows if row["summed"]} == {"mon.a"}
    assert not any(row["summed"] for row in rows if row["daemon"] in ("osd.0", ""))
    show = json.loads(run_fathom("show", "r", "--db", str(db), "--json", check=True).stdout)
    (h,) = [h for h in show["hosts"] if h["host"] == "h1"]
    assert h["daemons"] == ["mon.a (summed)", "osd.0"], h
