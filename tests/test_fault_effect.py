"""Faults timed when they take effect (fathom.run.faults): the phases start at the effect, and a fault that took
effect after the point's last record flags the point instead of reporting a recovery. Pure logic: an executor
that says when its action took effect, on a clock the test sets."""

from __future__ import annotations

import time
from typing import Any

from fathom.analysis import recovery
from fathom.run.faults import NO_EFFECT, Executor, FaultCompanion
from fathom.suite.faults import Fault


class Timed(Executor):
    """Takes effect `after` seconds (engine clock) past the issue: a `ceph` call slow on a loaded host."""

    def __init__(self, after: dict[str, float]):
        super().__init__(None)
        self.after = after

    def run(self, f: Fault) -> dict[str, Any]:
        return {"outcome": "done", "effect_ts": time.time() + self.after[f.action], "effect": "osdmap epoch 7"}


def _records(n: int, iops: float = 600.0) -> list[dict[str, Any]]:
    return [{"t": float(t), "dt": 1.0, "ts": 1000.0 + t, "ops": {"write": {"ops": int(iops), "bytes": 0}}}
            for t in range(1, n + 1)]


def test_the_phase_starts_at_the_effect_and_the_issue_is_kept_beside_it():
    c = FaultCompanion([Fault(at_s=6, action="pause")], Timed({"pause": 0.4, "unpause": 0.1}))
    c._origin = time.time() - 6.0
    c._do(c.faults[0])
    (e,) = c._events
    assert e["data"]["issued_t_s"] < e["data"]["t_s"] and abs(e["data"]["t_s"] - e["data"]["issued_t_s"] - 0.4) < 0.1
    assert e["message"].startswith("t=6.0 s: pause: done (took effect at t=6.4 s: osdmap epoch 7)"), e["message"]
    c.intervals = _records(14)
    out = c.stop()
    (kept,) = [x for x in out.events if x["kind"] == "fault" and not x["data"].get("undo")]
    assert kept["data"]["outcome"] == "done" and recovery.acted([kept["data"]])
    assert out.metrics["fault_at_s"] == kept["data"]["t_s"]  # the recovery figures start at the effect


def test_an_effect_after_the_point_s_last_record_flags_it_and_reports_no_recovery():
    c = FaultCompanion([Fault(at_s=6, action="pause")], Timed({"pause": 10.3, "unpause": 0.1}))
    c._origin = time.time() - 6.0
    c._do(c.faults[0])
    c.intervals = _records(14)
    out = c.stop()
    late = next(x for x in out.events if x["kind"] == "fault" and x["data"]["action"] == "pause")
    assert late["data"]["outcome"] == NO_EFFECT, late
    assert "no effect within the point: issued at t=6.0 s, took effect at t=16.3 s, after the point's last record " \
           "at t=14.0 s: the point is flagged and no recovery is reported for it" in late["message"], late["message"]
    assert recovery.acted([late["data"]]) == [] and out.metrics == {}
    assert not [x for x in out.events if x["kind"] == "recovery"]
