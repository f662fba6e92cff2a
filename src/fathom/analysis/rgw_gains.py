"""The RGW study's replica 3 vs EC 2+2 relative differences, from an rgw run or from the published table.

Gains per object size (positive = replica 3 better), as the study's Table 1 names them:
    throughput gain = (X_rep3 / X_ec22 - 1) x 100        X: MiB/s (the same as IOPS at one object size)
    latency gain    = (R_ec22 / R_rep3 - 1) x 100        R: mean latency (or p99, TTFB p50: the same form)
At a fixed concurrency Little's law (X = N / R) makes the two equal; their difference is printed as the
residual. The study published only averages, and its rows do not meet that check (see research notes).

Comparing a run with the study compares shapes, never magnitudes: the sign of each gain and how the gains
move with object size (one 2-core host is CPU-bound where the study's large objects were NIC-bound).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from fathom.analysis.data import RunData, StoredPoint, merged_percentile_ms
from fathom.results.model import PERCENTILES
from fathom.units import format_size

STUDY_WORKLOAD = "rep3-vs-ec22"
GAIN_COLUMNS = ("put_throughput_gain_pct", "get_throughput_gain_pct", "put_latency_gain_pct", "get_latency_gain_pct")
OPS = {"write": "PUT", "randread": "GET", "read": "GET"}
DEFINITIONS = [
    "throughput gain = (replica 3 / EC 2+2 - 1) x 100, of MiB/s; latency gain = (EC 2+2 / replica 3 - 1) x 100, "
    "of the mean latency (p99 and TTFB gains: the same form). Positive = replica 3 better, as in the study's table.",
    "Little's-law residual = throughput gain - latency gain: at a fixed concurrency both must be equal (X = N / R); "
    "a large residual means throughput and latency did not come from the same requests.",
]


def is_gains_table(run: RunData) -> bool:
    """An imported table of the study's gains (rgw-replica3-vs-ec22-2025.csv)."""
    return any(set(GAIN_COLUMNS) <= set(p.published) for p in run.points)


def size_label(n: int) -> str:
    return format_size(n).replace(".0", "")


@dataclass
class Cell:
    """The repetitions of one (placement, object size, op) as one figure each: see value()."""

    points: list[StoredPoint] = field(default_factory=list)

    def mean(self, key: str) -> float | None:
        vals = [p.m(key) for p in self.points if p.m(key) is not None]
        return statistics.fmean(vals) if vals else None  # type: ignore[arg-type]

    def value(self, key: str) -> float | None:
        """Rates (MiB/s, IOPS, counts): the mean over repetitions; latency percentiles: from the repetitions'
        histograms merged (None without them, never an average of percentiles); mean latency: weighted by each
        repetition's ops. TTFB percentiles are means over repetitions (their histograms are not stored apart)."""
        pct = key.removesuffix("_ms")
        if pct in PERCENTILES and key.endswith("_ms"):
            return self.points[0].m(key) if len(self.points) == 1 else merged_percentile_ms(self.points, pct)
        if key == "clat_ms":
            w = [(p.m("clat_ms"), p.m("total_ios")) for p in self.points if p.m("clat_ms") is not None]
            if w and all(n for _, n in w):
                return sum(v * n for v, n in w) / sum(n for _, n in w)  # type: ignore[operator]
        return self.mean(key)


def study_cells(runs: list[RunData], workload: str = STUDY_WORKLOAD) -> dict[tuple[str, int, str], Cell]:
    """(placement, object size, PUT|GET) -> the measured points of the rep3-vs-ec22 block."""
    out: dict[tuple[str, int, str], Cell] = {}
    for r in runs:
        for p in r.points:
            if p.workload != workload or p.status != "done" or p.published or p.params.get("interface") != "s3":
                continue
            size = int(p.params.get("object_size") or p.params.get("bs") or 0)
            op = OPS.get(str(p.params.get("rw")))
            if op and p.params.get("placement"):
                out.setdefault((str(p.params["placement"]), size, op), Cell()).points.append(p)
    return out


def _tp_gain(rep: float | None, ec: float | None) -> float | None:
    return (rep / ec - 1) * 100 if rep and ec else None


