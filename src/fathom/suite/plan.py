"""Sweeps expanded into the ordered list of points a run measures.

Order: repetition (outermost: a whole pass over the plan, then the next, so
trials of one point are spread in time), then workloads as written, then the
sweep (product: the last axis varies fastest; zip: lists walked together).
A point's key is stable for a given suite (workload, swept values,
repetition), which is what --resume matches on.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

from fathom import interfaces
from fathom.suite.spec import Suite, SuiteError
from fathom.units import format_size
from fathom.suite.workload import point_key, repeated_points, swept_points

# per-point cost beyond runtime + ramp here (gate, process start, connect, teardown): for the ETA only
OVERHEAD_S = 2.0


@dataclass
class Point:
    idx: int
    key: str
    workload: str
    engine: str
    rep: int
    params: dict[str, Any]  # every workload field, swept values applied (fio names; sizes in bytes, times in s)
    swept: dict[str, Any]  # only the swept fields

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def capped(self) -> bool:
        """The runtime is a cap, not the length: the point may end at steady state or after its bytes."""
        return bool(self.params.get("steady_state")) or interfaces.per_job_bytes(self.params) is not None

    @property
    def est_s(self) -> float:
        return float(self.params["runtime"]) + float(self.params["ramp_time"]) + OVERHEAD_S

    def label(self) -> str:
        p = self.params
        parts = [self.workload, p["rw"], format_size(interfaces.op_size(p)), f"iodepth={p['iodepth']}",
                 f"numjobs={p['numjobs']}"]
        parts += [f"{k}={p[k]}" for k in ("placement", "tls") if p.get(k) is not None]
        if p.get("rate") is not None:
            parts.append(f"rate={p['rate']:g}/s" + (" poisson" if p.get("arrival") == "poisson" else ""))
        if self.engine != "fathom-engine":
            parts.append(f"engine={self.engine}")
        if self.rep > 1 or self.params.get("_reps", 1) > 1:
            parts.append(f"rep={self.rep}")
        return " ".join(parts)


def expand(suite: Suite) -> list[Point]:
    per_workload = [(w.name, swept_points(w)) for w in suite.workloads]
    for name, pts in per_workload:
        if (same := repeated_points(name, [swept for _, swept in pts])):  # spec refuses these at file:line
            key, pos = same[0]
            raise SuiteError(f"workload {name!r}: sweep points {', '.join(map(str, pos))} are one point ({key}): "
                             "their results would overwrite each other; list each value once and set "
                             "repetitions to measure every point several times")
    points: list[Point] = []
    for rep in range(1, suite.repetitions + 1):
        for name, pts in per_workload:
            for params0, swept in pts:
                params = copy.deepcopy(params0)  # every point its own (reps share the validated fields)
                _cap_inflight(params)
                key = point_key(name, swept, rep if suite.repetitions > 1 else None)
                points.append(Point(idx=len(points), key=key, workload=name, engine=params["engine"], rep=rep,
                                    params=params, swept=dict(swept)))
    return points


SEEDS_PER_REPETITION = 1000  # more than any search's probes


def seed(point: Point) -> int:
    """The engine's random seed for a point (its offsets, its open-loop arrivals). A point of the first
    repetition gets 1, so one point in two runs draws the same offsets and arrivals (a comparison sees the
    change, not a new draw); each repetition and each SLO probe gets its own, so that repeated measurements are
    independent draws and their merged interval does not narrow as if they were while replaying one sequence."""
    return 1 + (point.rep - 1) * SEEDS_PER_REPETITION + int(point.params.get("slo_probe") or 0)


def _cap_inflight(params: dict[str, Any]) -> None:
    """s3 `max_inflight`: lower iodepth so jobs x iodepth x object size fits (never below 1); the asked
    iodepth stays in `iodepth_asked`. The same cap for every placement, so large objects compare fairly."""
    cap, size = params.get("max_inflight"), params.get("object_size") or params.get("bs")
    if not cap or not size:
        return
    fit = max(1, int(cap) // (int(params["numjobs"]) * int(size)))
    if fit < int(params["iodepth"]):
        params["iodepth_asked"] = params["iodepth"]
        params["iodepth"] = fit


def total_estimate_s(points: list[Point]) -> float:
    return sum(p.est_s for p in points)
