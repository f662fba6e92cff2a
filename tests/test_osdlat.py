"""The OSDs' latency histograms over a point (fathom.servers.osdlat): the pure rules. On real OSDs: test_releases
and test_telemetry."""

from __future__ import annotations

import math

from fathom.servers import osdlat


def hist(counts: list[int], quant: int = 100_000) -> dict:
    """A `perf histogram dump` histogram of a log2 latency axis (edges doubling from `quant` ns) and one size
    bucket: counts per latency bucket, as an OSD writes them."""
    ranges = [{"max": -1}, {"min": 0, "max": quant - 1}]
    lo = quant
    while len(ranges) < len(counts):
        ranges.append({"min": lo, "max": 2 * lo - 1})
        lo *= 2
    ranges[-1] = {"min": ranges[-1]["min"]}
    return {"axes": [{"name": "Latency (usec)", "ranges": ranges}, {"name": "Request size (bytes)"}],
            "values": [[c] for c in counts]}


def dump(w: list[int]) -> dict:
    return {"osd": {"op_w_latency_in_bytes_histogram": hist(w), "op_r_latency_out_bytes_histogram": hist([0] * len(w))}}


def test_a_percentile_is_the_bucket_that_holds_it_its_upper_edge_the_figure() -> None:
    b = osdlat.latency_buckets(hist([0, 10, 80, 9, 1, 0]))
    assert b[1] == (0.0, 1e-4, 10) and b[2] == (1e-4, 2e-4, 80) and b[-1][1] == math.inf
    assert osdlat.percentile(b, 50) == (1e-4, 2e-4)  # 10 below, the 50th op among the next 80
    assert osdlat.percentile(b, 99) == (2e-4, 4e-4)  # 99 of 100 within the first three
    assert osdlat.percentile(b, 99.5) == (4e-4, 8e-4)
    assert osdlat.percentile(osdlat.latency_buckets(hist([0, 0, 0])), 50) is None


def test_the_point_s_ops_are_the_difference_and_the_osds_add_up() -> None:
    before = {"osd.0": dump([0, 5, 5, 0, 0, 0]), "osd.1": dump([0, 0, 0, 0, 0, 0])}
    after = {"osd.0": dump([0, 5, 105, 0, 0, 0]), "osd.1": dump([0, 0, 0, 0, 100, 0]),
             "osd.2": dump([0, 0, 9, 0, 0, 0])}  # osd.2 read at one end only: left out
    s = osdlat.summary(before, after)
    assert s["osds"] == ["osd.0", "osd.1"] and set(s["ops"]) == {"write"}
    w = s["ops"]["write"]
    assert w["ops"] == 200 and w["p50_s"] == 2e-4 and w["p99_s"] == 8e-4 and w["p99_low_s"] == 4e-4
    assert s["per_osd"]["osd.0"]["write"]["p99_s"] == 2e-4 and s["per_osd"]["osd.1"]["write"]["ops"] == 100
    # an OSD restarted in the point (counts fell): its after-counts alone
    again = osdlat.summary({"osd.0": dump([0, 50, 0, 0, 0, 0])}, {"osd.0": dump([0, 1, 2, 0, 0, 0])})
    assert again["ops"]["write"]["ops"] == 3
