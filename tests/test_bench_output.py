"""rados bench / rbd bench layouts and statistics from hand-made engine records (no Ceph)."""

from __future__ import annotations

import json
import math
import re

import pytest

from fathom.cluster.ceph import Connection
from fathom.dropin import output as fmt
from fathom.dropin.rados import RadosArgs, build_spec, check_run_name, object_pattern, object_prefix
from fathom.dropin.rbd import build_spec as rbd_spec
from fathom.dropin.rbd import engine_rw, parse_image
from fathom.errors import UsageError

MIB = 1048576


def interval(t, ops, nbytes, kind="write", dt=1.0, in_flight=16, started=None, finished=None, last=2_000_000,
             mean=1_500_000, mx=9_000_000):
    return {"type": "interval", "ts": 1_800_000_000.0 + t, "t": t, "dt": dt, "ramp": False, "in_flight": in_flight,
            "started": started if started is not None else 0, "finished": finished if finished is not None else 0,
            "ops": {kind: {"ops": ops, "bytes": nbytes, "errors": 0, "lat_mean_ns": mean if ops else 0.0,
                           "lat_max_ns": mx if ops else 0, "last_lat_ns": last if ops else 0, "hist": None}}}


def summary(kind, ops, nbytes, t, lat=None):
    lat = lat or {"mean": 1_500_000, "stdev": 500_000, "min": 200_000, "max": 9_000_000, "p50": 1_400_000,
                  "p90": 2_500_000, "p99": 6_000_000, "p999": 8_500_000}
    return {"type": "summary", "measured_s": t, "ops": {kind: {"ops": ops, "bytes": nbytes, "lat_ns": lat}}}


# ---- number formatting -----------------------------------------------------------------

@pytest.mark.parametrize("x,expect", [(0, "0"), (0.0, "0"), (5.79492, "5.79492"), (9.402312, "9.40231"),
                                      (0.0138254, "0.0138254"), (22.0184123, "22.0184"), (1393.0, "1393"),
                                      (1234567.0, "1.23457e+06"), (0.00001234, "1.234e-05")])
def test_cpp_g_matches_ostream_default(x, expect):
    assert fmt.cpp_g(x) == expect


@pytest.mark.parametrize("v,expect", [(0, "0 B"), (512, "512 B"), (1024, "1 KiB"), (81 * MIB, "81 MiB"),
                                      (int(9.7 * MIB), "9.7 MiB"), (int(19.4 * MIB), "19 MiB"),
                                      (int(1.52 * 1024), "1.5 KiB"), (int(9.99 * MIB), "10 MiB"),
                                      (3 * 1024**3, "3 GiB")])
def test_byte_u_matches_ceph(v, expect):
    assert fmt.byte_u(v) == expect


def test_stdev_is_sample_stdev():
    assert fmt.stdev([]) == 0.0
    assert fmt.stdev([5.0]) == 0.0
    assert fmt.stdev([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7))


# ---- rados bench table ---------------------------------------------------------------------

def test_rados_header_and_row_layout_match_rados_bench():
    # copied from `rados bench -p bp 3 write -b 4096` (ceph 16.2.15)
    assert fmt.RADOS_HEADER == "  sec Cur ops   started  finished  avg MB/s  cur MB/s last lat(s)  avg lat(s)"
    tab = fmt.RadosTable("write")
    lines = tab.start(1_800_000_000.0)
    assert lines == [fmt.RADOS_HEADER,
                     "    0       0         0         0         0         0           -           0"]
    rec = interval(1.0, 1484, 1484 * 4096, started=1500, finished=1484, last=13_825_400, mean=9_658_220)
    (row,) = tab.interval(rec)
    assert row == "    1      16      1500      1484   5.79688   5.79688   0.0138254  0.00965822"
    # column boundaries line up with the header's
    assert len(row) == len(fmt.RADOS_HEADER)


