"""fathom's Python API for notebooks: a results store read as pandas DataFrames (docs/api.md).

    import fathom
    res = fathom.open("fathom-results.db")      # read-only: never blocks nor changes a run writing to it
    res.points("latest")                         # the columns of `fathom export`, same units and windows
    res.histogram("latest", 0).percentile(99.95) # any quantile of a point's merged HDR histogram, ms

Versioned (API_VERSION, docs/api.md): names, arguments and the columns of every frame are the 1.0 surface;
a new column or method is a minor version, anything removed or redefined a major one. Every table comes
from fathom.results.export's rows and its typed Arrow schema (export.arrow_table), so a frame here and a Parquet
file of `fathom export` hold the same columns, types and values: the definitions are written once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.results import export, hdr
from fathom.errors import FathomError
from fathom.results.store import DEFAULT_DB, Store

if TYPE_CHECKING:
    import pandas as pd

API_VERSION = "1.0"
RunRef = str | int  # a run's id, its name (the newest of that name) or "latest", as the CLI takes them
PointRef = str | int  # a point's idx (its position in the run, export's `idx`) or its key ("rr/iodepth=8")

__all__ = ["API_VERSION", "Histogram", "Results", "open"]


def open(path: str | os.PathLike[str] = DEFAULT_DB) -> Results:  # noqa: A001 (fathom.open, as a file is opened)
    """The results store at path, opened read-only (SQLite mode=ro)."""
    return Results(path)


def _frame(rows: list[dict[str, Any]], table: str, cols: list[str] | None = None) -> pd.DataFrame:
    """Rows as a DataFrame through export's Arrow schema: the dtypes a Parquet export reads back with."""
    return export.arrow_table(rows, cols, table).to_pandas()


@dataclass(frozen=True)
class Histogram:
    """One point's latency histogram of successful ops, merged over its engines (and op kinds unless one is
    named): percentiles at any quantile and the CDF, in ms, read from the exact merged counts (never from
    averaged percentiles), at the histogram's precision (3 significant digits)."""

    run: str
    point: str  # the point's key
    op: str  # read, write, ... or "all" (merged over op kinds)
    encoded: str  # base64 HDR V2 as stored (hdr.decode reads it)

    @cached_property
    def _h(self) -> Any:
        return hdr.decode(self.encoded)

    @property
    def count(self) -> int:
        return hdr.count(self._h)

    def percentile(self, q: float) -> float:
        """Latency at percentile q (0..100; 99.99 for p99.99) in ms, by the engine's rank rule (hdr.percentile):
        the p50/p99 this gives are the point's stored p50_ms/p99_ms."""
        if not 0 <= q <= 100:
            raise ValueError(f"percentile {q}: expected 0..100")
        return hdr.percentile(self._h, q) / 1e6

    def percentiles(self, qs: Iterable[float] = (50, 90, 99, 99.9)) -> dict[float, float]:
        return {q: self.percentile(q) for q in qs}

    def cdf(self) -> pd.DataFrame:
        """One row per non-empty bucket: latency_ms (the highest value the bucket holds), count, cumulative
        count and fraction (of ops at or below latency_ms)."""
        import pandas as pd

        b = hdr.buckets(self._h)
        total = sum(c for _, c in b)
        rows, seen = [], 0
        for v, c in b:
            seen += c
            rows.append({"latency_ms": v / 1e6, "count": c, "cumulative": seen, "fraction": seen / total})
        return pd.DataFrame(rows, columns=["latency_ms", "count", "cumulative", "fraction"])


