"""Plan expansion: product and zip sweeps, repetitions, order, stable keys; `fathom plan` output."""

from __future__ import annotations

import json

import pytest

from conftest import run_fathom

from fathom import interfaces
from fathom.suite import plan, spec

BASE = """\
name: p
prep:
  pools: [{name: rbd}]
  images: {pool: rbd, count: 1, size: 16MiB}
defaults: {engine: fio, runtime: 1s}
workloads:
  - {name: a, rw: randread, bs: 4k}
  - {name: b, rw: write, bs: 64k, sweep: {iodepth: [1, 4]}}
"""


def expand(text: str, quick: bool = False) -> list[plan.Point]:
    return plan.expand(spec.parse(text, "p.yaml", quick))


def test_product_is_cartesian_last_axis_fastest():
    pts = expand(BASE + "sweep: {iodepth: [1, 2, 4], bs: [4k, 8k]}\n")
    a = [p for p in pts if p.workload == "a"]
    assert len(a) == 6
    assert [(p.params["iodepth"], p.params["bs"]) for p in a] == [
        (1, 4096), (1, 8192), (2, 4096), (2, 8192), (4, 4096), (4, 8192)]
    # a workload's own sweep replaces the suite-wide one
    b = [p for p in pts if p.workload == "b"]
    assert [p.params["iodepth"] for p in b] == [1, 4] and all(p.params["bs"] == 65536 for p in b)
    assert [p.idx for p in pts] == list(range(8))


def test_zip_walks_lists_together():
    pts = expand(BASE + "sweep: {mode: zip, iodepth: [1, 2, 4], numjobs: [1, 2, 3]}\n")
    a = [(p.params["iodepth"], p.params["numjobs"]) for p in pts if p.workload == "a"]
    assert a == [(1, 1), (2, 2), (4, 3)]


def test_repetitions_are_whole_passes_with_distinct_keys():
    pts = expand(BASE + "repetitions: 3\n")
    assert len(pts) == 3 * 3
    assert [p.rep for p in pts] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert len({p.key for p in pts}) == len(pts)
    assert pts[0].key == "a/rep=1" and pts[1].key == "b/iodepth=1/rep=1"


def test_keys_are_stable_and_unit_normalized():
    one = expand(BASE + "sweep: {bs: [4k, 1MiB]}\n")
    two = expand(BASE + "sweep: {bs: [4096, 1M]}\n")
    assert [p.key for p in one] == [p.key for p in two]
    assert one[0].key == "a/bs=4096"


def test_builtin_point_counts():
    assert len(plan.expand(spec.load("osd-classic").suite)) == 40
    quick = plan.expand(spec.load("osd-classic", quick=True).suite)
    assert len(quick) == 40
    assert [p.params["iodepth"] for p in quick[:10]] == [1, 2, 4, 8, 16, 24, 32, 40, 52, 64]
    assert [p.workload for p in quick[::10]] == ["randread4k", "randwrite4k", "seqread64k", "seqwrite64k"]
    assert plan.total_estimate_s(quick) < 400  # a few minutes of load at quick scale
    rb = plan.expand(spec.load("rados-bench").suite)
    assert [p.params["rw"] for p in rb] == ["write", "read", "randread"]


def test_cli_plan_text_and_json(tmp_path):
    p = run_fathom("plan", "osd-classic", "--quick", check=True)
    assert "40 points" in p.stdout and "randread4k" in p.stdout and "seqwrite64k" in p.stdout
    p = run_fathom("plan", "osd-classic", "--quick", "--json", check=True)
    pts = json.loads(p.stdout)
    assert len(pts) == 40 and pts[9]["params"]["iodepth"] == 64 and pts[0]["params"]["numjobs"] == 1
    p = run_fathom("suites", check=True)
    assert "osd-classic" in p.stdout and "rados-bench" in p.stdout
    p = run_fathom("suites", "show", "rados-bench", check=True)
    assert "no-cleanup" in p.stdout or "--no-cleanup" in p.stdout
    assert spec.parse(p.stdout, "shown").name == "rados-bench"


def test_progress_plain_lines_and_eta(capsys):
    from fathom.run.progress import Progress

    pts = plan.expand(spec.load("osd-classic", quick=True).suite)
    prog = Progress(len(pts), pts, tty=False)
    assert prog.eta_s() == plan.total_estimate_s(pts)
    prog.point_start(pts[0], 1)
    prog.interval({"dt": 1.0, "ops": {"read": {"ops": 2000, "lat_mean_ns": 1.5e6}}})
    assert prog.iops == 2000 and prog.lat_ms == 1.5
    prog.point_end(pts[0], "done", {"iops": 2000.0, "bw_mib_s": 7.8, "clat_ms": 1.5, "p99_ms": 3.0, "osd_cpu": 50.0})
    prog.point_start(pts[1], 2)
    prog.point_end(pts[1], "failed", None, "engine said no")
    prog.point_start(pts[2], 3)  # open loop in overload: the line says the offered rate was not delivered
    prog.point_end(pts[2], "done", {"iops": 396.0, "offered_rate_ops_s": 800.0, "achieved_rate_ops_s": 396.0,
                                    "unissued_ops": 2103, "schedule_kept": False})
    prog.close()
    err = capsys.readouterr().err
    assert "[1/40] randread4k" in err and "2000 IOPS" in err and "FAILED: engine said no" in err
    assert err.count("schedule NOT kept") == 1
    assert "offered 800 ops/s, achieved 396 ops/s, 2103 ops never issued" in err
    assert 0 <= prog.eta_s() <= plan.total_estimate_s(pts[2:])