def test_rados_row_when_nothing_finished_shows_zero_and_dash():
    tab = fmt.RadosTable("write")
    tab.start()
    tab.interval(interval(1.0, 100, 100 * 4096, started=116, finished=100))
    (row,) = tab.interval(interval(2.0, 0, 0, started=116, finished=100))
    cols = row.split()
    assert cols[0] == "2" and cols[5] == "0" and cols[6] == "-"
    assert tab.datas[-1]["cur_bw"] == 0.0 and tab.datas[-1]["last_lat"] is None


def test_rados_header_repeats_every_20_rows_with_latency_line():
    tab = fmt.RadosTable("write")
    out = tab.start()
    for s in range(1, 23):
        out += tab.interval(interval(float(s), 100, 100 * 4096, started=100 * s + 16, finished=100 * s))
    headers = [i for i, line in enumerate(out) if line == fmt.RADOS_HEADER]
    assert headers == [0, 22]  # header, rows 0..19, latency line, header, rows 20..
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}[+-]\d{4} min lat: \S+ max lat: 0\.009 avg lat: 0\.0015$",
                    out[21]), out[21]
    assert out[23].split()[0] == "20"


def test_rados_short_tail_interval_is_counted_not_printed():
    tab = fmt.RadosTable("write")
    tab.start()
    tab.interval(interval(1.0, 1000, 1000 * 4096, finished=1000))
    assert tab.interval(interval(1.01, 16, 16 * 4096, dt=0.01, in_flight=0, finished=1016)) == []
    assert tab.cum_ops == 1016
    assert tab.iops_samples == [1000.0]  # a 10 ms tail is not a per-second sample


def test_rados_summary_fields_and_correct_stddevs():
    tab = fmt.RadosTable("write")
    tab.start()
    per_s = [1000, 1200, 800, 1000]
    done = 0
    for i, n in enumerate(per_s, 1):
        done += n
        tab.interval(interval(float(i), n, n * 4096, finished=done))
    s = fmt.rados_summary("write", summary("write", 4000, 4000 * 4096, 4.0), tab, 4096, 4096)
    assert list(s)[:16] == ["total_time_run", "total_writes_made", "write_size", "object_size", "bandwidth",
                            "stddev_bandwidth", "max_bandwidth", "min_bandwidth", "average_iops", "stddev_iops",
                            "max_iops", "min_iops", "average_latency", "stddev_latency", "max_latency",
                            "min_latency"]
    assert s["total_writes_made"] == 4000 and s["write_size"] == 4096
    assert s["average_iops"] == 1000.0
    assert s["stddev_iops"] == pytest.approx(fmt.stdev(per_s))  # 163.3, not rados bench's garbage
    assert s["max_iops"] == 1200 and s["min_iops"] == 800
    assert s["bandwidth"] == pytest.approx(4000 * 4096 / 4 / MIB)
    assert s["stddev_bandwidth"] == pytest.approx(fmt.stdev([n * 4096 / MIB for n in per_s]))
    assert s["average_latency"] == pytest.approx(0.0015) and s["min_latency"] == pytest.approx(0.0002)
    assert s["latency_percentiles"] == pytest.approx({"p50": 0.0014, "p90": 0.0025, "p99": 0.006, "p99.9": 0.0085,
                                                      "max": 0.009})
    json.dumps(s, allow_nan=False)