class Results:
    """A results store, read-only. Every method reads the store when called: a run still being written shows
    the points finished so far."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_DB):
        self.path = Path(path)
        self._store = Store(self.path, read_only=True)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"fathom.Results({str(self.path)!r})"

    def _run_id(self, run: RunRef) -> int:
        return self._store.run(run).id

    # ---- the tables of `fathom export` -------------------------------------------------------------
    def runs(self) -> pd.DataFrame:
        """One row per run (`fathom export --table runs`)."""
        return _frame(export.run_rows(self._store), "runs")

    def points(self, run: RunRef | None = "latest") -> pd.DataFrame:
        """One row per point (`fathom export`); run=None: every run's points, run after run."""
        ids = [r.id for r in self._store.runs()] if run is None else [self._run_id(run)]
        return _frame([row for i in ids for row in export.rows(self._store, i)], "points")

    def intervals(self, run: RunRef = "latest") -> pd.DataFrame:
        """Per point, second and op kind (`fathom export --table intervals`); ramp rows are marked `ramp`."""
        return self.table("intervals", run)

    def events(self, run: RunRef = "latest") -> pd.DataFrame:
        """The run's events in time order (`fathom export --table events`)."""
        return self.table("events", run)

    def table(self, name: str, run: RunRef = "latest") -> pd.DataFrame:
        """Any table of `fathom export --table NAME` for one run: points, servers, counters, intervals, events,
        runs (that run's row)."""
        if name not in export.TABLES:
            raise FathomError(f"no table {name!r}", hint=f"tables: {', '.join(export.TABLES)}")
        return _frame(export.table_rows(self._store, self._run_id(run), name), name)

    def columns(self, name: str = "points") -> pd.DataFrame:
        """Every column of a table: its meaning, the window it covers and its source (`fathom export --columns`)."""
        import pandas as pd

        if name not in export.TABLES:
            raise FathomError(f"no table {name!r}", hint=f"tables: {', '.join(export.TABLES)}")
        return pd.DataFrame(export.table_dictionary(name), columns=export.DICTIONARY_COLUMNS)

    # ---- a point's latency -------------------------------------------------------------------------
    def histogram(self, run: RunRef, point: PointRef, op: str | None = None) -> Histogram:
        """A point's merged latency histogram: of its op kinds together (op None: "all" when it has several),
        or of one op kind (read, write, ...)."""
        r = self._store.run(run)
        pts = self._store.points(r.id)
        found = [p for p in pts if (p["idx"] == point if isinstance(point, int) else p["key"] == point)]
        if not found:
            raise FathomError(f"no point {point!r} in run {r.id} ({r.name})",
                              hint="a point is its idx or key: " + ", ".join(f"{p['idx']}: {p['key']}"
                                                                            for p in pts[:8]))
        p = found[0]
        hists = self._store.histograms(p["id"])
        name = op or ("all" if "all" in hists else next(iter(sorted(hists)), ""))
        if name not in hists:
            raise FathomError(f"point {p['key']} of run {r.name} has no {op or 'latency'} histogram",
                              hint=f"its op kinds: {', '.join(sorted(hists)) or 'none (no histograms stored)'}")
        return Histogram(r.name, p["key"], name, hists[name])

    # ---- analysis ---------------------------------------------------------------------------------
    def compare(self, base: RunRef, new: RunRef, tolerance: float = 0.10, fail_on_regression: float | None = None,
                levels: bool = False) -> pd.DataFrame:
        """`fathom compare BASE NEW` as a frame: one row per workload (levels=True: per matched level), with
        the verdicts and ratios of its JSON; tolerance and fail_on_regression are fractions (0.1 = 10%).
        Run groups 'a,b,c' are repetitions. Two SLO runs: one row, the loads each holds and the verdict.
        attrs: unmatched workloads, environment differences, anomalies."""
        import pandas as pd

        from fathom.analysis import slo
        from fathom.analysis.compare import compare, comparison_rows
        from fathom.analysis.data import load_run

        b, n = load_run(self._store, str(base)), load_run(self._store, str(new))
        if slo.answer_of(b.env) and slo.answer_of(n.env):
            ab, an = slo.answer_of(b.env), slo.answer_of(n.env)
            return pd.DataFrame([{"base": b.name, "new": n.name,
                                  **slo.compare_answers(ab, an, fail_on_regression)}])  # type: ignore[arg-type]
        c = compare(b, [n], tolerance, fail_on_regression)
        df = pd.DataFrame(comparison_rows(c, levels))
        d = c.to_dict()
        df.attrs.update(unmatched=d["unmatched"], environment_differs=d["environment_differs"],
                        anomalies=d["anomalies"], definitions=d["definitions"])
        return df

    def slo(self, run: RunRef = "latest") -> pd.DataFrame:
        """An SLO run's search (`fathom slo`): one row per probe, in the order run, with its load, verdict,
        reasons and each targeted percentile's estimate and 95% interval in ms. attrs: the answer (status,
        load, failed_at, why, message), the targets and the load's unit."""
        import pandas as pd

        from fathom.analysis import slo

        r = self._store.run(run)
        found = slo.answer_of(r.env)
        if not found:
            raise FathomError(f"run {r.id} ({r.name}) is not an SLO search", hint="`fathom slo SUITE` makes one")
        df = pd.DataFrame(slo.probe_rows(found))
        res = found["result"]
        df.attrs.update({k: res.get(k) for k in ("status", "load", "failed_at", "why", "message")},
                        targets=(found.get("settings") or {}).get("targets"), unit=found.get("unit", "ops/s"))
        return df
