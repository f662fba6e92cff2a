"""The transport seam (fathom.hosts.transport): the engine group serves any class that fills `Transport`.

A transport defined here, a remote-looking host whose engines are this host's fathom-engine under another
name, runs in one group with `local`: barrier, clock offsets, merge and per-host rows come out as for SSH;
a host whose transport says it is gone is flagged lost and the others run on. No cluster: the null target.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fathom.engine_spec import Control, EngineSpec, Load
from fathom.engines import group as group_mod
from fathom.engines.clients import _result
from fathom.engines.fathom_engine import check_engine
from fathom.hosts.transport import TABLE, EngineProcess, Local, Transport, local_alive
from fathom.interfaces.null import Null


class Elsewhere(Local):
    """A transport of the test: a 'remote' host named `name`, its engines local processes."""

    remote = True
    start_hint = " (the test transport)"

    def __init__(self, name: str, engine: str):
        super().__init__(engine)
        self.name = name
        self.closed = False
        self.pids: list[int] = []

    async def start(self, spec_json: str) -> Any:
        p = await super().start(spec_json)
        self.pids.append(p.pid)
        return p

    def close(self) -> None:
        """As a dropped connection ends its channels: the streams of its engines end."""
        self.closed = True
        for pid in self.pids:
            if local_alive(pid):
                os.kill(pid, signal.SIGKILL)


def _spec(seconds: float) -> dict[str, Any]:
    return EngineSpec(target=Null(rw="randread", bs=4096, delay_us=200), load=Load(iodepth=2, duration_s=seconds),
                      control=Control(wait=True, heartbeat_timeout_s=group_mod.HEARTBEAT_TIMEOUT_S)).to_json()


@pytest.fixture(scope="module")
def engine() -> str:
    try:
        return str(check_engine())
    except Exception as exc:  # noqa: BLE001 - no engine built: nothing to run
        pytest.skip(f"fathom-engine: {exc}")


def test_the_builtin_transports_fill_the_protocol(engine):
    from fathom.hosts.ssh import SshHost
    from fathom.hosts.clients import ClientHost, ClientsSpec

    assert TABLE.modules == {"ssh": "fathom.hosts.ssh", "k8s": "fathom.hosts.pods"}
    assert isinstance(Local(engine), Transport)
    assert isinstance(SshHost(ClientHost(host="h"), ClientsSpec(hosts=[ClientHost(host="h")])), Transport)


def test_a_new_transport_runs_in_the_group_beside_local(engine):
    far = Elsewhere("far", engine)
    instances = [group_mod.Instance(host="local", index=0, spec=_spec(2.0)),
                 *(group_mod.Instance(host="far", index=n, spec=_spec(2.0), transport=far) for n in range(2))]
    seen: list[dict[str, Any]] = []
    g = group_mod.Group(instances, engine, 1.0, "continue", seen.append, lambda e: None)
    group_mod.run_group(g, 60.0, 120.0)
    assert not g.failed and not g.lost_hosts and g.start_at is not None
    assert set(g.clocks) == {"local", "far"}
    assert all(isinstance(i.proc, EngineProcess) and i.run.exit_code == 0 for i in instances)
    res, _ = _result(g)
    hosts = {r["host"]: r for r in res.extra["hosts"]}
    assert hosts["far"]["engines"] == 2 and hosts["local"]["engines"] == 1
    total = sum(o.ops for o in res.ops.values() if o.ops)
    assert total == sum(e["ops"] for e in res.extra["engines"]) > 0  # every op counted once
    assert seen and all(not local_alive(i.pid) for i in instances if i.pid)


def test_a_host_its_transport_calls_gone_is_lost_and_the_others_run_on(engine):
    far = Elsewhere("far", engine)
    instances = [group_mod.Instance(host="local", index=0, spec=_spec(4.0)),
                 group_mod.Instance(host="far", index=0, spec=_spec(4.0), transport=far)]
    events: list[dict[str, Any]] = []

    def on_interval(rec: dict[str, Any]) -> None:
        if rec["index"] == 1 and far.lost is None:
            far.lost = "the test's transport lost it"
            os.kill(instances[1].pid, signal.SIGSTOP)  # silent from now on, as a host cut off

    g = group_mod.Group(instances, engine, 1.0, "continue", on_interval, events.append)
    try:
        group_mod.run_group(g, 60.0, 60.0)
    finally:
        far.close()
    assert g.lost_hosts == {"far": "the test's transport lost it"} and far.closed
    assert not g.failed and instances[0].run.exit_code == 0
    assert any(e["kind"] == "client_lost" for e in events)


def _ended(pid: int) -> bool:
    """The process has exited (gone, or a zombie nobody has waited for yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_heartbeats_go_while_the_points_side_is_blocked(engine):
    """The loop that sends the heartbeats runs no consumer of the records: with the live view's lock held for
    the whole point (as a scrape of /metrics held it while formatting), the engines still hear their heartbeats
    and run to their end, instead of stopping as `orchestrator_lost` after HEARTBEAT_TIMEOUT_S."""
    from fathom.live.state import LiveState

    st = LiveState()
    st.point_start(1, "w/1", "w", "w", {}, 10.0)
    seconds = group_mod.HEARTBEAT_TIMEOUT_S + 4
    instances = [group_mod.Instance(host="local", index=n, spec=_spec(seconds)) for n in range(2)]
    g = group_mod.Group(instances, engine, 1.0, "continue", st.interval, lambda e: None)
    g.on_span = st.span
    runner = threading.Thread(target=group_mod.run_group, args=(g, 60.0, 120.0), daemon=True)
    with st.lock:  # held until every engine has ended
        runner.start()
        deadline = time.monotonic() + 120
        while not (all(i.pid for i in instances) and all(_ended(i.pid) for i in instances)):
            assert time.monotonic() < deadline, "the engines did not end"
            time.sleep(0.2)
    runner.join(120)
    assert not runner.is_alive()
    assert [(i.run.exit_code, (i.run.summary or {}).get("stop")) for i in instances] == [(0, "duration")] * 2
    seconds_merged = [round(r["t"], 3) for r in g.merged if not r.get("tail")]  # a partial last second is not plotted
    assert st.point is not None and [x["t"] for x in st.point["series"]] == seconds_merged  # all handed over


def test_local_start_removes_its_spec_file(engine, tmp_path):
    import asyncio

    async def go() -> Path:
        p = await Local(engine).start(json_spec := '{"not": "a spec"}')
        assert json_spec
        await p.wait()
        f = Path(p.specfile)
        assert f.exists()
        p.release()
        return f

    assert not asyncio.run(go()).exists()
