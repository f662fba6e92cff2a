"""Suite validation: built-ins load, and a malformed suite gets every problem in one message, each naming
file, line, field and value."""

from __future__ import annotations

import textwrap

import pytest

from fathom.suite import spec
from fathom.suite.spec import SuiteError

GOOD = """\
name: t
prep:
  pools: [{name: rbd, pg_num: 16}]
  images: {pool: rbd, count: 2, size: 64MiB}
defaults: {engine: fio, runtime: 2s}
workloads:
  - {name: rr, rw: randread, bs: 4k}
sweep: {iodepth: [1, 2]}
"""


def parse(text: str, quick: bool = False) -> spec.Suite:
    return spec.parse(textwrap.dedent(text), "s.yaml", quick)


def error_of(text: str) -> str:
    with pytest.raises(SuiteError) as ei:
        parse(text)
    return str(ei.value)


def test_builtin_suites_validate_at_both_scales():
    assert {"osd-classic", "rados-bench"} <= set(spec.builtin_names())
    for name in spec.builtin_names():
        for quick in (False, True):
            s = spec.load(name, quick=quick).suite
            assert s.workloads


def test_osd_classic_is_the_study():
    full = spec.load("osd-classic").suite
    assert full.prep.images.count == 32 and full.prep.images.size == 2 * 1024**3
    assert full.prep.pools[0].pg_num == 128 and full.prep.pools[0].size == 1
    assert full.prep.prefill and full.prep.hygiene.enabled
    assert [w.name for w in full.workloads] == ["randread4k", "randwrite4k", "seqread64k", "seqwrite64k"]
    w = full.workloads[0]
    assert (w.numjobs, w.runtime, w.ramp_time) == (4, 300.0, 30.0)
    assert w.sweep.axes()["iodepth"] == [1, 2, 4, 8, 16, 24, 32, 40, 52, 64]
    quick = spec.load("osd-classic", quick=True).suite
    assert quick.prep.images.count == 2 and quick.prep.images.size == 256 * 2**20
    assert quick.workloads[0].numjobs == 1 and quick.workloads[0].runtime == 3.0
    assert quick.workloads[0].sweep.axes()["iodepth"] == w.sweep.axes()["iodepth"]  # all ten iodepths kept


def test_good_suite_units_are_normalized():
    s = parse(GOOD)
    w = s.workloads[0]
    assert w.bs == 4096 and w.runtime == 2.0 and w.engine == "fio" and w.pool is None
    assert s.prep.images.names() == ["fio_test_0", "fio_test_1"]


