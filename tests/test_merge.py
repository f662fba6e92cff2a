"""Pure logic of many-engine points: client host parsing, the exact merge, start skew, per-host rows."""

from __future__ import annotations

import random

import pytest
from hdrh.histogram import HdrHistogram

from fathom.results import hdr, merge
from fathom.errors import UsageError
from fathom.hosts.clients import ClientsSpec, clients_from_args, parse_client


def _hist(values: list[int]) -> str:
    h = hdr.new()
    for v in values:
        h.record_value(v)
    return hdr.encode(h)


def _interval(ts: float, t: float, values: list[int], kind: str = "write") -> dict:
    return {"type": "interval", "ts": ts, "t": t, "dt": 1.0, "ramp": False, "in_flight": 4, "started": 0,
            "finished": 0, "cpu": {"user_s": 0.01, "sys_s": 0.02},
            "ops": {kind: {"ops": len(values), "bytes": 4096 * len(values), "errors": 0,
                           "lat_mean_ns": sum(values) / len(values) if values else 0.0,
                           "lat_max_ns": max(values, default=0), "hist": _hist(values) if values else None}}}


def test_parse_client_forms():
    assert parse_client("local") == {"host": "local"}
    assert parse_client("root@10.0.0.2:2222") == {"host": "10.0.0.2", "user": "root", "port": 2222}
    assert parse_client("node7") == {"host": "node7"}
    assert parse_client("ceph@[fd00::5]:22") == {"host": "[fd00::5]", "user": "ceph", "port": 22}
    with pytest.raises(ValueError, match="user@host"):
        parse_client("a@b@c")
    cs = ClientsSpec.model_validate(["local", "root@h1:2200", {"host": "h2", "instances": 3}])
    assert [h.name for h in cs.hosts] == ["local", "h1:2200", "h2"]
    assert [h.instances for h in cs.hosts] == [1, 1, 3]
    assert cs.on_loss == "continue" and not cs.accept_new_host_keys
    assert ClientsSpec.model_validate(["[fd00::5]"]).hosts[0].name == "[fd00::5]"
    with pytest.raises(ValueError, match="named twice"):
        ClientsSpec.model_validate(["h1", "root@h1"])


def test_clients_from_args_replace_the_suites(tmp_path):
    suite = ClientsSpec.model_validate({"hosts": ["h1", "h2"], "on_loss": "fail"})
    assert clients_from_args(None, None, None) is None
    assert clients_from_args(None, None, suite) == suite
    cs = clients_from_args(["root@h3", "local"], None, suite, accept_new=True)
    assert [h.name for h in cs.hosts] == ["h3", "local"] and cs.on_loss == "fail" and cs.accept_new_host_keys
    f = tmp_path / "clients"
    f.write_text("# lab\nroot@h4\n\nroot@h5:2222  # second\n")
    assert [h.name for h in clients_from_args(None, str(f), None).hosts] == ["h4", "h5:2222"]
    f.write_text("- root@h6\n- {host: h7, instances: 2}\n")
    assert [h.instances for h in clients_from_args(None, str(f), None, on_loss="fail").hosts] == [1, 2]
    with pytest.raises(UsageError, match="--client"):
        clients_from_args(["@@"], None, None)
    with pytest.raises(UsageError, match="clients-file"):
        clients_from_args(None, str(tmp_path / "missing"), None)


def test_fast_merge_is_exact():
    rng = random.Random(5)
    parts = [[int(rng.lognormvariate(12 + j / 4, 0.6)) for _ in range(rng.randint(1, 3000))] for j in range(12)]
    encoded = [_hist(p) for p in parts]
    ref = HdrHistogram(hdr.LOWEST_NS, hdr.HIGHEST_NS, hdr.SIGNIFICANT_DIGITS)
    for v in (v for p in parts for v in p):
        ref.record_value(v)
    got = hdr.merge(encoded)
    assert got.get_total_count() == ref.get_total_count() == sum(len(p) for p in parts)
    assert hdr.encode(got) == hdr.encode(ref)
    assert (got.get_min_value(), got.get_max_value()) == (ref.get_min_value(), ref.get_max_value())
    assert hdr.percentiles(got) == hdr.percentiles(ref)
    # decoded histograms and encoded ones mix
    assert hdr.encode(hdr.merge([hdr.decode(encoded[0]), *encoded[1:]])) == hdr.encode(ref)
    assert hdr.merge([]).get_total_count() == 0


