"""RGW reconciliation: every request the client made against RGW's counters (pure logic)."""

from __future__ import annotations

from types import SimpleNamespace

from fathom.analysis import reconcile

MIB4 = 4 << 20


def _rgw(**kw: float) -> dict[str, float]:
    return {"req": 0.0, "failed_req": 0.0, "get": 0.0, "get_b": 0.0, "put": 0.0, "put_b": 0.0, **kw}


def test_foreign_traffic_and_failures_the_client_never_saw_are_a_mismatch():
    # the client did 100 GETs; RGW served 230 GETs, 5000 foreign PUTs and 40 failed requests (64 slots, 4 MiB)
    client = {"read": {"ops": 100, "bytes": 100 * MIB4, "errors": 0}}
    rgw = _rgw(req=230 + 5000 + 40, failed_req=40, get=230, get_b=230 * MIB4, put=5000, put_b=5000 * MIB4)
    got = reconcile.reconcile(client, rgw, buckets=1, max_object=MIB4)
    assert not got["ok"]
    bad = {r["counter"]: r for r in got["rows"] if not r["ok"]}
    assert set(bad) == {"get", "get_b", "put", "put_b", "req", "failed_req"}
    assert bad["get"]["diff"] == 130 and bad["failed_req"]["diff"] == 40 and bad["req"]["diff"] == 5170


def test_a_clean_run_with_prefill_multipart_and_retries_matches():
    # mixed: 1000 prefill puts of 4 MiB, then 5000 gets (3 failed) and 800 puts, 100 of them multipart uploads of
    # 4 parts each; 7 retries after 503s; the metadata object's put and get, one probe
    client = {"read": {"ops": 4997, "bytes": 4997 * MIB4, "errors": 3},
              "write": {"ops": 800, "bytes": 800 * MIB4, "errors": 0}}
    summary = {"prefill": {"ops": 1000, "seconds": 9.0, "complete": True},
               "s3": {"multipart": {"uploads": 100, "parts": 400, "aborted": 0}, "retries": {"HTTP 503 SlowDown": 7}}}
    extra = reconcile.beyond_ops([summary])
    assert extra == {"prefill": 1000, "uploads": 100, "parts": 400, "aborted": 0, "retries": 7}
    puts = 1000 + 700 + 400  # RGW counts each part as a put
    req = 5000 + 800 + 1000 + 400 + 100 + 7 + 3
    rgw = _rgw(req=req, failed_req=3 + 7, get=5000 + 1, get_b=4997 * MIB4 + 200, put=puts + 1,
               put_b=1800 * MIB4 + 200)
    got = reconcile.reconcile(client, rgw, buckets=1, max_object=MIB4, extra=extra)
    assert got["ok"], [r for r in got["rows"] if not r["ok"]]
    # RGW counting an upload as one put is right too
    assert reconcile.reconcile(client, {**rgw, "put": 1000 + 800}, buckets=1, max_object=MIB4, extra=extra)["ok"]
    # without the prefill and the parts, the same counters would be a false mismatch
    assert not reconcile.reconcile(client, rgw, buckets=1, max_object=MIB4)["ok"]


def test_the_tolerance_is_relative_with_a_floor():
    client = {"write": {"ops": 100_000, "bytes": 100_000 * 4096, "errors": 0}}
    near = _rgw(req=100_900, put=100_900, put_b=100_900 * 4096)  # 0.9% over: RGW's own requests at scale
    assert reconcile.reconcile(client, near, max_object=4096)["ok"]
    far = _rgw(req=103_000, put=103_000, put_b=103_000 * 4096)
    assert not reconcile.reconcile(client, far, max_object=4096)["ok"]


def test_a_points_check_counts_ramp_and_main_phase_intervals_and_the_engines_extras():
    ivs = [{"ramp": True, "ops": {"read": {"ops": 40, "bytes": 40 * 4096, "errors": 0}}},
           {"ramp": False, "ops": {"read": {"ops": 60, "bytes": 60 * 4096, "errors": 1}}},
           {"ramp": False, "host": "", "instance": -1, "ops": {"read": {"ops": 100, "bytes": 0, "errors": 0}}}]
    assert reconcile.client_ops(ivs) == {"read": {"ops": 100, "bytes": 100 * 4096, "errors": 1}}
    perf = {"client.rgw.a": {"rgw.req": 104, "rgw.failed_req": 1, "rgw.get": 102, "rgw.get_b": 100 * 4096 + 50,
                             "rgw.put": 1, "rgw.put_b": 50}}
    res = SimpleNamespace(extra={"engine_requests": [{"s3": None, "prefill": None}]})
    got = reconcile.point_check(res, ivs, perf, buckets=1, object_size=4096)
    assert got is not None and got["ok"] and got["rgw"]["req"] == 104