@pytest.mark.parametrize("text, expected", [
    # unknown top-level key, with its line and what is allowed
    (GOOD + "colour: blue\n", ["s.yaml:9", "unknown field 'colour'", "allowed here", "workloads"]),
    # unknown key inside a workload
    (GOOD.replace("bs: 4k}", "bs: 4k, blocksize: 8k}"), ["s.yaml:7", "workloads[0].blocksize", "unknown field"]),
    # bad enum value: names the value and the allowed ones
    (GOOD.replace("randread", "randwirte"), ["s.yaml:7", "'randwirte'", "rw", "randwrite"]),
    # negative iodepth in a workload
    (GOOD.replace("bs: 4k}", "bs: 4k, iodepth: -1}"), ["s.yaml:7", "iodepth", "-1", "greater than or equal to 1"]),
    # unreadable size
    (GOOD.replace("bs: 4k", "bs: fourk"), ["s.yaml:7", "bs", "'fourk'", "size such as"]),
    # bad duration in defaults: the line of defaults
    (GOOD.replace("runtime: 2s", "runtime: soon"), ["s.yaml:5", "runtime", "'soon'", "duration"]),
    # unknown engine
    (GOOD.replace("engine: fio", "engine: iometer"), ["engine", "'iometer'", "fio", "rados-bench"]),
    # a swept value that is not valid: points at the sweep list
    (GOOD.replace("iodepth: [1, 2]", "iodepth: [1, 0]"), ["s.yaml:8", "sweep.iodepth[1]", "0"]),
    # zip with lists of different lengths
    (GOOD.replace("sweep: {iodepth: [1, 2]}", "sweep: {mode: zip, iodepth: [1, 2], numjobs: [1]}"),
     ["s.yaml:8", "zip", "equal length"]),
    # sweeping a field that cannot be swept
    (GOOD.replace("sweep: {iodepth: [1, 2]}", "sweep: {colour: [1, 2]}"), ["cannot sweep 'colour'", "iodepth"]),
    # images in a pool prep does not create
    (GOOD.replace("images: {pool: rbd", "images: {pool: data"), ["s.yaml:4", "'data'", "prep.pools"]),
    # missing workloads
    ("name: t\n", ["workloads", "required"]),
    # duplicate workload names
    (GOOD + "  - {name: rr, rw: randwrite}\n".replace("  - ", "  - "), []),
    # an engine that cannot run the workload
    (GOOD.replace("engine: fio", "engine: rados-bench"), ["rados-bench", "interface: rados"]),
    # quick section of the wrong type is reported only with --quick; a wrong scalar in the main body always
    (GOOD.replace("count: 2", "count: many"), ["s.yaml:4", "count", "'many'", "integer"]),
])
def test_malformed_suites_name_line_field_value(text, expected):
    if not expected:  # duplicate workload appended after sweep: the list continues under workloads? no: a new key
        text = GOOD.replace("  - {name: rr, rw: randread, bs: 4k}\n",
                            "  - {name: rr, rw: randread, bs: 4k}\n  - {name: rr, rw: randwrite}\n")
        expected = ["'rr'", "used twice"]
    msg = error_of(text)
    for part in expected:
        assert part in msg, f"{part!r} not in {msg!r}"
    assert "Traceback" not in msg and "\n" not in msg.split("hint:")[0].strip()


@pytest.mark.parametrize("text, expected", [
    ("", "empty"),
    ("# only a comment\n", "empty"),
    ("name: [unclosed\n", "not valid YAML"),
    ("- just\n- a list\n", "must be a YAML mapping"),
    ("just a string", "must be a YAML mapping"),
    ("name: x\n\tbad: tab\n", "not valid YAML"),
])
def test_not_a_suite_at_all(text, expected):
    msg = error_of(text)
    assert expected in msg and msg.startswith("s.yaml")


def test_quick_overrides_merge_deeply():
    s = parse(GOOD + "quick:\n  defaults: {runtime: 1s}\n  prep: {images: {count: 1}}\n", quick=True)
    assert s.workloads[0].runtime == 1.0 and s.prep.images.count == 1 and s.prep.images.size == 64 * 2**20
    assert parse(GOOD + "quick:\n  defaults: {runtime: 1s}\n").workloads[0].runtime == 2.0  # not applied without


def test_engine_override():
    s = spec.parse(GOOD, "s.yaml", engine="fathom-engine")
    assert all(w.engine == "fathom-engine" for w in s.workloads)


def test_cli_reports_bad_files_without_traceback(tmp_path):
    from conftest import run_fathom

    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("randread", "randwirte"))
    p = run_fathom("plan", str(bad))
    assert p.returncode == 2
    assert p.stderr.startswith(f"fathom: error: {bad}:7:") and "Traceback" not in p.stderr
    binary = tmp_path / "x.yaml"
    binary.write_bytes(b"\x00\xff\xfe binary")
    p = run_fathom("plan", str(binary))
    assert p.returncode == 2 and "Traceback" not in p.stderr and "fathom: error:" in p.stderr
    p = run_fathom("plan", str(tmp_path / "missing.yaml"))
    assert p.returncode == 2 and "does not exist" in p.stderr
    p = run_fathom("plan", "no-such-suite")
    assert p.returncode == 2 and "osd-classic" in p.stderr


