"""The steady-state watch: a companion that judges a running point's merged series (fathom.suite.steady's
criteria) after each measured interval and asks the point to stop once it is steady."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from fathom.companion import Companion, Contribution, Live
from fathom.results.series import LOCAL_ENGINE, Sample, engine_of, extend
from fathom.suite.steady import NOT_REACHED, REACHED, Criteria, Verdict, check


# ---- the companion -------------------------------------------------------------------


class SteadyStateCompanion(Companion):
    """Watches a point's merged interval series; asks it to stop (control channel) once steady.

    Interval records arrive on the engine's reader thread. With several engines per
    point each record names its engine (`host`, `instance`, as the store keys them) and
    `engines` lists them all: a span of the merged series is judged once every engine
    has reported it. One engine names none: the default.
    """

    def __init__(self, criteria: Criteria, engines: Sequence[tuple[str, int]] = (LOCAL_ENGINE,)):
        self.c = criteria
        self.engines = tuple(engines)
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.live: Any = None
        self._by_engine: dict[tuple[str, int], list[Mapping[str, Any]]] = {e: [] for e in self.engines}
        self.samples: list[Sample] = []
        self._pos: list[int] = [0] * len(self._by_engine)  # each engine's records merged so far
        self.verdict: Verdict | None = None  # the latest window's
        self.steady_at: Verdict | None = None  # the window that held

    def start(self, live: Live) -> None:
        with self._lock:
            self._reset()
            self.live = live

    def on_interval(self, rec: dict[str, Any]) -> None:
        if rec.get("ramp"):
            return
        with self._lock:
            self._by_engine.setdefault(engine_of(rec), []).append(rec)
            if len(self._pos) < len(self._by_engine):
                self._pos += [0] * (len(self._by_engine) - len(self._pos))
            n = len(self.samples)
            extend(self.samples, list(self._by_engine.values()), self._pos)
            for k in range(n, len(self.samples)):  # each new window judged, as it would have been live
                if self.steady_at is None:
                    self._judge(k + 1)

    def _judge(self, n: int) -> None:
        self.verdict = check(self.samples[:n], self.c)
        if self.verdict.steady:
            self.steady_at = self.verdict
            v = self.verdict
            if self.live is not None:
                self.live.notify({"kind": "steady", "ts": time.time(), "message": f"steady state at {v.at_s:.0f} s",
                                  "data": {"at_s": v.at_s}})
                self.live.request_stop(f"steady state reached at {v.at_s:.0f} s: {self._values(v)}")

    def _values(self, v: Verdict) -> str:
        out = [f"{self.c.metric} mean {v.mean:.4g} {self.c.unit}"]
        if v.slope_pct is not None:
            out.append(f"slope {v.slope_pct:.3g} %/s")
        if v.deviation_pct is not None:
            out.append(f"deviation {v.deviation_pct:.3g} %")
        return ", ".join(out)

    def stop(self) -> Contribution:
        with self._lock:
            v = self.steady_at or self.verdict
            data = {"criteria": asdict(self.c), "verdict": v.to_dict() if v else None,
                    "intervals": len(self.samples)}
            if self.steady_at is not None:
                msg = f"steady state reached at {self.steady_at.at_s:.0f} s ({self.c.describe()}): " \
                      f"{self._values(self.steady_at)}"
                metrics = {"steady_state": REACHED, "steady_s": round(float(self.steady_at.at_s or 0.0), 3)}
            else:
                last = f"; last window: {self._values(v)}, {v.why}" if v and v.mean is not None else \
                    (f"; {v.why}" if v else "")
                msg = f"steady state not reached by {self.c.max_s:g} s ({self.c.describe()}){last}"
                metrics = {"steady_state": NOT_REACHED, "steady_s": None}
            return Contribution(events=[{"kind": "steady", "message": msg, "data": data}], metrics=metrics)
