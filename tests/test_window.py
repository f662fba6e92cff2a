"""The server telemetry window: the engine's measured phase, not the spawn-to-exit span (pure logic)."""

from __future__ import annotations

import pytest

from fathom.results import usage
from fathom.results.usage import telemetry_window


def _iv(t: float, ramp: bool, phase0: float = 1000.0) -> dict:
    return {"type": "interval", "t": t, "ts": phase0 + t, "dt": 1.0, "ramp": ramp, "ops": {}}


def test_the_window_is_the_engines_measured_phase():
    # spawned at 990, connected and prefilled for 10 s, ramp 2.5 s, measured to 1006.2, exited at 1009
    ivs = [_iv(1.0, True), _iv(2.0, True), _iv(2.5, True), *(_iv(t, False) for t in (3.5, 4.5, 5.5)), _iv(6.2, False)]
    w = telemetry_window(ivs, started=990.0, ended=1009.0, ramp_s=2.5)
    assert w == {"from": pytest.approx(1002.5), "to": pytest.approx(1006.2), "source": "engine phase"}
    # daemon CPU averaged over it: the idle seconds of connect and teardown do not dilute it
    samples = [{"ts": float(ts), "source": "osd.0", "kind": "osd", "cpu_pct": 100.0 if 1003 <= ts <= 1006 else 0.0,
                "rss_mib": 10.0} for ts in range(990, 1010)]
    assert usage.summarize(samples, w["from"], w["to"])["osd_cpu"] == pytest.approx(100.0)
    assert usage.summarize(samples, 990.0 + 2.5, 1009.0)["osd_cpu"] < 30.0  # the old window's figure


def test_no_ramp_records_and_estimates_fall_back():
    ivs = [_iv(t, False) for t in (1.0, 2.0, 3.0)]
    assert telemetry_window(ivs, 990.0, 1009.0, 0.0) == {"from": 1000.0, "to": 1003.0, "source": "engine phase"}
    fio = [{"t": 1.0, "ts": 1001.0, "approx": True, "ramp": False, "ops": {}}]  # fio's progress-line estimates
    assert telemetry_window(fio, 990.0, 1009.0, 2.0) == {"from": 992.0, "to": 1009.0, "source": "spawn to exit"}