def test_rados_summary_text_layout():
    tab = fmt.RadosTable("write")
    tab.start()
    tab.interval(interval(1.0, 1393, 1393 * 4096, finished=1393))
    s = fmt.rados_summary("write", summary("write", 1393, 1393 * 4096, 1.0), tab, 4096, 4096)
    lines = fmt.format_rados_summary("write", s)
    assert lines[0] == "Total time run:         1"
    assert lines[1] == "Total writes made:      1393"
    assert lines[4] == "Bandwidth (MB/sec):     " + fmt.cpp_g(1393 * 4096 / MIB)
    assert lines[8] == "Average IOPS:           1393"
    assert [line.split(":")[0] for line in lines] == [
        "Total time run", "Total writes made", "Write size", "Object size", "Bandwidth (MB/sec)", "Stddev Bandwidth",
        "Max bandwidth (MB/sec)", "Min bandwidth (MB/sec)", "Average IOPS", "Stddev IOPS", "Max IOPS", "Min IOPS",
        "Average Latency(s)", "Stddev Latency(s)", "Max latency(s)", "Min latency(s)", "Latency p50(s)",
        "Latency p90(s)", "Latency p99(s)", "Latency p99.9(s)", "Latency max(s)"]
    reads = fmt.format_rados_summary("seq", fmt.rados_summary("seq", summary("read", 10, 40960, 1.0),
                                                              fmt.RadosTable("read"), 4096, 4096))
    assert reads[0] == "Total time run:       1" and reads[1] == "Total reads made:     10"


def test_rados_summary_with_no_ops_is_null_not_nan():
    tab = fmt.RadosTable("write")
    s = fmt.rados_summary("write", {"measured_s": 0.0, "ops": {}}, tab, 4096, 4096)
    assert s["average_latency"] is None and s["latency_percentiles"]["p99"] is None
    json.dumps(s, allow_nan=False)
    assert fmt.format_rados_summary("write", s)[12] == "Average Latency(s):     0"


def test_rados_json_document():
    tab = fmt.RadosTable("read")
    tab.start()
    tab.interval(interval(1.0, 10, 40960, kind="read", finished=10))
    s = fmt.rados_summary("seq", summary("read", 10, 40960, 1.0), tab, 4096, 4096)
    doc = fmt.rados_json("seq", tab, s, None, {"run_id": 3})
    assert doc["datas"][1]["finished"] == 10 and doc["total_reads_made"] == 10 and doc["fathom"] == {"run_id": 3}
    assert "latency_percentiles" in doc
    json.loads(json.dumps(doc, allow_nan=False))


# ---- rbd bench ---------------------------------------------------------------------------

def test_rbd_layout_matches_rbd_bench():
    assert fmt.rbd_preamble("write", 4096, 16, 62914560, "rand", 50) == \
        "bench  type write io_size 4096 io_threads 16 bytes 62914560 pattern random"
    assert fmt.rbd_preamble("readwrite", 4096, 16, 20971520, "seq", 70) == \
        "bench  type readwrite read:write=70:30 io_size 4096 io_threads 16 bytes 20971520 pattern sequential"
    assert fmt.rbd_preamble("read", 4096, 16, 1, "full-seq", 50).endswith("pattern full sequential")
    assert fmt.RBD_HEADER == "  SEC       OPS   OPS/SEC   BYTES/SEC"
    tab = fmt.RbdTable()
    (row,) = tab.interval(interval(1.0, 3502, 3502 * 4096))
    assert row == "    1      3502      3502    14 MiB/s"


def test_rbd_rolling_window_of_five():
    tab = fmt.RbdTable()
    for s, n in enumerate([100, 100, 100, 100, 100, 700], 1):
        tab.interval(interval(float(s), n, n * 4096))
    assert tab.datas[4]["ops_per_sec"] == 100
    assert tab.datas[5]["ops_per_sec"] == pytest.approx((4 * 100 + 700) / 5)
    assert tab.datas[5]["ops"] == 1200


