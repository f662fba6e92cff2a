"""`fathom compare`: the published Classic vs SeaStore conclusions, verdict rules (one trial: only beyond 2x;
with trials: the whole t interval beyond the tolerance), JSON shape and the regression gate's exit codes."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest

from conftest import run_fathom
from fathom.analysis.compare import NO_VERDICT, compare, judge
from fathom.analysis.data import load_run
from fathom.analysis.stats import LogDiff
from fathom.results.store import Store

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def published_db(tmp_path_factory) -> str:
    db = tmp_path_factory.mktemp("cmp") / "pub.db"
    shutil.copy(DATA / "crimson-vs-classic-2025.csv", db.parent / "crimson.csv")
    run_fathom("import", "table", str(db.parent / "crimson.csv"), "--split-by", "backend", "--db", str(db),
               check=True)
    return str(db)


def _json(db: str, *extra: str) -> dict:
    p = run_fathom("compare", "classic", "seastore", "--db", db, "--format", "json", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_reproduces_the_studys_conclusions(published_db):
    out = _json(published_db)
    w = {x["workload"]: x for x in out["workloads"]}
    assert w["randread4k"]["verdict"] == "better"
    assert 2.7 < w["randread4k"]["ratio"] < 3.1  # "about 3x": 396,901 / 136,638 IOPS
    assert w["randwrite4k"]["verdict"] == "worse"
    # one trial each: the sequential peaks' +1.5% and -8.3% are no verdict; only changes beyond 2x are judged
    for wl in ("seqread64k", "seqwrite64k"):
        assert w[wl]["tp_all"]["verdict"] == NO_VERDICT and w[wl]["verdict"] != "equivalent"
    flagged = {(a["run"], a["workload"], a["iodepth"]) for a in out["anomalies"] if a["kind"] == "collapse"}
    assert flagged == {("seastore", "randwrite4k", 40), ("seastore", "randwrite4k", 52),
                       ("seastore", "randwrite4k", 64)}
    assert not [a for a in out["anomalies"] if a["run"] == "classic"]


def test_numbers_match_hand_computation(published_db):
    w = {x["workload"]: x for x in _json(published_db)["workloads"]}
    rr = w["randread4k"]
    assert rr["base_peak"] == pytest.approx(136637.79) and rr["base_peak_at"] == "64"
    assert rr["new_peak"] == pytest.approx(396901.06) and rr["new_peak_at"] == "16"
    assert rr["ratio"] == pytest.approx(396901.06 / 136637.79)
    assert rr["tp_gain_pct"] == pytest.approx((396901.06 / 136637.79 - 1) * 100)
    assert rr["ci"] is None  # one measurement per level
    lv1 = next(lv for lv in rr["levels"] if lv["label"] == "1")
    assert lv1["lat_gain_pct"] == pytest.approx((0.29 / 0.25 - 1) * 100)  # lower latency is better
    assert w["seqwrite64k"]["ratio"] == pytest.approx(2479.99 / 2703.43)  # -8.3%: inside 10%
    assert w["seqread64k"]["ratio"] == pytest.approx(2293.93 / 2259.54)
    # the collapsed randwrite levels stay in the table but not in the latency summary
    rw = w["randwrite4k"]
    assert rw["lat_levels_used"] == 7
    assert "collapse" in next(lv for lv in rw["levels"] if lv["label"] == "40")["flagged"]


def test_one_trial_gives_no_verdict_under_the_wide_factor_whatever_the_tolerance(published_db):
    w = {x["workload"]: x for x in _json(published_db, "--tolerance", "5%")["workloads"]}
    assert w["seqwrite64k"]["tp_all"]["verdict"] == NO_VERDICT  # -8.3% with one trial: could be noise
    assert "single trial" in w["seqread64k"]["reason"]


def test_text_output(published_db):
    p = run_fathom("compare", "classic", "seastore", "--db", published_db)
    assert p.returncode == 0, p.stderr
    assert "Relative difference, positive = NEW better" in p.stdout
    assert "randread4k" in p.stdout and "better" in p.stdout
    assert "seastore randwrite4k at 40, 52, 64: collapse" in p.stdout


@pytest.mark.parametrize("args, rc", [
    (["classic", "seastore", "--fail-on-regression", "20%"], 5),  # randwrite -31.7%
    (["classic", "seastore", "--fail-on-regression", "60"], 5),  # the collapsed levels: 0.07-0.16x
    (["classic", "seastore", "--fail-on-regression", "99"], 0),
    (["seastore", "classic", "--fail-on-regression", "10%"], 5),  # reversed: randread -65.6%
    (["classic", "classic", "--fail-on-regression", "0"], 0),  # identical: no regression
])
def test_regression_gate_exit_codes(published_db, args, rc):
    p = run_fathom("compare", *args, "--db", published_db)
    assert p.returncode == rc, p.stdout + p.stderr
    if rc == 5:
        assert "regression" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("args", [["classic", "seastore", "--tolerance", "ten"],
                                  ["classic", "seastore", "--fail-on-regression", "150%"]])
def test_bad_options_exit_2(published_db, args):
    p = run_fathom("compare", *args, "--db", published_db)
    assert p.returncode == 2 and p.stderr.startswith("fathom: error:") and "Traceback" not in p.stderr


def test_unknown_run_is_an_error_not_a_traceback(published_db):
    p = run_fathom("compare", "classic", "nosuchrun", "--db", published_db)
    assert p.returncode == 1 and "fathom: error: no run 'nosuchrun'" in p.stderr


@pytest.mark.parametrize("base, new, expected", [
    ([100.0], [199.0], NO_VERDICT), ([100.0], [200.0], "better"), ([100.0], [50.0], "worse"),
    ([100.0], [51.0], NO_VERDICT), ([100.0, 100.0], [70.0], NO_VERDICT),  # one side with one trial
])
def test_one_trial_decides_only_beyond_the_wide_factor(base, new, expected):
    assert judge(None, (base, new), 0.10, 0.95, "throughput").verdict == expected


@pytest.mark.parametrize("d, var, expected", [
    (0.0, 0.0004, "equivalent"),  # [0.96, 1.04] at 95% with df 30
    (0.0, 0.0025, "inconclusive"),  # about [0.90, 1.11]: crosses the tolerance
    (math.log(1.3), 0.0004, "better"),  # [1.25, 1.36]: wholly above 1.1
    (math.log(1.15), 0.0025, "inconclusive"),  # above 1 but not wholly beyond the tolerance
    (math.log(0.8), 0.0004, "worse"),
])
def test_with_trials_the_whole_interval_must_lie_beyond_the_tolerance(d, var, expected):
    x = LogDiff(d, var, 30.0, (16, 16))
    assert judge(x, None, 0.10, 0.95, "throughput").verdict == expected
    # latency turned round: a lower NEW latency is better
    flip = {"better": "worse", "worse": "better"}.get(expected, expected)
    assert judge(x, None, 0.10, 0.95, "p99 latency", lower_better=True).verdict == flip


def _repeated_run(st: Store, name: str, scale: float, noise: float, reps: int, seed: int) -> None:
    rng = random.Random(seed)
    rid = st.create_run(name, status="done")
    i = 0
    for qd, x in [(1, 1000.0), (4, 3000.0), (16, 4000.0)]:
        for r in range(reps):
            iops = x * scale * (1 + rng.uniform(-noise, noise))
            st.save_point(rid, i, f"q{qd}-r{r}", "randread4k", "fathom-engine",
                          {"iodepth": qd, "rw": "randread", "bs": 4096, "repetition": r}, "done",
                          metrics={"iops": iops, "clat_ms": qd / iops * 1000, "total_ios": int(iops * 60)})
            i += 1


def test_repetitions_give_an_interval(tmp_path):
    st = Store(tmp_path / "rep.db")
    _repeated_run(st, "base", 1.00, 0.01, 5, 1)
    _repeated_run(st, "same", 1.01, 0.01, 5, 2)
    _repeated_run(st, "noisy", 1.00, 0.40, 3, 3)
    _repeated_run(st, "faster", 1.30, 0.01, 5, 4)
    base = load_run(st, "base")
    c = compare(base, [load_run(st, "same"), load_run(st, "noisy"), load_run(st, "faster")], 0.10)
    by_new = {w.new: w for w in c.workloads}
    same, noisy, faster = by_new["same"], by_new["noisy"], by_new["faster"]
    assert same.ci is not None and 0.9 <= same.ci[0] <= same.ci[1] <= 1.1
    assert same.verdict == "equivalent"
    assert noisy.ci is not None and (noisy.ci[0] < 0.9 or noisy.ci[1] > 1.1)
    assert noisy.verdict == "inconclusive"  # ±40% noise: the interval does not fit in ±10%
    assert faster.verdict == "better" and faster.ci[0] > 1
    assert same.base_peak_stats.n == 5 and same.base_peak_stats.stdev is not None


def test_run_groups_are_repetitions(tmp_path):
    st = Store(tmp_path / "grp.db")
    for i in range(3):
        _repeated_run(st, f"b{i}", 1.0, 0.02, 1, 10 + i)
        _repeated_run(st, f"n{i}", 0.7, 0.02, 1, 20 + i)
    c = compare(load_run(st, "b0,b1,b2"), [load_run(st, "n0,n1,n2")], 0.10, fail_on_regression=0.2)
    (w,) = c.workloads
    assert w.base_peak_stats.n == 3 and w.ci is not None and w.ci[1] < 1
    assert w.verdict == "worse" and w.regression


def test_repeat_needs_runnable_sides_and_says_how_to_repeat_a_stored_run(published_db, tmp_path):
    p = run_fathom("compare", "classic", "seastore", "--repeat", "3", "--db", published_db)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "'classic', 'seastore' are not a built-in suite or suite file" in p.stderr
    assert "fathom run SUITE --name NAME" in p.stderr
    p = run_fathom("compare", "osd-classic", "classic", "--repeat", "0", "--db", published_db)
    assert p.returncode == 2 and "at least 1" in p.stderr
    from fathom.cli.report import runnable

    suite = tmp_path / "mine.yaml"
    suite.write_text("name: mine\n")
    assert runnable("osd-classic") and runnable(str(suite)) and not runnable("classic")


def test_the_environments_that_differ_are_named_with_each_runs_value():
    """Pacific against a Reef root file system: the Ceph versions and where the daemons came from are named, in
    the runs' order; what is alike (fathom, the client, the host) is not; a run with no Ceph reads '-'."""
    from fathom.analysis.compare import env_differences
    from fathom.analysis.data import RunData

    def run(name: str, env: dict) -> RunData:
        return RunData(name=name, ids=[1], kind="suite", status="done", source=None, env=env, suite="osd-classic",
                       points=[], events=[])

    same = {"fathom_version": "0.9", "ceph_client_version": "ceph version 16.2.15", "host": {"cores": 2}}
    pacific = run("p", {**same, "ceph_version": "ceph version 16.2.15", "cluster": {"ceph_source": {"kind": "host"}}})
    reef = run("r", {**same, "ceph_version": "ceph version 18.2.7",
                     "cluster": {"ceph_source": {"kind": "rootfs", "dir": "/c/reef/root"}}, "labels": {"b": "1"}})
    diff = env_differences([pacific, reef])
    assert [(d["field"], d["values"]) for d in diff] == [
        ("Ceph (cluster)", ["ceph version 16.2.15", "ceph version 18.2.7"]),
        ("Ceph daemons from", ["host", "rootfs /c/reef/root"]), ("labels", ["-", "b=1"])]
    assert env_differences([pacific, pacific]) == []
    assert env_differences([run("n", same), pacific])[0]["values"] == ["-", "ceph version 16.2.15"]
