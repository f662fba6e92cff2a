"""RGW reconciliation: every request the client made against RGW's counters (pure logic)."""

from __future__ import annotations

from types import SimpleNamespace

from fathom.interfaces import reconcile

MIB4 = 4 << 20


def _rgw(**kw: float) -> dict[str, float]:
    return {"req": 0.0, "failed_req": 0.0, "get": 0.0, "get_b": 0.0, "put": 0.0, "put_b": 0.0, **kw}


def _bad(got: dict) -> dict[str, dict]:
    return {r["counter"]: r for r in got["rows"] if not r["ok"]}


def test_foreign_traffic_and_failures_the_client_never_saw_are_a_mismatch():
    # the client did 100 GETs; RGW served 230 GETs, 5000 foreign PUTs and 40 failed requests (64 slots, 4 MiB)
    client = {"read": {"ops": 100, "bytes": 100 * MIB4, "errors": 0}}
    rgw = _rgw(req=230 + 5000 + 40, failed_req=40, get=230, get_b=230 * MIB4, put=5000, put_b=5000 * MIB4)
    got = reconcile.reconcile(client, rgw, buckets=1, max_object=MIB4)
    assert not got["ok"]
    bad = _bad(got)
    assert set(bad) == {"get", "get_b", "put", "put_b", "req", "failed_req"}
    assert bad["get"]["diff"] == 130 and bad["failed_req"]["diff"] == 40 and bad["req"]["diff"] == 5170
    assert reconcile.describe(bad["get"]) == "get 230 vs client 100 (off by +130, 6 allowed)"
    assert reconcile.describe(bad["failed_req"]) == "failed_req 40 vs client 0 (off by +40, 6 allowed)"


def test_a_clean_run_with_prefill_multipart_and_retries_matches():
    # mixed: 1000 prefill puts of 4 MiB, then 5000 gets (3 failed) and 800 puts, 100 of them multipart uploads of
    # 4 parts each; 7 retries after 503s; the metadata object's put and get, one probe
    client = {"read": {"ops": 4997, "bytes": 4997 * MIB4, "errors": 3},
              "write": {"ops": 800, "bytes": 800 * MIB4, "errors": 0}}
    summary = {"prefill": {"ops": 1000, "seconds": 9.0, "complete": True},
               "s3": {"multipart": {"uploads": 100, "parts": 400, "aborted": 0}, "retries": {"HTTP 503 SlowDown": 7}}}
    extra = reconcile.beyond_ops([summary])
    assert extra == {"prefill": 1000, "uploads": 100, "parts": 400, "aborted": 0, "retries": 7, "setup_503s": 0,
                     "abandoned": 0}
    puts = 1000 + 700 + 400  # RGW counts each part as a put
    # every request: gets (the 3 failed ones too), puts, prefill, parts, completes, retries; the control three
    req = 5000 + 800 + 1000 + 400 + 100 + 7 + 3
    rgw = _rgw(req=req, failed_req=3 + 7, get=5000 + 1, get_b=4997 * MIB4 + 200, put=puts + 1,
               put_b=1800 * MIB4 + 200)
    got = reconcile.reconcile(client, rgw, buckets=1, max_object=MIB4, extra=extra)
    assert got["ok"], _bad(got)
    # RGW counting an upload as one put is right too
    assert reconcile.reconcile(client, {**rgw, "put": 1000 + 800}, buckets=1, max_object=MIB4, extra=extra)["ok"]
    # without the prefill and the parts, the same counters would be a false mismatch
    assert not reconcile.reconcile(client, rgw, buckets=1, max_object=MIB4)["ok"]


def test_heads_are_rgw_gets_without_bytes():
    client = {"read": {"ops": 600, "bytes": 600 * 65536, "errors": 0}, "stat": {"ops": 400, "bytes": 0, "errors": 0}}
    rgw = _rgw(req=1000, get=1000, get_b=600 * 65536)
    got = reconcile.reconcile(client, rgw, max_object=65536)
    assert got["ok"], _bad(got)
    assert next(r for r in got["rows"] if r["counter"] == "get")["what"] == "read+stat"