def test_rbd_summary_readwrite():
    summ = {"measured_s": 2.0, "ops": {
        "read": {"ops": 300, "bytes": 300 * 4096, "lat_ns": {"mean": 1e6, "stdev": 1e5, "min": 1e5, "max": 5e6,
                                                            "p50": 1e6, "p90": 2e6, "p99": 4e6, "p999": 5e6}},
        "write": {"ops": 100, "bytes": 100 * 4096, "lat_ns": {"mean": 2e6, "stdev": 1e5, "min": 1e5, "max": 7e6,
                                                             "p50": 2e6, "p90": 3e6, "p99": 6e6, "p999": 7e6}}}}
    s = fmt.rbd_summary(summ, {"p50": 1.2e6, "p90": 2.5e6, "p99": 5e6, "p999": 6.9e6})
    assert s["ops"] == 400 and s["ops_per_sec"] == 200 and s["read"]["ops_per_sec"] == 150
    assert s["latency_percentiles"]["p50"] == pytest.approx(0.0012) and s["latency_percentiles"]["max"] == 0.007
    lines = fmt.format_rbd_summary(s, "readwrite")
    assert lines[0] == "elapsed: 2   ops: 400   ops/sec: 200   bytes/sec: 800 KiB/s"
    assert lines[1] == "read_ops: 300   read_ops/sec: 150   read_bytes/sec: 600 KiB/s"
    assert lines[2] == "write_ops: 100   write_ops/sec: 50   write_bytes/sec: 200 KiB/s"
    assert lines[3].startswith("read_lat avg(s): 0.001")
    json.dumps(s, allow_nan=False)


# ---- naming and specs ------------------------------------------------------------------------

def test_run_names_and_object_patterns_never_overlap():
    assert object_prefix("a") == "fathom_bench.a"
    for bad in ("a.b", "a/b", "", "x" * 101, "with space"):
        with pytest.raises(UsageError):
            check_run_name(bad)
    pa = object_pattern(object_prefix("a"))
    assert pa.match("fathom_bench.a.0") and pa.match("fathom_bench.a.12345") and pa.match("fathom_bench.a.meta")
    for other in ("fathom_bench.a-1.0", "fathom_bench.ab.1", "fathom_bench.a.1.2", "fathom_bench.a.",
                  "benchmark_data_host_1_object0", "fathom_bench.a.0x", "xfathom_bench.a.1"):
        assert not pa.match(other), other


def test_rados_specs():
    conn = Connection(conf="/c.conf", name="client.admin", keyring="/k")
    w = build_spec(RadosArgs(pool="p", seconds=10, mode="write", op_size=4096, object_size=16384, max_objects=5),
                   conn, "fathom_bench.x").to_json()
    t = dict(w["target"])
    assert t.pop("connection")["keyring"] == "/k"
    assert t == {"kind": "rados", "pool": "p", "op": "write", "pattern": "seq", "prefix": "fathom_bench.x",
                 "object_size": 16384, "op_size": 4096, "objects": 5, "alloc_hint": True}
    assert w["load"] == {"iodepth": 16, "ramp_s": 0.0, "arrival": "uniform", "duration_s": 10.0, "ops": 20}
    assert w["stall_timeout_s"] == 60.0 and w["op_timeout_s"] is None and w["protocol"] == 2
    nh = build_spec(RadosArgs(pool="p", seconds=10, mode="write", hints=False), conn, "fathom_bench.x").to_json()
    assert "alloc_hint" not in nh["target"] and "ops" not in nh["load"]
    s = build_spec(RadosArgs(pool="p", seconds=10, mode="seq"), conn, "fathom_bench.x").to_json()
    assert {k: v for k, v in s["target"].items() if k != "connection"} == {
        "kind": "rados", "pool": "p", "op": "read", "pattern": "seq", "prefix": "fathom_bench.x", "once": True}
    r = build_spec(RadosArgs(pool="p", seconds=10, mode="rand"), conn, "fathom_bench.x").to_json()
    assert r["target"]["pattern"] == "rand" and "once" not in r["target"] and "ops" not in r["load"]


