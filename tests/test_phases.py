"""The phases of a degraded point (fathom.analysis.phases), the PG watch's samples (fathom.run.pgwatch), the host
faults' model (fathom.suite.faults) and what the impaired host's journal entries hold (fathom.hosts.impair).
Pure logic: interval records and fault data built here."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fathom.analysis import phases, recovery
from fathom.cluster.journal import Entry, Journal
from fathom.hosts import impair
from fathom.results import hdr
from fathom.run.pgwatch import sample
from fathom.suite.faults import Fault, schedule_problems


def _hist(ms: float, n: int) -> str:
    h = hdr.new()
    for _ in range(n):
        h.record_value(int(ms * 1e6))
    return hdr.encode(h)


def _recs(profile: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """One record a second: (ops, latency ms) per second."""
    return [{"t": float(t), "dt": 1.0, "ts": 1000.0 + t,
             "ops": {"write": {"ops": ops, "bytes": ops * 4096, "hist": _hist(ms, ops) if ops else None}}}
            for t, (ops, ms) in enumerate(profile, start=1)]


def test_phases_split_at_the_effects_and_the_first_clean_sample():
    # 10 s at 500 ops/s and 2 ms, a host down for 5 s (nothing completes), 5 s of recovery at 4 ms, 5 s after
    recs = _recs([(500, 2.0)] * 10 + [(0, 0.0)] * 5 + [(300, 4.0)] * 5 + [(500, 2.0)] * 5)
    faults = [{"action": "host_down", "host": "host3", "t_s": 10.0},
              {"action": "host_up", "host": "host3", "t_s": 15.0}]
    watch = [{"t": 16.0, "recovering_objects_per_sec": 40.0, "recovering_bytes_per_sec": 4 * 2**20},
             {"t": 18.0, "recovering_objects_per_sec": 20.0, "recovering_bytes_per_sec": 2 * 2**20}]
    d = phases.split(recs, faults, watch, clean_t=20.0, profile="balanced")
    by = {p["phase"]: p for p in d["phases"]}
    assert list(by) == ["before", "fault", "recovery", "after"]
    assert by["before"]["seconds"] == 10 and by["before"]["iops"] == 500
    assert by["fault"]["iops"] == 0 and by["fault"]["p99_ms"] is None
    assert by["recovery"]["iops"] == 300 and by["recovery"]["vs_before"]["iops"] == 0.6
    assert by["recovery"]["p99_ms"] == pytest.approx(4.0, rel=0.01)
    assert by["recovery"]["vs_before"]["p99_ms"] == pytest.approx(2.0, rel=0.02)
    assert by["recovery"]["recovering_objects_s"] == 30.0 and by["recovery"]["recovering_mib_s"] == 3.0
    assert d["clean_s"] == 10.0 and d["stall_s"] == 5.0 and d["profile"] == "balanced"


def test_a_put_back_alone_starts_no_phase_and_a_condition_is_no_fault():
    recs = _recs([(500, 2.0)] * 10)
    # the netem failed (not acted); its link_reset ran: there was no fault to measure
    assert phases.split(recs, [{"action": "link_reset", "host": "host2", "t_s": 5.0}], [], None) == {}
    # the mClock profile set at 1 s is how the point ran, not its fault: the recovery figures ignore it too
    assert phases.split(recs, [{"action": "mclock", "profile": "balanced", "t_s": 1.0}], [], None) == {}
    assert recovery.acted([{"action": "mclock", "t_s": 1.0, "outcome": "done"}]) == []


def test_a_failover_lasts_its_own_outage_and_an_unclean_point_recovers_to_its_end():
    recs = _recs([(500, 2.0)] * 20)
    d = phases.split(recs, [{"action": "mgr_failover", "t_s": 5.0, "failover_s": 4.0}], [], clean_t=None)
    by = {p["phase"]: (p["start_s"], p["end_s"]) for p in d["phases"]}
    assert by == {"before": (0.0, 5.0), "fault": (5.0, 9.0), "recovery": (9.0, 20.0)}
    assert d["clean_s"] is None and d["failover_s"] == 4.0 and d["stall_s"] == 0.0


def test_the_pg_watch_reads_both_shapes_of_pg_stat():
    pacific = {"pg_ready": True, "pg_summary": {"num_pg_by_state": [{"name": "active+clean", "num": 31},
                                                                    {"name": "active+undersized+degraded", "num": 2}],
                                                "num_pgs": 33, "degraded_objects": 12,
                                                "recovering_objects_per_sec": 7, "recovering_bytes_per_sec": 1024}}
    s = sample(pacific)
    assert (s["pgs"], s["clean_pgs"], s["clean"], s["recovering_objects_per_sec"]) == (33, 31, False, 7.0)
    flat = {"num_pg_by_state": [{"name": "active+clean", "num": 33}], "num_pgs": 33}
    assert sample(flat)["clean"] is True
    assert sample({"num_pg_by_state": [{"name": "active+clean", "num": 33}], "num_pgs": 33,
                   "misplaced_objects": 3})["clean"] is False


@pytest.mark.parametrize("fault, wrong", [
    ({"action": "nic_cap", "host": "host2"}, "rate"),
    ({"action": "nic_cap", "host": "host2", "rate": "fast"}, "rate"),
    ({"action": "netem", "host": "host2"}, "delay_ms"),
    ({"action": "netem", "host": "host2", "jitter_ms": 5}, "delay_ms"),
    ({"action": "host_down"}, "host"),
    ({"action": "host_down", "host": "host2", "daemon": "osd.1"}, "host"),
    ({"action": "kill", "daemon": "osd.1", "host": "host2"}, "no host"),
    ({"action": "kill", "daemon": "osd.1", "rate": "1gbit"}, "rate is not a parameter"),
    ({"action": "mclock"}, "profile"),
    ({"action": "mclock", "profile": "fastest"}, "profile"),
    ({"action": "partition", "host": "host2", "mode": "kill"}, "mode"),
])
def test_host_faults_refuse_what_they_cannot_do(fault, wrong):
    with pytest.raises(ValidationError, match=wrong):
        Fault.model_validate({"at_s": 5, **fault})


def test_a_suite_s_host_faults_name_its_emulated_hosts():
    fs = [Fault.model_validate({"at_s": 5, "action": "host_down", "host": "hots2"}),
          Fault.model_validate({"at_s": 9, "action": "nic_cap", "host": "host3", "rate": "100mbit"})]
    got = schedule_problems(fs, "local", 3, 30.0, True, "fathom-engine", hosts=3)
    assert [(j, f) for j, f, _ in got] == [(0, "host")] and "did you mean 'host2'" in got[0][2]
    one = schedule_problems(fs[1:], "local", 3, 30.0, True, "fathom-engine", hosts=None)
    assert "cluster: {hosts: N}" in one[0][2]
    attached = schedule_problems(fs, "attached", 3, 30.0, True, "fathom-engine")
    assert [f for _, f, _ in attached] == ["action"]  # host_down needs fathom's daemons; nic_cap goes over SSH


def test_an_emulated_host_s_place_and_what_its_journal_entry_keeps():
    box = {"nic": "200mbit", "delay_ms": None, "hosts": [
        {"hostname": f"host{i}", "ns": f"fxabh{i}", "veth": f"fxabv{i}", "addr": f"10.216.9.{10 + i}"}
        for i in (1, 2, 3)]}
    places = impair.box_places(box)
    p = places["host2"]
    assert (p.dev, p.peers, p.base[:3]) == ("fxabv2p", ["10.216.9.11", "10.216.9.13"], ["tbf", "rate", "200mbit"])
    assert impair.Place.from_dict(p.to_dict()) == p
    # the namespace is gone (the cluster is down): the change went with it, nothing to put back
    j = Journal()
    j.write(Entry("fault", "host2 fxabv2p qdisc", undo="tc qdisc del dev fxabv2p root",
                  data={"op": "shape", "place": p.to_dict()}))
    assert impair.undo_all(j, lambda m: None) == [] and not j.pending()


def test_a_shape_sweep_runs_each_level_with_its_clients_scaled():
    from fathom.errors import UsageError
    from fathom.report.rgw_study import efficiency
    from fathom.suite import spec

    loaded = spec.load("rgw-scaling", quick=True)
    assert loaded.suite.cluster.levels() == [2, 3, 4]
    with pytest.raises(UsageError, match="one level"):
        loaded.suite.cluster.box()
    spec.at_hosts(loaded, 3)
    assert loaded.suite.cluster.hosts == 3 and loaded.suite.cluster.box()["n"] == 3
    assert [h.instances for h in loaded.suite.clients.hosts] == [3]
    with pytest.raises(UsageError, match="no level of 5"):
        spec.at_hosts(spec.load("rgw-scaling", quick=True), 5)
    with pytest.raises(spec.SuiteError, match="distinct"):
        spec.parse("name: x\ncluster: {hosts: [2, 2]}\nworkloads: [{name: a, rw: write}]")
    # the study's own figures: GET 39 -> 113 GiB/s and PUT 15.5 -> 50 GiB/s from 4 to 12 nodes
    assert round(efficiency(4, 39, 12, 113), 2) == 0.97 and round(efficiency(4, 15.5, 12, 50), 2) == 1.08
    assert efficiency(4, 39, 4, 39) is None
