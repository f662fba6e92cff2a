"""fathom.open: the notebook API against runs the real engine stored (null interface: no cluster, seconds).

Run `a` and `b` are one suite whose ops take a known time (delay_us: 2 ms in a, 8 ms in b, so b completes a
quarter of a's ops); `s1` is an SLO search. The API's frames must equal what `fathom export` writes, its
percentiles the stored ones, its compare and slo frames what the CLI and the store say, a read-only reader
must never hold up a writer, and the example notebook must run and print the store's figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import FATHOM, REPO, export_table, run_fathom

import fathom
from fathom.errors import FathomError
from fathom.results.store import Store

SUITE = """\
name: api-null
defaults: {{engine: fathom-engine, interface: null, runtime: 1s, ramp_time: 0.5s, bs: 4k, delay_us: {delay}}}
workloads:
  - {{name: rr, rw: randread}}
  - {{name: mix, rw: randrw, rwmixread: 70}}
sweep: {{iodepth: [1, 4]}}
"""
SLO = "name: api-slo\ndefaults: {engine: fathom-engine, interface: null, iodepth: 8, delay_us: 1000}\n" \
      "workloads:\n  - {name: s, rw: randread}\n"
NOTEBOOK = REPO / "docs" / "notebooks" / "fathom-api.ipynb"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, engine_ready: Path) -> Path:
    """Runs a, b and s1 in one store, made at once by three fathom processes (one store, several writers)."""
    d = tmp_path_factory.mktemp("api")
    path = d / "r.db"
    cmds = []
    for name, delay in (("a", 2000), ("b", 8000)):
        (d / f"{name}.yaml").write_text(SUITE.format(delay=delay))
        cmds.append([FATHOM, "run", str(d / f"{name}.yaml"), "--db", str(path), "--name", name])
    (d / "slo.yaml").write_text(SLO)
    cmds.append([FATHOM, "slo", str(d / "slo.yaml"), "--db", str(path), "--name", "s1", "--p99", "100ms",
                 "--from", "500", "--max", "1000", "--probe", "1s"])
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL) for c in cmds]
    for c, p in zip(cmds, procs):
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, f"{' '.join(c)}\n{err}"
    return path


def test_import_stays_light_and_the_api_is_versioned():
    code = ("import sys, fathom; from fathom import __version__ as v; import fathom.version as fv; "
            "assert 'pandas' not in sys.modules and 'fathom.api' not in sys.modules; "
            "assert v == fv.__version__ == fathom.__version__; print(fathom.API_VERSION); "
            "assert 'fathom.api' in sys.modules")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "1.0", p.stderr
    with pytest.raises(AttributeError):
        fathom.no_such_thing  # noqa: B018


def test_frames_equal_fathom_export(db, tmp_path):
    """Every table, as the API gives it, equals the Parquet file `fathom export` writes (same columns, dtypes,
    values); the new tables are the same rows in CSV, JSON and Parquet (conftest.export_table)."""
    tables = ("points", "intervals", "events", "servers", "counters", "runs")
    # the CLI's exports at once (a process each costs its start-up), every run's runs table the last
    cmds = [[FATHOM, "export", "a", "--db", str(db), "--table", t, "-o", str(tmp_path / f"{t}.parquet")]
            for t in tables]
    cmds.append([FATHOM, "export", "--db", str(db), "--table", "runs", "-o", str(tmp_path / "all-runs.parquet")])
    for p in [subprocess.Popen(c, stderr=subprocess.PIPE, text=True) for c in cmds]:
        assert p.wait(timeout=120) == 0, p.communicate()[1]
    with fathom.open(db) as res:
        for table in tables:
            pd.testing.assert_frame_equal(res.table(table, "a"), pd.read_parquet(tmp_path / f"{table}.parquet"),
                                          check_exact=True)
        pd.testing.assert_frame_equal(res.points("a"), res.table("points", "a"))
        export_table(db, "intervals", tmp_path, run="a")
        runs = res.runs()
        pd.testing.assert_frame_equal(runs, pd.read_parquet(tmp_path / "all-runs.parquet"))
        assert sorted(runs["run"]) == ["a", "b", "s1"] and set(runs["points_done"]) >= {4}
        assert list(res.points(None)["run"].unique()) == list(runs["run"])
        assert res.columns("intervals")["column"].tolist() == list(res.intervals("a").columns)

        pts, iv = res.points("a"), res.intervals("a")
    rr1 = pts[pts["key"] == "rr/iodepth=1"].iloc[0]
    assert 250 < rr1["iops"] <= 500  # one slot, 2 ms an op
    assert pts["iops"].dtype == "float64" and pts["total_ios"].dtype == "int64"
    assert {"read", "write"} == set(iv[iv["workload"] == "mix"]["op"])
    assert (iv["iops"] == iv["ops"] / iv["dt_s"]).all() and iv["ramp"].any() and not iv["ramp"].all()
    # the measured intervals count the ops completed in them, total_ios the ops issued after the ramp: the
    # ops in flight at the ramp's end are in the first and not the second (a known difference: docs/api.md)
    for _, p in pts.iterrows():
        mine = iv[(iv["idx"] == p["idx"]) & ~iv["ramp"]]
        assert 0 <= int(mine["ops"].sum()) - int(p["total_ios"]) <= p["iodepth"], p["key"]


def test_histogram_percentiles_are_the_stored_ones(db):
    with fathom.open(db) as res:
        pts = res.points("a")
        for _, p in pts.iterrows():
            h = res.histogram("a", int(p["idx"]))
            assert h.op == ("all" if p["workload"] == "mix" else "read")
            for q, col in ((50, "p50_ms"), (90, "p90_ms"), (99, "p99_ms"), (99.9, "p999_ms")):
                assert h.percentile(q) == pytest.approx(p[col], rel=1e-12), (p["key"], q)
            assert h.count == p["total_ios"]
            assert 2.0 <= h.percentile(50) < 20.0  # each op waits its 2 ms delay
            cdf = h.cdf()
            assert cdf["latency_ms"].is_monotonic_increasing and cdf["fraction"].iloc[-1] == 1.0
            assert int(cdf["cumulative"].iloc[-1]) == h.count
            # the CDF's first bucket at or above a fraction is that percentile
            for q in (50, 99, 99.99):
                assert cdf[cdf["cumulative"] >= -(-q * h.count // 100)]["latency_ms"].iloc[0] == h.percentile(q)
        mix = res.histogram("a", "mix/iodepth=4", op="read")
        reads = int(res.intervals("a").query("key == 'mix/iodepth=4' and op == 'read' and not ramp")["ops"].sum())
        assert 0 <= reads - mix.count <= 4 and mix.op == "read"  # as total_ios: the ramp's ops in flight
        with pytest.raises(FathomError, match="no point 'nope'"):
            res.histogram("a", "nope")
        with pytest.raises(FathomError, match="no trim histogram"):
            res.histogram("a", 0, op="trim")
        with pytest.raises(ValueError):
            mix.percentile(101)


def test_compare_and_slo_frames(db):
    with fathom.open(db) as res:
        cmp = res.compare("a", "b")
        levels = res.compare("a", "b", levels=True)
        probes = res.slo("s1")
        with pytest.raises(FathomError, match="not an SLO search"):
            res.slo("a")
        with pytest.raises(FathomError, match="no table"):
            res.table("nope", "a")
        with pytest.raises(FathomError, match="no run 'zz'"):
            res.points("zz")
    cli = json.loads(run_fathom("compare", "a", "b", "--db", str(db), "--format", "json", check=True).stdout)
    assert cmp["workload"].tolist() == [w["workload"] for w in cli["workloads"]] == ["rr", "mix"]
    assert cmp["ratio"].tolist() == [w["ratio"] for w in cli["workloads"]]
    assert cmp["verdict"].tolist() == [w["verdict"] for w in cli["workloads"]]
    # b's ops take 4 times as long: about a quarter of the throughput, beyond the one-trial factor of 2. On a
    # machine shared with the other test lane, a's iodepth-4 points lose more to scheduling than b's (1,215 ops/s
    # against the 2,000 its delay allows, seen once): the ratio is bounded by the verdict's factor, not by 1/4
    assert all(0.15 < r < 0.5 for r in cmp["ratio"]) and set(cmp["verdict"]) == {"worse"}
    assert cmp.attrs["unmatched"] == [] and "verdict" in cmp.attrs["definitions"]
    assert levels.groupby("workload")["iodepth"].apply(list).to_dict() == {"mix": [1, 4], "rr": [1, 4]}
    assert (levels["new_tp"] < levels["base_tp"] / 2).all()

    with Store(db) as st:
        found = st.run("s1").env["slo"]
    stored = found["result"]["probes"]
    assert probes["load"].tolist() == [pr["load"] for pr in stored] == [500, 1000]
    assert probes["outcome"].tolist() == [pr["outcome"] for pr in stored] == ["meets", "meets"]
    assert probes["p99_ms"].tolist() == [pr["obs"]["percentiles"]["p99"][0] for pr in stored]
    assert all(1.0 <= v < 100 for v in probes["p99_ms"])  # 1 ms delay, under the 100 ms target
    assert (probes["p99_lo_ms"] <= probes["p99_ms"]).all() and (probes["p99_ms"] <= probes["p99_hi_ms"]).all()
    assert probes.attrs["status"] == found["result"]["status"] and probes.attrs["load"] == found["result"]["load"]
    assert probes.attrs["targets"]["latency_ms"] == {"p99": 100.0}


WRITER = """
import sys, time
from fathom.results.store import Store
db, n = sys.argv[1], int(sys.argv[2])
with Store(db, busy_timeout_s=0.5) as st:  # held up longer than 0.5 s: StoreBusyError, a non-zero exit
    run = st.create_run("w", kind="bench")
    print("started", flush=True)
    worst = 0.0
    for i in range(n):
        t0 = time.monotonic()
        st.record_point(run, i, f"p{i}", "w", "fathom-engine", {"iodepth": 1}, "done", metrics={"iops": float(i)},
                        intervals=[{"ts": time.time(), "t": 1.0, "dt": 1.0, "ops": {"read": {"ops": 1}}}])
        worst = max(worst, time.monotonic() - t0)
        time.sleep(0.01)
    st.finish_run(run, "done")
