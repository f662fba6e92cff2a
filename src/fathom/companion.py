"""The companion protocol: what runs beside a point's engine (telemetry, progress, faults, steady state).

A companion (criterion's report observers, cbt's monitors) starts with the point, sees each interval
record and stops with it, handing over a Contribution; it may ask the point to stop through
`Live.request_stop`, which reaches the engine's control channel. The base class has no-op hooks, as
criterion's `Report` trait has, so a companion writes only the ones it uses.

This module imports nothing of fathom's, not even for types: the companions' own modules (faults, steady,
telemetry, the server sources) and the point that runs them all import it. What a companion may know of its
point is the PointView protocol, which fathom.suite.plan.Point fills.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


class PointView(Protocol):
    """The running point as a companion may read it (fathom.suite.plan.Point fills it)."""

    key: str
    workload: str
    engine: str
    params: dict[str, Any]


@dataclass
class Contribution:
    """What a companion hands over when the point ends."""

    events: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)  # telemetry rows
    perf_counters: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # figures for the point's metrics (METRIC_COLUMNS keys)
    counter_source: str | None = None  # where its perf_counters came from ("admin socket", "ceph-tell", ...)


class Live:
    """The running point as companions see it."""

    def __init__(self, point: PointView):
        self.point = point
        self.started = time.time()
        self.stop_reason: str | None = None
        self._handle: Any = None  # the engine's control handle, once it runs
        # a structured event as it happens (a fault, steady state, a lost host), for the live view (point.py
        # hands it to every companion's on_notice); the stored events still come in each Contribution
        self.notify: Callable[[dict[str, Any]], None] = lambda event: None

    def attach(self, handle: Any) -> None:
        self._handle = handle
        if self.stop_reason and handle is not None:
            handle.stop(self.stop_reason)

    def request_stop(self, reason: str) -> None:
        """End the point cleanly now (in-flight ops drain; the point counts as done)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            if self._handle is not None:
                self._handle.stop(reason)


class Companion:
    """One observer of a point; every hook is optional."""

    interrupted = False  # set before stop() when the point was interrupted (Ctrl-C): hand over, do not wait

    def start(self, live: Live) -> None:
        """The point starts (before its engine)."""

    def on_interval(self, rec: dict[str, Any]) -> None:
        """One interval record of one engine, on the engine's reader thread."""

    def on_child(self, pid: int | None) -> None:
        """The engine process started (its pid) or ended (None)."""

    def on_span(self, recs: list[dict[str, Any]]) -> None:
        """A many-engine point: the engines' own records of the span the next merged record covers."""

    def on_notice(self, event: dict[str, Any]) -> None:
        """An event as it happens (Live.notify): a fault, steady state reached, a client host lost."""

    def stop(self) -> Contribution:
        """The point ended: hand over what was seen."""
        return Contribution()
