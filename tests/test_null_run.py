"""A whole suite on the null interface, with no cluster at all: runner, store, export and report.

fathom-engine's null target does no I/O, so this exercises every stage of the
data flow (spec, plan, runner with its companions, the engine's records, the
store, export, report) in a few seconds and without Ceph. It also proves that
a run whose workloads need no cluster starts none.
"""

from __future__ import annotations

import asyncio

import csv
import json
import re
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import FATHOM, run_fathom

from fathom.companion import Companion, Contribution
from fathom.results.store import Store

SUITE = """\
name: null-sweep
description: "the engine's own overhead, no storage behind it"
defaults: {engine: fathom-engine, interface: null, runtime: 2s, ramp_time: 0.5s, bs: 4k}
workloads:
  - {name: rr, rw: randread}
  - {name: mix, rw: randrw, rwmixread: 70, numjobs: 2}
sweep: {iodepth: [1, 8]}
"""


def test_null_suite_end_to_end_without_a_cluster(tmp_path, engine_ready):
    suite = tmp_path / "null.yaml"
    suite.write_text(SUITE)
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), timeout=180)
    assert p.returncode == 0, p.stderr
    assert "starting a disposable local cluster" not in p.stderr  # nothing needed one

    with Store(db) as st:
        run = st.run("latest")
        assert run.status == "done" and run.env["cluster"]["kind"] == "none"
        points = st.points(run.id)
        assert [pt["key"] for pt in points] == ["rr/iodepth=1", "rr/iodepth=8", "mix/iodepth=1", "mix/iodepth=8"]
        for pt in points:
            m = pt["metrics"]
            assert pt["status"] == "done" and m["iops"] > 0 and m["total_ios"] > 0, pt
            assert m["p99_ms"] is not None and m["client_cpu_us_per_op"] > 0
            assert pt["result"]["stopped_early"] is False
            intervals = st.intervals(pt["id"])
            assert len([i for i in intervals if not i.get("ramp")]) >= 1
            assert all("cpu" in i for i in intervals)  # the engine's own CPU rides with every interval
            hists = st.histograms(pt["id"])
            if pt["workload"] == "mix":
                # read and write of the mix, and their exact merge
                assert {"read", "write", "all"} <= set(hists), hists.keys()
                assert m["read_iops"] > m["write_iops"] > 0
            else:
                assert set(hists) == {"read"}

    out = tmp_path / "points.csv"
    run_fathom("export", "latest", "--db", str(db), "--format", "csv", "-o", str(out), check=True)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and all(float(r["iops"]) > 0 for r in rows)

    js = tmp_path / "points.json"
    run_fathom("export", "latest", "--db", str(db), "--format", "json", "-o", str(js), check=True)
    assert len(json.loads(js.read_text())) == 4

    for ext in ("html", "md"):
        rep = tmp_path / f"report.{ext}"
        run_fathom("report", "latest", "--db", str(db), "-o", str(rep), check=True)
        text = rep.read_text()
        assert "null-sweep" in text and "rr" in text and "mix" in text


def test_delay_us_is_a_workload_field_and_a_sweep_axis(tmp_path, engine_ready):
    """null's delay_us reaches the engine: one slot with 20 ms per op completes about 50 ops/s."""
    suite = tmp_path / "delay.yaml"
    suite.write_text("name: delay\ndefaults: {engine: fathom-engine, interface: null, runtime: 2s, iodepth: 1}\n"
                     "workloads:\n  - {name: rr, rw: randread}\nsweep: {delay_us: [0, 20000]}\n")
    db = tmp_path / "d.db"
    p = run_fathom("run", str(suite), "--db", str(db), timeout=120)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        points = st.points(st.run("latest").id)
    assert [pt["key"] for pt in points] == ["rr/delay_us=0", "rr/delay_us=20000"]
    instant, delayed = (pt["metrics"] for pt in points)
    assert delayed["p50_ms"] >= 20.0 and instant["p50_ms"] < 1.0
    assert delayed["iops"] <= 50.0 < instant["iops"]  # one slot: at most 1 / 20 ms