def test_rbd_specs():
    assert parse_image("p/img", None) == ("p", "img") and parse_image("img", None) == ("rbd", "img")
    with pytest.raises(UsageError):
        parse_image("p/img", "q")
    assert engine_rw("readwrite", "rand") == "randrw" and engine_rw("write", "full-seq") == "write"
    conn = Connection(conf="/c.conf")
    seq = rbd_spec(conn, "p", "i", "write", "seq", 4096, 16, 1 << 30, 50, 60.0, 10.0).to_json()
    # --io-total is split over the jobs: the engine bounds each job, as fio's size does
    assert seq["target"]["numjobs"] == 16 and seq["load"]["iodepth"] == 1 and seq["load"]["bytes"] == (1 << 30) // 16
    assert "options" not in seq["target"]["connection"]  # the engine's default: rbd_cache off
    odd = rbd_spec(conn, "p", "i", "write", "seq", 4096, 3, 10 * 4096, 50, 60.0, 10.0).to_json()
    assert odd["load"]["bytes"] == 4 * 4096  # whole blocks per job, the total never cut short
    cached = rbd_spec(conn, "p", "i", "read", "seq", 4096, 16, 1 << 20, 50, 60.0, 10.0, rbd_cache=True).to_json()
    assert cached["target"]["connection"]["options"] == {"rbd_cache": "true"}
    full = rbd_spec(conn, "p", "i", "read", "full-seq", 4096, 8, 1 << 20, 50, 60.0, 10.0).to_json()
    assert full["target"]["numjobs"] == 1 and full["load"]["iodepth"] == 8 and full["target"]["rw"] == "read"


def test_rados_latency_line_takes_min_from_interval_histograms():
    from fathom.results import hdr

    tab = fmt.RadosTable("write")
    out = tab.start()
    for s in range(1, 21):
        h = hdr.new()
        h.record_value(1_000_000 + s * 1000)
        rec = interval(float(s), 1, 4096, finished=s)
        rec["ops"]["write"]["hist"] = hdr.encode(h)
        out += tab.interval(rec)
    line = next(x for x in out if " min lat: " in x)
    assert float(line.split(" min lat: ")[1].split()[0]) == pytest.approx(0.001001, rel=1e-3)


def test_s3_table_adds_every_op_kind_of_a_mixed_interval():
    t = fmt.RadosTable(fmt.ALL_KINDS)
    rec = interval(1.0, 10, 10 * MIB, kind="read", mean=1_000_000)
    rec["ops"]["stat"] = {"ops": 30, "bytes": 0, "errors": 1, "lat_mean_ns": 3_000_000, "lat_max_ns": 12_000_000,
                          "last_lat_ns": 2_500_000, "hist": None}
    t.interval(rec)
    assert (t.cum_ops, t.cum_bytes, t.cum_errors) == (40, 10 * MIB, 1)
    assert t.iops_samples == [40.0] and t.bw_samples == [10.0]
    assert t.lat_sum_ns == 10 * 1_000_000 + 30 * 3_000_000 and t.lat_max_ns == 12_000_000
    assert fmt.combine_kinds([]) == {"ops": 0, "bytes": 0, "errors": 0}


def test_s3_summary_per_request_with_ttfb_and_errors():
    t = fmt.RadosTable(fmt.ALL_KINDS)
    for i in range(1, 4):
        t.interval(interval(float(i), 20, 20 * MIB, kind="read"))
    s = summary("read", 60, 60 * MIB, 3.0)
    s["ops"]["read"]["phases"] = {"ttfb": {"count": 60, "lat_ns": {"p50": 400_000, "p90": 500_000, "p99": 600_000,
                                                                    "p999": 700_000, "max": 800_000}}}
    s["ops"]["write"] = {"ops": 0, "bytes": 0, "errors": 0, "lat_ns": {}}  # the prefill's kind: left out
    s["errors"] = [{"op": "read", "kind": "HTTP 503 SlowDown", "count": 2, "first": "read of b/k/0/1"}]
    out = fmt.s3_summary(s, t, MIB)
    assert list(out["requests"]) == ["GET"] and out["total_ops_made"] == 60 and out["average_iops"] == 20.0
    get = out["requests"]["GET"]
    assert get["ops_per_sec"] == 20.0 and get["bandwidth"] == 20.0 and get["ttfb"]["p99.9"] == 0.0007
    assert out["errors"] == [{"request": "GET", "kind": "HTTP 503 SlowDown", "count": 2, "first": "read of b/k/0/1"}]
    text = "\n".join(fmt.format_s3_summary(out))
    assert "GET: 60 requests   20 req/s   20 MB/s" in text and "TTFB(s)    p50: 0.0004" in text
    assert "Errors: GET HTTP 503 SlowDown: 2" in text and "Total requests made:    60" in text