def _lat_gain(rep: float | None, ec: float | None) -> float | None:
    return (ec / rep - 1) * 100 if rep and ec else None


def measured_gains(runs: list[RunData], rep: str = "rep3", ec: str = "ec22") -> dict[int, dict[str, float | None]]:
    """object size -> the study's four gains plus p99, TTFB and Little's-law residuals, from measured points."""
    cells = study_cells(runs)
    sizes = sorted({s for (_, s, _) in cells})
    out: dict[int, dict[str, float | None]] = {}
    for s in sizes:
        g: dict[str, float | None] = {}
        for op in ("PUT", "GET"):
            a, b = cells.get((rep, s, op)), cells.get((ec, s, op))
            if a is None or b is None:
                continue
            o = op.lower()
            g[f"{o}_throughput_gain_pct"] = _tp_gain(a.value("bw_mib_s"), b.value("bw_mib_s"))
            g[f"{o}_latency_gain_pct"] = _lat_gain(a.value("clat_ms"), b.value("clat_ms"))
            g[f"{o}_p99_gain_pct"] = _lat_gain(a.value("p99_ms"), b.value("p99_ms"))
            if op == "GET":
                g["get_ttfb_p50_gain_pct"] = _lat_gain(a.mean("ttfb_p50_ms"), b.mean("ttfb_p50_ms"))
            t, lat = g[f"{o}_throughput_gain_pct"], g[f"{o}_latency_gain_pct"]
            g[f"{o}_littles_residual_pct"] = t - lat if t is not None and lat is not None else None
        if g:
            out[s] = g
    return out


def published_gains(run: RunData) -> dict[int, dict[str, float | None]]:
    """object size -> the study's four gains, from an imported gains table."""
    out: dict[int, dict[str, float | None]] = {}
    for p in run.points:
        if not set(GAIN_COLUMNS) <= set(p.published):
            continue
        size = int(p.params.get("object_size") or 0)
        out[size] = {k: (float(p.published[k]) if isinstance(p.published[k], (int, float)) else None)
                     for k in GAIN_COLUMNS}
    return out


def _sign(v: float | None, tol: float) -> int | None:
    if v is None:
        return None
    return 0 if abs(v) <= tol else (1 if v > 0 else -1)


def _trend(values: list[float]) -> str:
    """How a gain moves from the smallest to the largest object size."""
    if len(values) < 2:
        return "n/a"
    d = values[-1] - values[0]
    return "falls" if d < 0 else ("rises" if d > 0 else "flat")


def shape(study: dict[int, dict[str, float | None]], ours: dict[int, dict[str, float | None]],
          tol: float = 2.0) -> dict[str, Any]:
    """Signs and trends of the gains, here against the study, at the sizes both have.

    A sign within ±tol points of 0 counts as 0 (no difference); signs agree when equal or one of them is 0.
    """
    sizes = sorted(set(study) & set(ours))
    rows = []
    agree = compared = 0
    for s in sizes:
        for col in GAIN_COLUMNS:
            a, b = study[s].get(col), ours[s].get(col)
            sa, sb = _sign(a, tol), _sign(b, tol)
            same = None if sa is None or sb is None else (sa == sb or 0 in (sa, sb))
            if same is not None:
                compared += 1
                agree += same
            rows.append({"object_size": s, "size": size_label(s), "gain": col, "study_pct": a, "fathom_pct": b,
                         "sign_agrees": same})
    trends = {}
    for col in GAIN_COLUMNS:
        sv = [study[s][col] for s in sizes if study[s].get(col) is not None]
        ov = [ours[s][col] for s in sizes if ours[s].get(col) is not None]
        if len(sv) == len(ov) == len(sizes) and sizes:
            trends[col] = {"study": _trend(sv), "fathom": _trend(ov)}  # type: ignore[arg-type]
    return {"sizes": [size_label(s) for s in sizes], "rows": rows, "signs_agree": agree, "signs_compared": compared,
            "trends": trends, "tolerance_pct_points": tol, "definitions": DEFINITIONS,
            "note": "shapes, not magnitudes: one host with 2 shared cores (CPU-bound, OSDs on files) against the "
                    "study's 4 nodes with NVMe and 100 GbE (large objects NIC-bound)"}
