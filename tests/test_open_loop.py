"""Open loop in suites: `rate` (ops/s over every engine on every host) and `arrival`, as a sweep axis.

The null interface needs no cluster: a rate sweep on two engines runs end to end and each point stores the
schedule the engines were given (their shares summed back to the suite's rate) and what ran.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import run_fathom

from fathom.suite import plan, spec
from fathom.engine_spec import EngineSpec, Load
from fathom.engines.clients import Clients
from fathom.hosts.clients import ClientsSpec
from fathom.interfaces.null import Null
from fathom.results.store import Store
from fathom.units import parse_rate

SUITE = """\
name: null-rates
defaults: {engine: fathom-engine, interface: null, runtime: 3s, ramp_time: 1s, iodepth: 8}
clients: {hosts: [{host: local, instances: 2}]}
workloads:
  - {name: rr, rw: randread, arrival: poisson}
sweep: {rate: [400, 1.2k]}
"""


def parse(text: str) -> spec.Suite:
    return spec.parse(textwrap.dedent(text), "s.yaml")


def test_rate_parses_sweeps_and_labels():
    s = parse(SUITE)
    pts = plan.expand(s)
    assert [p.params["rate"] for p in pts] == [400.0, 1200.0] and pts[0].params["arrival"] == "poisson"
    assert pts[1].label().endswith("rate=1200/s poisson") and pts[1].key == "rr/rate=1200"
    closed = parse(SUITE.replace(", arrival: poisson", "").replace("sweep: {rate: [400, 1.2k]}", ""))
    p = plan.expand(closed)[0].params
    assert "rate" not in p and "arrival" not in p  # closed loop: no open-loop fields in the point
    assert parse(SUITE.replace(", arrival: poisson", "")).workloads[0].arrival is None  # swept rate: set per point
    assert plan.expand(parse(SUITE.replace(", arrival: poisson", "")))[0].params["arrival"] == "uniform"
    assert parse_rate("10k/s") == 10_000 and parse_rate("250 ops/s") == 250


@pytest.mark.parametrize("change, expected", [
    (("sweep: {rate: [400, 1.2k]}", "sweep: {rate: [400, 0]}"), ["sweep.rate[1]", "above 0"]),
    (("sweep: {rate: [400, 1.2k]}", "sweep: {rate: [fast]}"), ["'fast'", "ops/s"]),
    (("sweep: {rate: [400, 1.2k]}", ""), ["arrival applies to open loop", "rate"]),
    (("engine: fathom-engine, interface: null", "engine: fio, interface: rbd"), ["fio", "rate_iops", "fathom-engine"]),
])
def test_open_loop_mistakes_are_named(change, expected):
    with pytest.raises(spec.SuiteError) as ei:
        parse(SUITE.replace(*change))
    for part in expected:
        assert part in str(ei.value), str(ei.value)


def test_an_slo_suite_takes_arrival_without_a_rate():
    # the search sets the rate: a suite that searches it may say how arrivals come without a dummy rate
    from fathom.run import probes
    from fathom.analysis import slo

    text = SUITE.replace("sweep: {rate: [400, 1.2k]}", "slo: {p99: 5ms}")
    s = parse(text)
    assert s.workloads[0].arrival == "poisson" and s.workloads[0].rate is None
    base = plan.expand(s)[0]
    src = probes.Probes(probes.Settings(slo.Targets({"p99": 5.0}), start=300), base)
    first = next(src.points())
    assert (first.params["rate"], first.params["arrival"]) == (300, "poisson")
    # in defaults too, and with a sweep of the iodepth the search does not vary
    parse(text.replace("rr, rw: randread, arrival: poisson}", "rr, rw: randread}\nsweep: {iodepth: [4, 8]}")
          .replace("iodepth: 8}", "iodepth: 8, arrival: poisson}"))
    # a search by iodepth runs closed loop: there arrival applies to nothing
    with pytest.raises(spec.SuiteError) as ei:
        parse(text.replace("slo: {p99: 5ms}", "slo: {p99: 5ms, by: iodepth}"))
    assert "arrival applies to open loop" in str(ei.value) and "s.yaml:5" in str(ei.value)


def test_each_engine_offers_its_share():
    # three engines on two hosts' worth of slots: a suite's 1200 ops/s is 400 each, closed loop untouched
    cs = ClientsSpec.model_validate([{"host": "local", "instances": 3}])
    got = Clients(cs)._instances(lambda: EngineSpec(target=Null(), load=Load(iodepth=4, rate=1200.0)))
    assert [i.spec["load"]["rate"] for i in got] == [400.0] * 3
    closed = Clients(cs)._instances(lambda: EngineSpec(target=Null(), load=Load(iodepth=4)))
    assert all("rate" not in i.spec["load"] for i in closed)


def test_a_rate_sweep_runs_on_two_engines(tmp_path, engine_ready):
    suite = tmp_path / "rates.yaml"
    suite.write_text(SUITE)
    db = tmp_path / "r.db"
    p = run_fathom("run", str(suite), "--db", str(db), timeout=180)
    assert p.returncode == 0, p.stderr
    with Store(db) as st:
        points = st.points(st.run("latest").id)
        assert [pt["params"]["rate"] for pt in points] == [400.0, 1200.0]
        for pt in points:
            m, rate = pt["metrics"], pt["params"]["rate"]
            # the two engines' shares sum to the suite's rate; the null target keeps any schedule
            assert m["offered_rate_ops_s"] == pytest.approx(rate)
            assert m["schedule_kept"] is True and m["unissued_ops"] == 0
            assert m["achieved_rate_ops_s"] == pytest.approx(rate, rel=0.15)
            assert m["iops"] == pytest.approx(rate, rel=0.15)
    # the report draws latency against the offered load, with the achieved rate on each level
    rep = tmp_path / "r.md"
    run_fathom("report", "latest", "--db", str(db), "-o", str(rep), check=True)
    chart = (tmp_path / "r-rr-offered.svg").read_text()
    assert "latency vs offered load" in chart and "offered rate (ops/s, all engines)" in chart
    assert "p99.9" in chart and "/s" in chart
    assert "offered (ops/s)" in rep.read_text()  # the detail table's schedule columns