def test_eta_of_points_whose_runtime_is_a_cap_follows_their_real_length():
    """fs-apps points run one pass of their bytes and end in seconds, not at their 10 min cap."""
    from fathom.run.progress import Progress

    pts = plan.expand(spec.load("fs-apps", quick=True).suite)
    assert all(p.capped for p in pts)
    prog = Progress(len(pts), pts, tty=False)
    assert prog.eta_s() == plan.total_estimate_s(pts)
    prog.point_start(pts[0], 1)
    prog.t_point -= pts[0].est_s / 100  # the point took 1% of its cap
    prog.point_end(pts[0], "done", {})
    assert abs(prog.eta_s() - plan.total_estimate_s(pts[1:]) / 100) < 1.0
    prog.close()


def test_cli_plan_shows_companions(tmp_path):
    p = run_fathom("plan", "osd-failure", "--quick", check=True)
    assert "faults: kill osd.1 at 8 s, start osd.1 at 16 s" in p.stdout and "about" in p.stdout
    suite = tmp_path / "ss.yaml"
    suite.write_text("name: ss\nworkloads:\n  - {name: a, interface: 'null', rw: randread, runtime: 60s,\n"
                     "     steady_state: {metric: iops, window_s: 10, criteria: {slope: 1}, min_s: 10}}\n")
    p = run_fathom("plan", str(suite), check=True)
    assert "steady state: stops once iops" in p.stdout and "max 60 s" in p.stdout
    assert "at most" in p.stdout and "faults:" not in p.stdout


def test_op_size_is_the_interfaces_own_size_field_when_set():
    assert interfaces.op_size({"interface": "s3", "bs": 4096, "object_size": 65536}) == 65536
    assert interfaces.op_size({"interface": "s3", "bs": 4096, "object_size": None}) == 4096
    # rados' object_size is the object's, not the op's: a 4 MiB object written 64 KiB at a time
    assert interfaces.op_size({"interface": "rados", "bs": 65536, "object_size": 4 << 20}) == 65536
    assert interfaces.op_size({"bs": 8192}) == 8192  # an imported point with no interface


def test_sweep_points_that_are_one_point_are_never_planned():
    """The store keeps one result per key: a plan must not hold two points with one key (a suite made
    without spec's checks is refused by expand itself)."""
    s = spec.parse(BASE + "sweep: {mode: zip, iodepth: [1, 2]}\n", "p.yaml")
    dup = s.model_copy(update={"workloads": [s.workloads[0].model_copy(update={
        "sweep": s.workloads[0].sweep.model_copy(update={"iodepth": [1, 2, 1]})})]})
    with pytest.raises(spec.SuiteError, match="workload 'a': sweep points 1, 3 are one point"):
        plan.expand(dup)


def test_zip_rows_repeating_values_in_one_axis_are_distinct_points():
    pts = expand(BASE + "sweep: {mode: zip, ramp_time: [0s, 4s, 0s, 4s], iodepth: [1, 1, 8, 8]}\n"
                 "repetitions: 2\n")
    a = [p for p in pts if p.workload == "a"]
    assert [(p.params["ramp_time"], p.params["iodepth"], p.rep) for p in a] == [
        (0.0, 1, 1), (4.0, 1, 1), (0.0, 8, 1), (4.0, 8, 1), (0.0, 1, 2), (4.0, 1, 2), (0.0, 8, 2), (4.0, 8, 2)]
    assert len({p.key for p in pts}) == len(pts)
    assert a[1].key == "a/ramp_time=4.0/iodepth=1/rep=1"


def test_each_repetition_and_each_slo_probe_draws_its_own_seed():
    """One point of the first repetition keeps seed 1 (two runs draw the same offsets and arrivals); repetitions
    and SLO probes draw their own, and the engines of a many-engine point theirs (never in lockstep)."""
    from fathom.engines.clients import instance_seed

    s = spec.parse("name: s\nrepetitions: 3\nworkloads:\n  - {name: a, interface: null, rw: randread}\n", "s.yaml")
    pts = plan.expand(s)
    assert [plan.seed(p) for p in pts] == [1, 1 + plan.SEEDS_PER_REPETITION, 1 + 2 * plan.SEEDS_PER_REPETITION]
    probes = [plan.Point(idx=n, key=f"a/slo/{n}", workload="a", engine="fathom-engine", rep=1,
                         params={**pts[0].params, "slo_probe": n}, swept={}) for n in range(1, 40)]
    assert len({plan.seed(p) for p in probes} | {plan.seed(pts[0])}) == 40
    assert instance_seed(5, 0) == 5 and len({instance_seed(5, k) for k in range(64)}) == 64