def _engine_child(parent: int) -> int | None:
    """The fathom-engine process a fathom run has started, by its parent pid."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"fathom-engine" in cmd:
            return int(proc.name)
    return None


def test_ctrl_c_keeps_the_interrupted_points_summary(tmp_path, engine_ready):
    """SIGINT mid-point: the engine is told to stop, drains, and its summary (full histograms) is stored."""
    suite = tmp_path / "null.yaml"
    suite.write_text(SUITE.replace("runtime: 2s", "runtime: 60s"))
    db = tmp_path / "r.db"
    proc = subprocess.Popen([FATHOM, "run", str(suite), "--db", str(db)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        engine = None
        while engine is None and time.monotonic() < deadline:
            engine = _engine_child(proc.pid)
            time.sleep(0.1)
        assert engine is not None, "the engine never started"
        time.sleep(2.0)  # past the ramp: measured ops exist
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    with Store(db) as st:
        run = st.run("latest")
        assert run.status == "interrupted"
        pt = st.points(run.id)[0]
        assert pt["status"] == "interrupted"
        assert pt["result"]["stopped_early"] is True and "interrupted" in pt["result"]["stop_reason"]
        assert pt["result"]["extra"]["stop"] == "control"  # a clean stop through the control channel
        assert pt["metrics"]["total_ios"] > 0 and pt["metrics"]["p99_ms"] is not None
        assert "read" in st.histograms(pt["id"])
    with pytest.raises(ProcessLookupError):
        os.kill(engine, 0)  # no load left running


class StopAfter(Companion):
    """A companion that asks the point to stop after n intervals, as a steady-state watch will (on_child:
    the protocol's no-op default)."""

    def __init__(self, n: int):
        self.n, self.seen, self.live = n, 0, None

    def start(self, live) -> None:
        self.live = live

    def on_interval(self, rec) -> None:
        self.seen += 1
        if self.seen == self.n:
            self.live.request_stop("settled (test companion)")

    def stop(self):
        return Contribution(events=[{"kind": "companion", "message": f"saw {self.seen} intervals"}])


def test_a_companion_ends_the_point_through_the_control_channel(tmp_path, engine_ready):
    from fathom.suite import plan, spec
    from fathom.run import point
    from fathom.interfaces.base import PointContext

    pts = plan.expand(spec.parse(SUITE.replace("runtime: 2s", "runtime: 120s"), "null.yaml"))
    with Store(tmp_path / "r.db") as st:
        run_id = st.create_run("companion")
        ctx = PointContext(conn=None, pool=None, images=[], run_tag="t", workdir=tmp_path, timeout=300)
        out = point.run_point(st, run_id, pts[0], ctx, [StopAfter(3)], ceph=None, gate_timeout=1)
        assert out.status == "done" and out.error is None
        pt = st.points(run_id)[0]
        res = pt["result"]
        assert res["extra"]["stop"] == "control" and res["stop_reason"] == "settled (test companion)"
        assert res["runtime_s"] < 60  # stopped long before its 120 s
        assert pt["metrics"]["total_ios"] > 0
        kinds = [e["kind"] for e in st.events(run_id)]
        assert "companion" in kinds and "stop" in kinds


@pytest.mark.parametrize("engines", [1, 2])
def test_a_point_whose_engines_stopped_on_their_own_is_not_done(tmp_path, engine_ready, monkeypatch, engines):
    """Engines that hear no heartbeat stop themselves (`orchestrator_lost`) long before their runtime: the point
    is stored failed with the reason, never done (one engine, and a group of two on this host)."""
    from fathom.engines import fathom_engine
    from fathom.engines import group as group_mod
    from fathom.engines.clients import Clients
    from fathom.hosts.clients import ClientHost, ClientsSpec
    from fathom.interfaces.base import PointContext
    from fathom.run import point
    from fathom.suite import plan, spec

    async def silent(self: group_mod.Group) -> None:  # the one supervisor of every engine sends no heartbeat
        await asyncio.sleep(3600)

    monkeypatch.setattr(group_mod.Group, "_heartbeats", silent)
    monkeypatch.setattr(fathom_engine, "HEARTBEAT_TIMEOUT_S", 2.0)  # one engine's own timeout
    monkeypatch.setattr(group_mod, "HEARTBEAT_TIMEOUT_S", 2.0)  # a group's
    pts = plan.expand(spec.parse(SUITE.replace("runtime: 2s", "runtime: 60s"), "null.yaml"))
    clients = Clients(ClientsSpec(hosts=[ClientHost(host="local", instances=2)])) if engines > 1 else None
    with Store(tmp_path / "r.db") as st:
        run_id = st.create_run("lost")
        ctx = PointContext(conn=None, pool=None, images=[], run_tag="t", workdir=tmp_path, timeout=300,
                           clients=clients)
        out = point.run_point(st, run_id, pts[0], ctx, [], ceph=None, gate_timeout=1)
        pt = st.points(run_id)[0]
        assert out.status == pt["status"] == "failed", (out.status, out.error)
        assert "heartbeats stopped" in pt["error"], pt["error"]
        assert any(e["kind"] == "error" and "heartbeats stopped" in e["message"] for e in st.events(run_id))


def test_an_early_end_nobody_asked_for_is_named():
    """point.ended_early: an engine's own early stop fails the point, a stop asked for (steady state, the user) or
    a cap reached does not; an unexplained measured time far short of the runtime does."""
    from fathom.results.model import PointResult
    from fathom.run.point import ended_early
    from fathom.suite import plan, spec

    pt = plan.expand(spec.parse(SUITE.replace("runtime: 2s", "runtime: 40s"), "null.yaml"))[0]

    def res(stop, measured, engines=None):
        extra = {"stop": stop} if engines is None else {"engines": engines}
        return PointResult(engine="fathom-engine", ops={}, runtime_s=measured, extra=extra,
                           stop_reason="the orchestrator's heartbeats stopped" if stop == "orchestrator_lost" else None)

    assert "orchestrator_lost" in ended_early(res("orchestrator_lost", 6.0), pt, None)
    assert "orchestrator_lost" in ended_early(res("orchestrator_lost", 6.0), pt, "steady")  # never asked for
    assert ended_early(res("control", 6.0), pt, "steady") is None
    assert ended_early(res("duration", 40.0), pt, None) is None
    assert ended_early(res("done", 6.0), pt, None) is None  # an object set read once
    assert "measured 6.0 s of its 40 s" in ended_early(res(None, 6.0), pt, None)
    two = [{"stop": "duration", "lost": None}, {"stop": "orchestrator_lost", "lost": None}]
    assert "orchestrator_lost" in ended_early(res(None, 40.0, two), pt, None)
    two[1]["lost"] = "ssh keepalives failed"  # a lost host under `continue`: flagged, the point stays done
    assert ended_early(res(None, 40.0, two), pt, None) is None


def test_compare_repeat_json_keeps_stdout_for_the_json(tmp_path, engine_ready):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE.replace("runtime: 2s, ramp_time: 0.5s", "runtime: 1s, ramp_time: 0s")
                     .replace("  - {name: mix, rw: randrw, rwmixread: 70, numjobs: 2}\n", "")
                     .replace("[1, 8]", "[1]"))
    p = run_fathom("compare", str(suite), str(suite), "--repeat", "1", "--format", "json",
                   "--db", str(tmp_path / "r.db"), timeout=180)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)  # the trials' progress went to stderr, so stdout parses whole
    assert [w["workload"] for w in got["workloads"]] == ["rr"]
    assert "trial 1/1" in p.stderr


