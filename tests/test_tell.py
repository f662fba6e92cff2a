"""The daemons `ceph tell` is sent to (fathom.servers.tell): the pure rules; a real cluster: test_releases."""

from __future__ import annotations

import json
import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

from fathom.companion import Contribution, Live
from fathom.errors import FathomError
from fathom.run import point
from fathom.servers.tell import named


def test_the_daemons_are_named_from_node_ls_in_number_order() -> None:
    nodes = {"mon": {"h1": ["a"]}, "osd": {"h1": [0, 10], "h2": [2, 1]}, "mds": {"h2": ["fs.h2.x"]}, "mgr": {}}
    assert named(nodes, ("osd", "mds")) == ["mds.fs.h2.x", "osd.0", "osd.1", "osd.2", "osd.10"]
    assert named({}, ("osd",)) == [] and named({"osd": {}}, ("osd",)) == []


class Answers:
    """What the readers ask of fathom.cluster.ceph.Ceph, answered from the test's own tables: `ceph node ls` (the
    nodes set for the current point end; counted, or failing when `fail` is set) and `ceph tell NAME perf dump` or
    `perf histogram dump` (a daemon's counts, rising by one op per read of it). Pure logic: no daemon is
    imitated beyond the two documents' shapes."""

    def __init__(self) -> None:
        self.nodes: dict[str, Any] = {}
        self.fail = False
        self.node_ls = 0
        self.reads: Counter[tuple[str, ...]] = Counter()
        self._lock = threading.Lock()

    def ceph(self, *args: str, **kw: Any) -> dict[str, Any]:
        assert args == ("node", "ls"), args
        self.node_ls += 1
        if self.fail:
            raise FathomError("timed out after 30 s")
        return self.nodes

    def call(self, tool: str, *args: str, **kw: Any) -> SimpleNamespace:
        assert (tool, args[0], args[-2:]) == ("ceph", "tell", ("--format", "json")), (tool, args)
        with self._lock:
            self.reads[args[1:-2]] += 1
            n = self.reads[args[1:-2]]
        if args[2:-2] == ("perf", "dump"):
            doc: dict[str, Any] = {"osd": {"op_w": n}}
        else:  # a latency axis of one bucket below 1 ms and one above; the ops in the first
            ranges = [{"min": 0, "max": 999_999}, {"min": 1_000_000}]
            doc = {"osd": {"op_w_latency_in_bytes_histogram": {"axes": [{"ranges": ranges}], "values": [[n], [0]]}}}
        return SimpleNamespace(stdout=json.dumps(doc), stderr="", returncode=0)


# the daemons at each end of two points: osd.1 gone by the first's end, osd.2 there from the second's start
ENDS = [{"osd": {"h1": [0, 1]}}, {"osd": {"h1": [0]}}, {"osd": {"h1": [0], "h2": [2]}, "mds": {"h2": ["a"]}},
        {"osd": {"h1": [0], "h2": [2]}, "mds": {"h2": ["a"]}}]


def two_points(answers: Answers, shared: bool) -> list[Contribution]:
    """Two points read by the readers a run on a user's cluster has (the counters and the OSD latency through
    `ceph tell`): as the run makes them (shared), or each with its own `ceph node ls` (as before they shared)."""
    if shared:
        tell, osd_lat = point.tell_readers(answers, None, counters=True)  # type: ignore[arg-type]
        assert tell is not None
    else:
        tell, osd_lat = point.TellCompanion(answers), point.osd_latency(answers, None)  # type: ignore[arg-type]
    out: list[Contribution] = []
    for p in range(2):
        live = Live(SimpleNamespace(key=f"p{p}"))  # type: ignore[arg-type]
        answers.nodes = ENDS[2 * p]
        for c in (tell, osd_lat):  # started in the run's order, stopped the other way round (point._stop_all)
            c.start(live)
        answers.nodes = ENDS[2 * p + 1]
        out += [osd_lat.stop(), tell.stop()]
    return out


def test_a_point_s_tell_readers_ask_node_ls_once_at_each_end_and_store_the_same() -> None:
    shared, alone = Answers(), Answers()
    got = two_points(shared, shared=True)
    assert shared.node_ls == 4  # one per point end, not one per reader and end
    assert got == two_points(alone, shared=False) and alone.node_ls == 8
    assert shared.reads == alone.reads
    (lat1, tell1, lat2, tell2) = [c.events[0]["data"] for c in got]
    # each end's own answer: a daemon gone at the end, one come at the next point, none reused across ends
    assert tell1["daemons"] == ["osd.0"] and tell1["missing_at_one_end"] == ["osd.1"], tell1
    assert lat1["osds"] == ["osd.0"] and lat1["ops"]["write"]["ops"] == 1, lat1
    assert tell2["daemons"] == ["mds.a", "osd.0", "osd.2"] and "missing_at_one_end" not in tell2, tell2
    assert lat2["osds"] == ["osd.0", "osd.2"], lat2
    assert got[1].perf_counters["osd.0"] == {"osd.op_w": 1}


def test_a_failed_node_ls_is_asked_once_per_end_and_named_by_both_readers() -> None:
    answers = Answers()
    answers.fail = True
    tell, osd_lat = point.tell_readers(answers, None, counters=True)  # type: ignore[arg-type]
    assert tell is not None
    live = Live(SimpleNamespace(key="p"))  # type: ignore[arg-type]
    tell.start(live)
    osd_lat.start(live)
    lat, counters = osd_lat.stop(), tell.stop()
    assert answers.node_ls == 2 and not answers.reads
    assert counters.events[0]["data"]["problems"] == ["ceph node ls: timed out after 30 s"]
    assert lat.events[0]["data"]["osds"] == [] and not counters.perf_counters