def test_former_names_still_load():
    """`target:` was the name of both the cluster (suite level) and the interface (workload level)."""
    text = ("name: old\ntarget: {kind: ceph, conf: /etc/ceph/ceph.conf, id: bench}\n"
            "prep: {pools: [{name: p, application: rados}]}\n"
            "workloads: [{name: w, engine: rados-bench, target: rados, pool: p, rw: write}]\n")
    s = spec.parse(text, "old.yaml")
    assert s.cluster.kind == "attached" and s.cluster.conf == "/etc/ceph/ceph.conf" and s.cluster.id == "bench"
    assert s.workloads[0].interface == "rados" and s.workloads[0].params()["interface"] == "rados"
    new = spec.parse(text.replace("target: {kind: ceph,", "cluster: {kind: attached,")
                     .replace("target: rados", "interface: rados"), "new.yaml")
    assert new == s


def test_every_problem_in_one_message_by_line():
    text = """\
        name: t
        prep:
          pools: [{name: rbd, pg_num: 16}]
          images: {pool: data, count: 2, size: 64MiB}
        defaults: {engine: fio, runtime: 2s}
        workloads:
          - {name: rr, rw: randread, bs: 4k, iodepht: 4}
          - {name: rw, rw: randwirte, bs: 4k}
          - {name: sw, rw: write, bs: 64k}
        sweep: {iodepth: [1, 0, 2], numjbs: [1, 2]}
        """
    msg = error_of(text)
    head, *problems = msg.splitlines()
    assert head == "s.yaml: 5 problems:"
    assert [p.split(": ")[0].strip() for p in problems] == ["s.yaml:4", "s.yaml:7", "s.yaml:8", "s.yaml:10",
                                                            "s.yaml:10"]
    images, typo, value, sweep_key, sweep_value = problems
    # a cross-check between fields
    assert "prep.images.pool: 'data' is not one of prep.pools (defined: rbd)" in images
    # an unknown key with the closest known one, and what is allowed there
    assert "workload 'rr': unknown field 'workloads[0].iodepht'; did you mean 'iodepth'?" in typo
    assert "allowed here: name, engine" in typo
    # a bad value, with what is allowed
    assert "workloads[1].rw: 'randwirte' is not allowed; allowed: 'read', 'write'" in value
    # a sweep axis that cannot be swept, with the closest sweepable field
    assert "sweep.numjbs: cannot sweep 'numjbs'; did you mean 'numjobs'?" in sweep_key
    # a bad swept value: the suite-wide sweep is checked for every workload that validated, reported once
    assert "workload 'sw': sweep.iodepth[1]: 0 is not allowed for iodepth" in sweep_value
    assert "rr" not in sweep_value and "'rw'" not in sweep_value  # those workloads have problems of their own


def test_problems_are_reported_once_and_dependent_checks_skipped():
    text = """\
        name: t
        prep:
          pools: [{name: rbd}]
          images: {pool: rbd, size: 1k}
        defaults: {engine: fio, runtime: soon, ramptime: 1s}
        workloads:
          - {name: a}
          - {name: b}
          - {name: a}
        sweep: {mode: zipp, iodepth: [1, 2]}
        """
    msg = error_of(text)
    head, *problems = msg.splitlines()
    assert head == "s.yaml: 4 problems:", msg
    # images failed on their own: "targets rbd but prep.images defines no images" would be noise
    assert "s.yaml:4: prep.images.size: '1k' is not allowed" in problems[0]
    # an unknown default and a bad default value: once, where defaults has them, not once per workload
    assert ("s.yaml:5: unknown field 'defaults.ramptime'; did you mean 'ramp_time'? (allowed in defaults: engine,"
            in problems[1])
    assert "s.yaml:5: defaults.runtime: 'soon' is not allowed; expected a duration" in problems[2]
    # the suite-wide sweep is copied into every workload, reported once; the workloads did not validate
    # (their runtime is bad), so the duplicate name is not checked yet
    assert "s.yaml:10: sweep.mode: 'zipp' is not allowed; allowed: 'product', 'zip'" in problems[3]