def test_failed_requests_are_a_range_up_to_the_clients_errors_and_retries():
    # 50 gets timed out at the client (RGW served them), 20 were refused before reaching the op (503 rate limit)
    client = {"read": {"ops": 930, "bytes": 930 * 4096, "errors": 70}}
    rgw = _rgw(req=1000, failed_req=20, get=980, get_b=980 * 4096)
    got = reconcile.reconcile(client, rgw, max_object=4096)
    assert got["ok"], _bad(got)
    row = next(r for r in got["rows"] if r["counter"] == "failed_req")
    assert (row["low"], row["client"], row["diff"]) == (0, 70, 0)
    # errors that never reached RGW (connection refused): fewer requests, still no mismatch
    assert reconcile.reconcile(client, _rgw(req=930, get=930, get_b=930 * 4096), max_object=4096)["ok"]
    # but RGW failing more requests than the client saw fail is a mismatch
    assert set(_bad(reconcile.reconcile(client, {**rgw, "failed_req": 200}, max_object=4096))) == {"failed_req"}


def test_setup_requests_refused_with_503_are_counted_refused_requests():
    # 300 puts under a full request throttle; the metadata put at the end was refused 40 times before it went in
    client = {"write": {"ops": 300, "bytes": 300 * 65536, "errors": 0}}
    extra = reconcile.beyond_ops([{"s3": {"setup_503s": 40}}])
    assert extra["setup_503s"] == 40
    rgw = _rgw(req=300 + 40 + 3, failed_req=40, put=301, put_b=300 * 65536 + 200)
    got = reconcile.reconcile(client, rgw, max_object=65536, extra=extra)
    assert got["ok"], _bad(got)
    row = next(r for r in got["rows"] if r["counter"] == "failed_req")
    assert (row["low"], row["client"]) == (40, 40)
    # without them, RGW's 40 refusals and 40 requests more would be a false mismatch
    assert set(_bad(reconcile.reconcile(client, rgw, max_object=65536))) == {"req", "failed_req"}


def test_aborted_uploads_and_abandoned_ops():
    # 10 uploads of 3 parts; 2 aborted after 1 part each (create, part, failing part, abort); 4 ops abandoned at exit
    client = {"write": {"ops": 10, "bytes": 10 * 3 * (8 << 20), "errors": 2}}
    summary = {"s3": {"multipart": {"uploads": 10, "parts": 32, "aborted": 2}}, "in_flight_abandoned": 4}
    extra = reconcile.beyond_ops([summary])
    req = 10 * (1 + 3 + 1) + 2 * (1 + 1 + 1 + 1) + 4  # abandoned requests RGW counted
    rgw = _rgw(req=req, put=32 + 2 + 4, put_b=(32 + 2) * (8 << 20))
    assert reconcile.reconcile(client, rgw, max_object=24 << 20, extra=extra)["ok"]
    # the abandoned ops are the only slack beyond the floor: 10 more requests are not explained
    assert set(_bad(reconcile.reconcile(client, {**rgw, "req": req + 10}, max_object=24 << 20, extra=extra))) \
        == {"req"}


def test_the_tolerance_is_relative_with_a_floor():
    client = {"write": {"ops": 100_000, "bytes": 100_000 * 4096, "errors": 0}}
    near = _rgw(req=100_900, put=100_900, put_b=100_900 * 4096)  # 0.9% over
    assert reconcile.reconcile(client, near, max_object=4096)["ok"]
    far = _rgw(req=103_000, put=103_000, put_b=103_000 * 4096)
    assert not reconcile.reconcile(client, far, max_object=4096)["ok"]
    # a small run: the floor (control requests, two per bucket), not a percentage
    small = {"write": {"ops": 10, "bytes": 10 * 4096, "errors": 0}}
    assert reconcile.reconcile(small, _rgw(req=10 + 4 + 2 * 4, put=11, put_b=11 * 4096), buckets=4,
                               max_object=4096)["ok"]
    assert not reconcile.reconcile(small, _rgw(req=10 + 13, put=11, put_b=11 * 4096), buckets=1,
                                   max_object=4096)["ok"]


def test_an_rgw_without_get_and_put_counters_compares_requests_only():
    # op counters that did not move (or an RGW without any: neither get/put nor an rgw_op section): req and
    # failed_req say all there is
    client = {"read": {"ops": 100, "bytes": 100 * 4096, "errors": 0}}
    got = reconcile.reconcile(client, _rgw(req=101), max_object=4096)
    assert got["ok"] and [r["counter"] for r in got["rows"]] == ["req", "failed_req"] and "req and failed_req" in \
        got["note"]
    assert not reconcile.reconcile(client, _rgw(req=5101), max_object=4096)["ok"]


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
    # one engine: its prefill and abandoned ops from the point's extra
    one = SimpleNamespace(extra={"prefill": {"ops": 30}, "in_flight_abandoned": 2})
    perf1 = {"client.rgw.a": {"rgw.req": 136, "rgw.put": 31, "rgw.put_b": 30 * 4096 + 50, "rgw.get": 103,
                              "rgw.get_b": 100 * 4096 + 50}}
    assert reconcile.point_check(one, ivs, perf1, buckets=1, object_size=4096)["ok"]
    assert reconcile.point_check(res, ivs, {"osd.0": {"osd.op_r": 5}}, buckets=1, object_size=4096) is None


