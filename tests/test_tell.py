"""`ceph tell KIND.* perf dump` read apart (fathom.servers.tell): the pure rules; a real cluster: test_releases."""

from __future__ import annotations

from fathom.servers.tell import parse


def test_each_daemon_s_answer_is_read_and_an_error_line_left_out() -> None:
    text = ('osd.0: {"osd": {"op_w": 3, "op_w_latency": {"avgcount": 2, "sum": 0.5}}}\n'
            'osd.1: {\n  "osd": {"op_w": 5}\n}\n'
            "osd.12: problem getting command descriptions from osd.12\n"
            'mds.a.b: {"mds": {"request": 1}}\n')
    got = parse(text)
    assert got == {"osd.0": {"osd": {"op_w": 3, "op_w_latency": {"avgcount": 2, "sum": 0.5}}},
                   "osd.1": {"osd": {"op_w": 5}}, "mds.a.b": {"mds": {"request": 1}}}
    assert parse("") == {} and parse("Error ENOENT: no osd\n") == {}