def test_s3_endpoint_keys_and_ca_resolution(tmp_path, monkeypatch):
    from fathom.dropin.s3 import resolve_endpoint

    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    kf = tmp_path / "s3.json"
    kf.write_text(json.dumps({"endpoint": "http://127.0.0.1:7480", "tls_endpoint": "https://127.0.0.1:7443",
                              "ca_file": str(ca), "access_key": "A", "secret_key": "SECRETXYZ"}))
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    monkeypatch.setenv("S3_KEYS_FILE", str(kf))
    ep = resolve_endpoint(None, None, False, None)
    assert (ep.url, ep.keys_file, ep.ca_file) == ("http://127.0.0.1:7480", str(kf), None)
    ep = resolve_endpoint(None, None, True, None)
    assert (ep.url, ep.ca_file) == ("https://127.0.0.1:7443", str(ca))
    assert resolve_endpoint("h:9000", str(kf), True, None).url == "https://h:9000"
    # the cluster's CA only for the cluster's own TLS endpoint
    assert resolve_endpoint("https://other:443", None, False, None).ca_file is None
    assert "SECRETXYZ" not in json.dumps(ep.describe())
    for args, words in (((None, None, False, str(ca)), "--ca applies"), (("http://h:1", None, True, None), "--tls"),
                        ((None, str(tmp_path / "none.json"), False, None), "--keys-file")):
        with pytest.raises(UsageError, match=words):
            resolve_endpoint(*args)
    kf.write_text("{not json")
    with pytest.raises(UsageError) as e:
        resolve_endpoint(None, None, False, None)
    assert "line 1" in e.value.message


def test_rgw_counters_reconcile_every_request():
    from fathom.interfaces import reconcile

    before = {"rgw": {"req": 10, "failed_req": 0, "get": 5, "get_b": 500, "put": 3, "put_b": 300,
                      "get_initial_lat": {"avgcount": 5, "sum": 0.1}, "qlen": 0}}
    after = {"rgw": {"req": 130, "failed_req": 0, "get": 6, "get_b": 600, "put": 121, "put_b": 300 + 118 * 4096,
                     "qlen": 2}}
    d = reconcile.deltas(before, after)
    assert d == {"req": 120, "failed_req": 0, "get": 1, "get_b": 100, "put": 118, "put_b": 118 * 4096, "qlen": 2}
    # 116 puts, the metadata object's put and get, a bucket probe: within the control floor
    client = {"write": {"ops": 116, "bytes": 116 * 4096, "errors": 0}}
    ok = reconcile.reconcile(client, d, max_object=4096)
    assert ok["ok"] and [(r["counter"], r["diff"]) for r in ok["rows"]] == [
        ("put", 2), ("put_b", 2 * 4096), ("req", 4), ("failed_req", 0)]
    bad = reconcile.reconcile({"write": {"ops": 50, "bytes": 50 * 4096}}, d, max_object=4096)
    assert not bad["ok"] and not bad["rows"][0]["ok"] and bad["rows"][0]["allowed"] == 6
    assert not reconcile.reconcile({}, d)["ok"]


# ---- benches on client hosts ----------------------------------------------------------------

