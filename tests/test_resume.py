"""What a resumed run must restore (resume.py): which finished writes a remaining read needs, and when."""

from __future__ import annotations

from fathom.suite import plan, spec
from fathom.run import resume

SUITE = """\
name: r
prep:
  pools: [{name: a, application: rados}, {name: b, application: rados}]
defaults: {engine: rados-bench, interface: rados, pool: a, runtime: 1s, ramp_time: 0s}
workloads:
  - {name: w1, rw: write}
  - {name: seq, rw: read}
  - {name: w2, rw: write, iodepth: 4}
  - {name: rand, rw: randread}
  - {name: other, rw: read, pool: b}
  - {name: wb, rw: write, pool: b}
"""


def setup() -> tuple[spec.Suite, dict[str, plan.Point]]:
    suite = spec.parse(SUITE, "r.yaml", False, None)
    return suite, {p.key: p for p in plan.expand(suite)}


def test_a_read_reads_the_last_earlier_write_on_its_pool():
    suite, pts = setup()
    points = list(pts.values())
    assert resume.producer(points, pts["seq"], suite).key == "w1"
    assert resume.producer(points, pts["rand"], suite).key == "w2"  # w2 replaced w1's run-name metadata
    assert resume.producer(points, pts["other"], suite) is None  # wb comes after it, on pool b
    assert resume.reads_run_data(pts["seq"]) and not resume.reads_run_data(pts["w1"])
    assert resume.writes_run_data(pts["wb"]) and resume.pool_of(pts["wb"], suite) == "b"


def test_lost_finished_writes_run_again_once_before_their_first_remaining_reader():
    suite, pts = setup()
    points = list(pts.values())
    done = {"w1", "seq", "w2"}
    got = resume.rewrites(points, done, {"w1", "w2"}, suite)
    assert [(r.write.key, r.before.key, r.pool) for r in got] == [("w2", "rand", "a")]
    # nothing lost: nothing to write again
    assert resume.rewrites(points, done, set(), suite) == []
    # the producer not finished: it runs in this attempt before its reader, measured
    assert resume.rewrites(points, {"w1", "seq"}, {"w1"}, suite) == []
    # both reads remaining, w1 lost: w1 again before seq; rand's producer w2 runs measured
    got = resume.rewrites(points, {"w1"}, {"w1"}, suite)
    assert [(r.write.key, r.before.key) for r in got] == [("w1", "seq")]


def test_readers_of_finished_writes_and_pools_holding_data():
    suite, pts = setup()
    points = list(pts.values())
    assert [p.key for p in resume.readers_without_data(points, {"w1"}, suite)] == ["seq"]
    assert [p.key for p in resume.readers_without_data(points, {"w1", "seq", "w2"}, suite)] == ["rand"]
    assert resume.data_pools(points, {"w1", "seq"}, suite) == {"a"}
    assert resume.data_pools(points, set(), suite) == set()


def test_an_s3_get_reads_the_last_s3_put_never_a_rados_write():
    suite = spec.parse("""\
name: m
cluster: {rgw: true}
prep:
  pools: [{name: a, application: rados}]
defaults: {engine: fathom-engine, runtime: 1s, ramp_time: 0s}
workloads:
  - {name: put, interface: s3, rw: write}
  - {name: w, interface: rados, rw: write, pool: a}
  - {name: put-b, interface: s3, rw: write, bucket: b-1}
  - {name: get, interface: s3, rw: randread}
  - {name: r, interface: rados, rw: read, pool: a}
  - {name: get-b, interface: s3, rw: randread, bucket: b-1}
""", "m.yaml", False, None)
    pts = {p.key: p for p in plan.expand(suite)}
    points = list(pts.values())
    assert resume.producer(points, pts["get"], suite).key == "put"  # the run's own buckets, not b-1
    assert resume.producer(points, pts["get-b"], suite).key == "put-b"
    assert resume.producer(points, pts["r"], suite).key == "w"
    # the run's buckets were removed when an attempt ended: the PUT runs again before the GET
    got = resume.rewrites(points, {"put", "w"}, {"put"}, suite)
    assert [(r.write.key, r.before.key) for r in got] == [("put", "get")]