def test_a_swept_value_bad_for_several_workloads_is_one_problem():
    msg = error_of(GOOD.replace("  - {name: rr, rw: randread, bs: 4k}\n",
                                "  - {name: rr, rw: randread, bs: 4k}\n  - {name: rw, rw: randwrite}\n")
                   .replace("iodepth: [1, 2]", "iodepth: [1, 0]"))
    assert msg == ("s.yaml:9: workloads 'rr', 'rw': sweep.iodepth[1]: 0 is not allowed for iodepth; "
                   "input should be greater than or equal to 1")


def test_yaml_syntax_error_stays_alone():
    msg = error_of(GOOD.replace("bs: 4k}", "bs: 4k, iodepht: 4}") + "colour: [unclosed\n")
    assert msg.startswith("s.yaml:10: not valid YAML") and "\n" not in msg and "iodepht" not in msg


ZIP_REPEATED = """\
name: t
defaults: {interface: null, runtime: 1s, rw: randread}
workloads:
  - {name: rr, bs: 4k}
sweep: {mode: zip, ramp_time: [0s, 4s, 0s, 4s, 0s, 4s]}
"""


def test_a_zip_sweep_that_repeats_points_is_refused_with_the_fix():
    # alone: six rows, two points; each run would store two results and overwrite the other four
    msg = error_of(ZIP_REPEATED)
    assert msg == ("s.yaml:5: workload 'rr': sweep: points 1, 3 and 5 are one point (ramp_time=0.0); "
                   "points 2, 4 and 6 are one point (ramp_time=4.0); a run keeps one result per point, so the later "
                   "would overwrite the earlier. List each value (zip: each row) once and set `repetitions: 3` to "
                   "measure every point 3 times (whole passes over the plan, stored apart as rep=1, 2, ...)")
    # beside another list whose rows repeat with it: the same rows
    beside = error_of(ZIP_REPEATED.replace("0s, 4s]}", "0s, 4s], iodepth: [1, 2, 1, 2, 1, 2]}"))
    assert "points 1, 3 and 5 are one point (ramp_time=0.0, iodepth=1)" in beside
    # a workload's own sweep is reported at its line and by its path
    own = error_of(ZIP_REPEATED.replace("bs: 4k}", "bs: 4k, sweep: {mode: zip, iodepth: [1, 2, 1]}}")
                   .replace("sweep: {mode: zip, ramp_time: [0s, 4s, 0s, 4s, 0s, 4s]}\n", ""))
    assert own.startswith("s.yaml:4: workload 'rr': workloads[0].sweep: points 1 and 3 are one point (iodepth=1)")


def test_repeated_values_in_distinct_zip_rows_are_points():
    s = parse(ZIP_REPEATED.replace("0s, 4s]}", "0s, 4s], iodepth: [1, 1, 8, 8, 32, 32]}"))
    assert s.workloads[0].sweep is not None


def test_a_product_sweep_cannot_repeat_a_point_either():
    # values equal once normalized are one point too: 4k is 4096
    msg = error_of(ZIP_REPEATED.replace("sweep: {mode: zip, ramp_time: [0s, 4s, 0s, 4s, 0s, 4s]}",
                                        "sweep: {bs: [4k, 8k, 4096], iodepth: [1, 2]}"))
    assert ("s.yaml:5: workload 'rr': sweep: points 1 and 5 are one point (bs=4096, iodepth=1); points 2 and 6 "
            "are one point (bs=4096, iodepth=2);") in msg
    assert "`repetitions: 2`" in msg
    # a suite already repeated: the repetitions that give each point as many trials as written
    assert "`repetitions: 6`" in error_of(ZIP_REPEATED + "repetitions: 2\n")
