"""A level is every axis that varies: different configurations are never repetitions of one (pure logic)."""

from __future__ import annotations

from fathom.suite import plan, spec
from fathom.analysis.data import RunData, StoredPoint, assign_levels, level_axis_name, levels


def _run(name: str, rid: int, pts: list[tuple[dict, float]]) -> RunData:
    points = [StoredPoint(run=name, run_id=rid, workload="w", params=q, metrics={"iops": v}) for q, v in pts]
    return RunData(name, [rid], "suite", "done", None, {}, None, points, [])


def test_block_sizes_at_one_depth_are_two_levels_not_one_average():
    r = _run("a", 1, [({"iodepth": 1, "bs": 4096}, 2000.0), ({"iodepth": 1, "bs": 1 << 20}, 100.0)])
    assign_levels([r])
    lv = levels(r.curve("w"))
    assert [(x.label, x.mean("iops")) for x in lv] == [("4096", 2000.0), ("1048576", 100.0)]
    assert level_axis_name([r], "w") == "bs"


def test_the_fs_apps_zip_gives_five_levels():
    pts = plan.expand(spec.load("fs-apps").suite)
    wl = pts[0].workload
    own = [p for p in pts if p.workload == wl]
    r = RunData("fs", [1], "suite", "done", None, {}, "fs-apps",
                [StoredPoint(run="fs", run_id=1, workload=wl, params=p.params, metrics={"iops": float(i)})
                 for i, p in enumerate(own)], [])
    assign_levels([r])
    lv = levels(r.curve(wl))
    assert len(lv) == len(own) == 5 and all(len(x.points) == 1 for x in lv)
    assert "jobs=100 files=10" in [x.label for x in lv] and "jobs=100 files=100" in [x.label for x in lv]


def test_a_field_changed_between_runs_does_not_split_their_levels():
    a = _run("a", 1, [({"iodepth": d, "bs": 4096}, 100.0 * d) for d in (1, 4)])
    b = _run("b", 2, [({"iodepth": d, "bs": 8192}, 90.0 * d) for d in (1, 4)])
    assign_levels([a, b])
    assert [p.label for p in a.curve("w")] == [p.label for p in b.curve("w")] == ["1", "4"]


def test_null_delays_are_levels():
    r = _run("a", 1, [({"iodepth": 4, "delay_us": 0}, 9000.0), ({"iodepth": 4, "delay_us": 10_000}, 400.0)])
    assign_levels([r])
    assert [(x.label, x.mean("iops")) for x in levels(r.curve("w"))] == [("0", 9000.0), ("10000", 400.0)]
    assert level_axis_name([r], "w") == "delay_us"
