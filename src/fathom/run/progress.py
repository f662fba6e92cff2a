"""Live progress of a run: the point, its elapsed time, the run's ETA, live IOPS and latency.

On a terminal a rich status line is redrawn from the engine's intervals; when
stderr is not a TTY (CI logs) one plain line per event is printed instead.
Everything goes to stderr so stdout stays for results.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from fathom.suite.plan import Point


def _fmt_s(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s >= 3600 else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def _fmt_iops(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e3:.1f}k" if v >= 1e4 else f"{v:.0f}"


def schedule_note(m: dict[str, Any]) -> str:
    """An open-loop point whose schedule was not kept: what was offered, what ran, the backlog left."""
    if m.get("schedule_kept") is not False:
        return ""
    offered, achieved = m.get("offered_rate_ops_s"), m.get("achieved_rate_ops_s")
    return (f"; schedule NOT kept: offered {_fmt_iops(offered)} ops/s, achieved {_fmt_iops(achieved)} ops/s, "
            f"{m.get('unissued_ops') or 0} ops never issued")


class Progress:
    def __init__(self, total_points: int | None, todo: list[Point], tty: bool | None = None):
        """total_points None: not known ahead (an SLO search's probes); positions read [n] and no run ETA."""
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.todo_est = {p.key: (p.est_s, p.capped) for p in todo}
        self.total = total_points
        self.done = 0
        # actual and planned seconds of finished points, apart for points whose runtime is only a cap (they end
        # after their bytes or at steady state, often far sooner): each ratio corrects its own kind's ETA
        self.took_s = {False: 0.0, True: 0.0}
        self.planned_s = {False: 0.0, True: 0.0}
        self.point: Point | None = None
        self.t_point = 0.0
        self.iops: float | None = None
        self.lat_ms: float | None = None
        self.slowest: str | None = None  # a many-host point: the host with the fewest ops per engine this second
        self._live = None
        # the live view (fathom.live.Observer) sees the same lifecycle: point start and end, each interval, events
        self.observers: list[Any] = []
        if self.tty:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(stderr=True)
            self._live = Live("", console=self._console, refresh_per_second=4, transient=True)
            self._live.start()

    def _pos(self, n: int) -> str:
        return f"[{n}/{self.total}]" if self.total else f"[{n}]"

    def _tell(self, hook: str, *args: Any) -> None:
        for o in self.observers:
            fn = getattr(o, hook, None)
            if fn is None:  # an observer that has no use for this hook
                continue
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - the live view must never stop a run
                print(f"  live view: {hook} failed: {exc}", file=sys.stderr, flush=True)

    def span(self, recs: list[dict[str, Any]]) -> None:
        self._tell("span", recs)

    def event(self, e: dict[str, Any]) -> None:
        self._tell("event", e)

    def say(self, msg: str) -> None:
        if self._live is not None:
            self._console.print(msg, markup=False, highlight=False)
        else:
            print(msg, file=sys.stderr, flush=True)

    def _ratio(self, capped: bool) -> float:
        took, planned = self.took_s[capped], self.planned_s[capped]
        if not planned:
            return 1.0
        return took / planned if capped else max(0.5, took / planned)

    def eta_s(self) -> float:
        left = sum(est * self._ratio(capped) for est, capped in self.todo_est.values())
        if self.point is not None:
            left -= min(time.monotonic() - self.t_point, self.point.est_s * self._ratio(self.point.capped))
        return max(0.0, left)

    def point_start(self, point: Point, n: int) -> None:
        self.point, self.t_point, self.iops, self.lat_ms = point, time.monotonic(), None, None
        self.slowest = None
        self.n = n
        self._tell("point_start", point, n, self.total)
        if self._live is None:
            eta = f" (run ETA {_fmt_s(self.eta_s())})" if self.total else ""
            self.say(f"{self._pos(n)} {point.label()} ...{eta}")
        self._draw()

    def interval(self, rec: dict[str, Any]) -> None:
        ops = rec.get("ops") or {}
        dt = float(rec.get("dt") or rec.get("interval_s") or 1.0)
        total = sum(float(o.get("ops") or 0) for o in ops.values())
        self.iops = total / dt if not rec.get("approx") else total
        lats = [(float(o.get("ops") or 0), o.get("lat_mean_ns")) for o in ops.values() if o.get("lat_mean_ns")]
        n = sum(c for c, _ in lats)
        self.lat_ms = sum(c * lat for c, lat in lats) / n / 1e6 if n else None
        slow = rec.get("slowest")
        self.slowest = f"{slow['host']} {_fmt_iops(slow['iops'])}" if slow else None
        self._tell("interval", rec)
        self._draw()

    def point_end(self, point: Point, status: str, metrics: dict[str, Any] | None, error: str | None = None) -> None:
        took = time.monotonic() - self.t_point
        self.took_s[point.capped] += took
        self.planned_s[point.capped] += point.est_s
        self.todo_est.pop(point.key, None)
        self.done += 1
        self.point = None
        self._tell("point_end", point, status, metrics, error)
        m = metrics or {}
        if status == "done":
            lat = f"{m['clat_ms']:.3f}" if m.get("clat_ms") is not None else "-"
            p99 = f"{m['p99_ms']:.3f}" if m.get("p99_ms") is not None else "-"
            osd = f"{m['osd_cpu']:.0f}%" if m.get("osd_cpu") is not None else "-"
            self.say(f"{self._pos(self.n)} {point.label()}: {_fmt_iops(m.get('iops'))} IOPS, "
                     f"{m.get('bw_mib_s') or 0:.1f} MiB/s, clat {lat} ms, p99 {p99} ms, OSD CPU {osd} "
                     f"({took:.1f} s){schedule_note(m)}")
        else:
            self.say(f"{self._pos(self.n)} {point.label()}: {status.upper()}{': ' + error if error else ''}")
        self._draw()

    def _draw(self) -> None:
        if self._live is None:
            return
        if self.point is None:
            self._live.update(f"{self.done} point(s) done; run ETA {_fmt_s(self.eta_s())}")
            return
        el = time.monotonic() - self.t_point
        lat = f"{self.lat_ms:.3f} ms" if self.lat_ms is not None else "-"
        self._live.update(f"{self._pos(self.n)} {self.point.label()}  {el:.0f}/{self.point.est_s:.0f} s  "
                          f"IOPS {_fmt_iops(self.iops)}  lat {lat}"
                          + (f"  slowest host {self.slowest}" if self.slowest else "")
                          + f"  run ETA {_fmt_s(self.eta_s())}")

    def close(self) -> None:
        self._tell("close")  # the observers' own end (fathom.live.seconds: its last rows, its thread)
        if self._live is not None:
            self._live.stop()
            self._live = None