def test_client_object_names_and_cleanup_pattern():
    from fathom.dropin.rados import client_meta_prefixes
    from fathom.engines.clients import client_prefix

    base = object_prefix("a")
    p0 = client_prefix(base, "10.0.0.12:2222", 0)
    assert p0 == "fathom_bench.a.10_0_0_12_2222.0" and client_prefix(base, "local", 1) == "fathom_bench.a.local.1"
    pc = object_pattern(base, clients=True)
    for name in (f"{p0}.7", f"{p0}.meta", "fathom_bench.a.3", "fathom_bench.a.meta"):
        assert pc.match(name), name
    # never another run's objects, nor names fathom does not write
    for other in ("fathom_bench.ab.local.0.1", "fathom_bench.a.local.0", "fathom_bench.a.local.x.1",
                  "fathom_bench.a.h.0.1.2", "fathom_bench.a.1.2"):
        assert not pc.match(other), other
    assert not object_pattern(base).match(f"{p0}.7")
    names = [f"{p0}.1", f"{p0}.meta", "fathom_bench.a.local.0.meta", "fathom_bench.a.meta", "fathom_bench.ab.h.0.meta"]
    assert client_meta_prefixes(names, base) == ["fathom_bench.a.10_0_0_12_2222.0", "fathom_bench.a.local.0"]


def test_the_table_names_the_slowest_host():
    t = fmt.RadosTable("write")
    rec = {"type": "interval", "t": 1.0, "dt": 1.0, "ts": 1.7e9, "in_flight": 4, "started": 10, "finished": 8,
           "ops": {"write": {"ops": 8, "bytes": 8 * 4096, "lat_mean_ns": 1e6, "last_lat_ns": 1e6}}}
    plain = t.interval(rec)
    assert "slowest" not in plain[-1] and "slowest" not in t.datas[-1]
    lines = t.interval({**rec, "t": 2.0, "slowest": {"host": "10.0.0.12", "iops": 2.0}})
    assert lines[-1].endswith("slowest: 10.0.0.12 2 op/s per engine")
    assert t.datas[-1]["slowest"] == {"host": "10.0.0.12", "iops": 2.0}


def test_per_host_lines_flag_a_slow_and_a_lost_host():
    from fathom.dropin.multihost import host_lines

    row = {"engines": 1, "ops": 100, "iops": 100.0, "mib_s": 0.4, "p99_ms": 2.0, "client_cpu_pct": 5.0,
           "lost": False, "slow": False}
    c = {"hosts": [{**row, "host": "local"}, {**row, "host": "h1", "iops": 20.0, "slow": True},
                   {**row, "host": "h2", "lost": True}],
         "clocks": {"h1": {"offset_ms": 0.25, "rtt_ms": 0.5}}, "start_skew_ms": 1.5, "clients_lost": {"h2": "cut"}}
    out = "\n".join(host_lines(c))
    assert "MUCH SLOWER" in out and "LOST" in out and "+0.250" in out and "Start skew: 1.500 ms" in out
    assert "Warning: h1 much slower" in out and "client host h2 lost mid-run (cut)" in out
    assert host_lines({}) == []


def test_s3_summary_adds_p99_with_errors_and_the_drain_note():
    from fathom.results import hdr

    def hist(values):
        h = hdr.new()
        for v in values:
            h.record_value(v)
        return hdr.encode(h)

    t = fmt.RadosTable(fmt.ALL_KINDS)
    t.interval(interval(1.0, 98, 98 * MIB, kind="read"))
    s = summary("read", 98, 98 * MIB, 1.5)
    s.update(window_s=1.0, drain_s=0.5)
    s["ops"]["read"]["hist"] = hist([1_000_000] * 98)
    s["errors"] = [{"op": "read", "kind": "timeout", "count": 2, "first": "read of b/k/0/1",
                    "hist": hist([30_000_000_000] * 2)}]
    out = fmt.s3_summary(s, t, MIB)
    assert out["latency_p99_all"] == pytest.approx(30.0, rel=0.01) and out["drain_s"] == 0.5
    lines = fmt.format_s3_summary(out)
    assert any(re.fullmatch(r"Latency p99 incl\. errors\(s\): 30\.\d+", ln) for ln in lines), lines
    assert lines[-1] == "Note: the rates divide by 1 s of window plus 0.5 s waiting for the slowest op to return"
    json.dumps(out, allow_nan=False)