def test_every_planned_point_is_stored_and_a_repeated_point_is_refused(tmp_path, engine_ready):
    """Points are keyed by workload, swept values and repetition, and the store keeps one result per key: a
    run stores as many points as it planned, and a sweep naming one point twice never runs."""
    from fathom.suite import plan, spec

    text = ("name: keyed\ndefaults: {interface: null, runtime: 0.3s, bs: 4k, rw: randread}\n"
            "workloads:\n  - {name: rr}\nsweep: {mode: zip, ramp_time: [0s, 0.2s, 0s], iodepth: [1, 1, 4]}\n"
            "repetitions: 2\n")
    suite = tmp_path / "keyed.yaml"
    suite.write_text(text)
    planned = [p.key for p in plan.expand(spec.parse(text, "keyed.yaml"))]
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), timeout=180)
    assert p.returncode == 0, p.stderr
    assert "6 point(s) done" in p.stdout + p.stderr
    with Store(db) as st:
        stored = st.points(st.run("latest").id)
        assert [pt["key"] for pt in stored] == planned and len(planned) == 6
        assert all(pt["status"] == "done" for pt in stored)

    suite.write_text(text.replace("iodepth: [1, 1, 4]", "iodepth: [1, 1, 1]"))
    p = run_fathom("run", str(suite), "--db", str(tmp_path / "dup.db"), timeout=60)
    assert p.returncode == 2 and "points 1 and 3 are one point (ramp_time=0.0, iodepth=1)" in p.stderr
    assert "repetitions: 4" in p.stderr


def test_show_has_the_swept_bs_and_the_rates_that_differ(tmp_path, engine_ready):
    """`fathom show`'s point table names what tells points apart: bs when swept, the open-loop rate when it
    differs across points (`closed` for a closed-loop one)."""
    suite = tmp_path / "axes.yaml"
    suite.write_text("name: axes\ndefaults: {interface: null, runtime: 0.5s, rw: randread}\n"
                     "workloads:\n  - {name: open, rate: 400}\n  - {name: flat}\nsweep: {bs: [4k, 64k]}\n")
    db = tmp_path / "a.db"
    run_fathom("run", str(suite), "--db", str(db), timeout=120, check=True)
    out = run_fathom("show", "latest", "--db", str(db), check=True).stdout.splitlines()
    at = next(i for i, line in enumerate(out) if line.split()[:2] == ["#", "workload"])
    assert out[at].split()[:7] == ["#", "workload", "engine", "bs", "rate", "ops/s", "iodepth"]
    rows = [line for line in out[at + 1:] if line.split() and line.split()[0].isdigit()]  # the points table's
    assert [line.split()[1:5] for line in rows] == [
        ["open", "fathom-engine", "4KiB", "400"], ["open", "fathom-engine", "64KiB", "400"],
        ["flat", "fathom-engine", "4KiB", "closed"], ["flat", "fathom-engine", "64KiB", "closed"]]
    # what bounds each: the null target is the client alone
    assert sum(1 for line in out if re.match(r"\s+#\d client: the null target", line)) == 4, out
    # one workload, closed loop, nothing swept: no such column
    suite.write_text("name: plain\ndefaults: {interface: null, runtime: 0.5s, rw: randread}\n"
                     "workloads:\n  - {name: flat}\n")
    run_fathom("run", str(suite), "--db", str(db), timeout=120, check=True)
    out = run_fathom("show", "latest", "--db", str(db), check=True).stdout.splitlines()
    assert next(line for line in out if line.split()[:2] == ["#", "workload"]).split()[:4] == [
        "#", "workload", "engine", "iodepth"]