def test_squid_and_tentacle_op_counters_are_compared_and_named():
    """Tentacle's rgw section has req and failed_req only; its op counters are rgw_op's put_obj_ops/_bytes,
    get_obj_ops/_bytes, del_obj_ops, list_obj_ops: compared as the old get/put were, and the check says which
    set it used."""
    ivs = [{"ramp": False, "ops": {"read": {"ops": 100, "bytes": 100 * 4096, "errors": 0},
                                   "remove": {"ops": 20, "bytes": 0, "errors": 0},
                                   "list": {"ops": 5, "bytes": 0, "errors": 0}}}]
    tentacle = {"rgw.req": 127, "rgw.failed_req": 1, "rgw_op.get_obj_ops": 102,
                "rgw_op.get_obj_bytes": 100 * 4096 + 50, "rgw_op.get_obj_lat": {"count": 102, "sum": 0.2, "avg": 0.002},
                "rgw_op.put_obj_ops": 1, "rgw_op.put_obj_bytes": 50, "rgw_op.del_obj_ops": 20,
                "rgw_op.list_obj_ops": 6}
    res = SimpleNamespace(extra={"engine_requests": [{"s3": None, "prefill": None}]})
    got = reconcile.point_check(res, ivs, {"client.rgw.a": tentacle}, buckets=1, object_size=4096)
    assert got is not None and got["ok"], _bad(got)
    # put: neither side put beyond the control objects (within the floor), so no put rows
    assert [r["counter"] for r in got["rows"]] == ["get_obj_ops", "get_obj_bytes", "del_obj_ops", "list_obj_ops",
                                                   "req", "failed_req"]
    assert "rgw_op section (Squid and later)" in got["counters"] and got["note"] is None
    # foreign GETs show in get_obj_ops, not only in req
    foreign = {**tentacle, "rgw.req": 5127, "rgw_op.get_obj_ops": 5102}
    bad = _bad(reconcile.point_check(res, ivs, {"client.rgw.a": foreign}, buckets=1, object_size=4096))
    assert set(bad) == {"get_obj_ops", "req"}
    assert reconcile.describe(bad["get_obj_ops"]).startswith("get_obj_ops 5102 vs client 100")
    # the old set is still read, and named
    old = reconcile.point_check(res, ivs, {"client.rgw.a": {"rgw.req": 127, "rgw.get": 102, "rgw.get_b": 100 * 4096,
                                                            "rgw.put": 1}}, buckets=1, object_size=4096)
    assert old["ok"] and "rgw section (Pacific to Reef)" in old["counters"]
    assert "get" in [r["counter"] for r in old["rows"]]
    # an admin socket's perf dumps (fathom bench s3): the same, from the raw sections
    before = {"rgw": {"req": 10, "failed_req": 0, "qlen": 0, "qactive": 0},
              "rgw_op": {"put_obj_ops": 3, "put_obj_bytes": 300, "get_obj_ops": 0, "get_obj_bytes": 0,
                         "get_obj_lat": {"avgcount": 0, "sum": 0.0}, "del_obj_ops": 0, "list_obj_ops": 0}}
    after = {"rgw": {"req": 60, "failed_req": 0, "qlen": 0, "qactive": 1},
             "rgw_op": {**before["rgw_op"], "get_obj_ops": 50, "get_obj_bytes": 50 * 4096,
                        "get_obj_lat": {"avgcount": 50, "sum": 0.1}}}
    d = reconcile.deltas(before, after)
    assert d == {"req": 50, "failed_req": 0, "qlen": 0, "qactive": 1, "put": 0, "put_b": 0, "get": 50,
                 "get_b": 50 * 4096, "del": 0, "list": 0}
    got = reconcile.reconcile({"read": {"ops": 50, "bytes": 50 * 4096, "errors": 0}}, d, max_object=4096)
    assert got["ok"] and "get_obj_ops" in [r["counter"] for r in got["rows"]] and "rgw_op" in got["counters"]
