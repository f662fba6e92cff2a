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
    # daemon CPU averaged over it: the idle seconds of connect and teardown do not dilute it (busy over the
    # samples' intervals [1002, 1003] .. [1006, 1007], which cover the window)
    samples = [{"ts": float(ts), "source": "osd.0", "kind": "osd", "cpu_pct": 100.0 if 1003 <= ts <= 1007 else 0.0,
                "rss_mib": 10.0} for ts in range(990, 1010)]
    assert usage.summarize(samples, w["from"], w["to"])["osd_cpu"] == pytest.approx(100.0)
    assert usage.summarize(samples, 990.0 + 2.5, 1009.0)["osd_cpu"] < 35.0  # the old window's figure


def test_no_ramp_records_and_estimates_fall_back():
    ivs = [_iv(t, False) for t in (1.0, 2.0, 3.0)]
    assert telemetry_window(ivs, 990.0, 1009.0, 0.0) == {"from": 1000.0, "to": 1003.0, "source": "engine phase"}
    fio = [{"t": 1.0, "ts": 1001.0, "approx": True, "ramp": False, "ops": {}}]  # fio's progress-line estimates
    assert telemetry_window(fio, 990.0, 1009.0, 2.0) == {"from": 992.0, "to": 1009.0, "source": "spawn to exit"}


def _busy(ts: float, dt: float, cpu: float) -> dict:
    return {"ts": ts, "dt": dt, "source": "osd.0", "kind": "osd", "cpu_pct": cpu, "rss_mib": 10.0}


def test_samples_weigh_the_part_of_the_window_they_cover():
    """A daemon at a steady 100% through a window that starts and ends mid-sample reads 100%, on its own and per
    host: the samples straddling the edges count for their overlap, and the sampler's tail after the point's end
    (taken at stop, the daemon idle by then) for none of it."""
    t_from, t_to = 1000.6, 1008.6
    samples = [_busy(float(ts), 1.0, 100.0) for ts in range(1001, 1010)]  # [1000, 1001] .. [1008, 1009]
    samples.append(_busy(1009.1, 0.1, 0.0))  # the tail sample: [1009.0, 1009.1], after the window
    assert usage.summarize(samples, t_from, t_to)["osd_cpu"] == pytest.approx(100.0)
    assert usage.per_host(samples, t_from, t_to)["local"]["osd_cpu"] == pytest.approx(100.0)
    # the share of a straddling sample is its overlap: 0.4 s at 20% and 0.6 s at 60% over the first second
    edge = [_busy(1001.0, 1.0, 20.0), _busy(1002.0, 1.0, 60.0)]
    assert usage.summarize(edge, 1000.6, 1001.6)["osd_cpu"] == pytest.approx((0.4 * 20 + 0.6 * 60) / 1.0)
    assert usage.weighted(edge, 1000.6, 1001.6)[0][1] == pytest.approx(0.4)
    assert usage.window_mean(edge, 1000.6, 1001.6, "cpu_pct") == pytest.approx(44.0)