print(f"worst {worst:.4f}", flush=True)
"""


def test_a_reader_never_blocks_the_writer_nor_changes_the_file(db, tmp_path):
    """A notebook reading a store another process writes: the writer's every write goes through at once
    (its busy timeout is 0.5 s), the reader sees the points finished so far, and a read-only open of a store
    nobody writes leaves its bytes as they were and cannot write."""
    live = tmp_path / "live.db"
    Store(live).close()
    w = subprocess.Popen([sys.executable, "-c", WRITER, str(live), "150"], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert w.stdout is not None and w.stdout.readline().strip() == "started"
    seen = []
    with fathom.open(live) as res:
        while w.poll() is None:
            seen.append(len(res.points("w")))
            res.intervals("w")
    out = w.communicate(timeout=60)[0]
    assert w.returncode == 0, out
    assert float(out.split()[-1]) < 0.5
    assert len(set(seen)) > 3 and seen == sorted(seen)  # read while it wrote, a growing run
    with fathom.open(live) as res:
        assert len(res.points("w")) == 150

    digest = hashlib.sha256(Path(db).read_bytes()).hexdigest()
    with fathom.open(db) as res:
        res.points(None), res.intervals("a"), res.histogram("a", 0).cdf(), res.compare("a", "b")
        with pytest.raises(Exception, match="readonly"):
            res._store.create_run("x")
    assert hashlib.sha256(Path(db).read_bytes()).hexdigest() == digest
    with pytest.raises(FathomError, match="no results store"):
        fathom.open(tmp_path / "missing.db")


def test_the_example_notebook_prints_the_stores_figures(db, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("FATHOM_DB", str(db))
    monkeypatch.setenv("FATHOM_RUN", "a")
    monkeypatch.setenv("FATHOM_BASE", "b")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # committed without outputs
    t0 = time.monotonic()
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    took = time.monotonic() - t0
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outs if o.output_type == "stream")
    assert not [o for o in outs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outs) == 2, text  # the curve and the CDF

    with Store(db) as st:
        run = st.run("a")
        first = st.points(run.id)[0]
    m = re.search(r"IOPS of point 0 \(rr/iodepth=1\): ([\d.]+)", text)
    assert m and m.group(1) == f"{first['metrics']['iops']:.1f}", text
    m = re.search(r"p99 ([\d.]+) ms \(stored p99_ms ([\d.]+)\)", text)
    assert m and m.group(1) == m.group(2) == f"{first['metrics']['p99_ms']:.6f}", text
    with fathom.open(db) as res:
        cmp = res.compare("b", "a")
    for _, w in cmp.iterrows():
        assert f"{w['workload']}: a / b peak {w['unit']} ratio {w['ratio']:.3f}, {w['verdict']}" in text
    assert took < 60