def test_merge_intervals_by_index_on_host_clocks():
    rng = random.Random(7)
    vals = [[[rng.randint(10_000, 900_000) for _ in range(50 + 10 * e + k)] for k in range(3)] for e in range(3)]
    offsets = [0.0, 2.5, -0.7]  # host clocks off by seconds: alignment is by index, ts on our clock
    per = [[_interval(1000.0 + k + 1 + offsets[e], k + 1.0, vals[e][k]) for k in range(3)] for e in range(3)]
    per[2] = per[2][:2]  # an engine lost before its third interval
    out = merge.merge_intervals(per, offsets)
    assert [r["index"] for r in out] == [0, 1, 2]
    assert [r["engines"] for r in out] == [3, 3, 2]
    assert [r["ts"] for r in out] == pytest.approx([1001.0, 1002.0, 1003.0])
    for k, r in enumerate(out):
        every = [v for e in range(3) if k < len(per[e]) for v in vals[e][k]]
        w = r["ops"]["write"]
        assert w["ops"] == len(every) and w["bytes"] == 4096 * len(every)
        assert hdr.count(w["hist"]) == len(every)
        assert hdr.percentiles(w["hist"]) == hdr.percentiles(_hist(every))
        assert w["lat_mean_ns"] == pytest.approx(sum(every) / len(every))
        assert r["cpu"]["user_s"] == pytest.approx(0.01 * r["engines"])
    assert merge.start_skew_s(per, offsets) == pytest.approx(0.0, abs=1e-9)
    late = [list(x) for x in per]
    late[1] = [{**r, "ts": r["ts"] + 0.004} for r in late[1]]
    assert merge.start_skew_s(late, offsets) == pytest.approx(0.004)


def test_point_result_and_host_rows():
    a = [rng_v for rng_v in range(100_000, 200_000, 100)]
    b = [v * 3 for v in a[:300]]
    totals = [merge.engine_totals({"ops": {"read": {"ops": len(a), "bytes": len(a) * 4096, "errors": 0,
                                                    "hist": _hist(a)}},
                                   "measured_s": 10.0, "cpu": {"user_s": 1.0, "sys_s": 0.5}}, []),
              merge.engine_totals(None, [_interval(1.0, 1.0, b, "read")])]
    assert totals[1]["complete"] is False and totals[1]["measured_s"] == 1.0
    res = merge.point_result(totals)
    assert res.ops["read"].ops == len(a) + len(b)
    assert res.ops["read"].percentiles_ns["p99"] == hdr.percentile(_hist(a + b), 99)
    assert res.runtime_s == 10.0 and res.client_user_s == pytest.approx(1.01)
    rows = merge.host_rows([
        {"host": "h1", "ops": 1000, "bytes": 1, "measured_s": 10.0, "cpu_s": 1.0, "hist": _hist(a)},
        {"host": "h2", "ops": 950, "bytes": 1, "measured_s": 10.0, "cpu_s": 1.0, "hist": _hist(a)},
        {"host": "h3", "ops": 300, "bytes": 1, "measured_s": 10.0, "cpu_s": 1.0, "hist": _hist(b)},
        {"host": "h4", "ops": 10, "bytes": 1, "measured_s": 10.0, "cpu_s": 1.0, "hist": _hist(b), "lost": "cut"}])
    flags = {r["host"]: (r["slow"], r["lost"]) for r in rows}
    assert flags == {"h1": (False, False), "h2": (False, False), "h3": (True, False), "h4": (False, True)}
    assert rows[0]["iops"] == 100.0 and rows[0]["client_cpu_pct"] == 10.0
