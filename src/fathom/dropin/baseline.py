"""`fathom baseline`: the raw ceilings of a cluster's hosts, stored as a run of kind `baseline`, one point each.

What is measured (fathom.analysis.ceiling turns it into each point's ceiling, with the pool's layout):
- engine      fathom-engine on the null target (4 KiB random reads, 16 in flight) on each client host: the ops/s
              the engine itself issues there, with no storage behind it;
- filesystem  fathom's own cluster (--dir): the file system under its OSDs' BlueStore files, written then read
              (4 MiB, O_DIRECT, 4 in flight) through a scratch directory fathom makes beside them and removes;
- device      an attached cluster's OSD devices (`ceph osd metadata`: each OSD's devices and host) on the server
              hosts named: 4 MiB sequential reads, O_DIRECT, 16 in flight, read-only (they hold the cluster's data);
- network     iperf3 (Debian's) from each client host to each server host and back (-R), 4 TCP streams: what each
              direction carries between the two.
A point that cannot run (no iperf3 on a host, a device the user cannot read) is stored failed with why; the others
run on. Ctrl-C stores what ran and marks the run interrupted; the scratch files and iperf3 servers go either way.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fathom.engine_spec import EngineSpec, Load
from fathom.errors import FathomError, UsageError
from fathom.hosts.clients import ClientHost, ClientsSpec, parse_client
from fathom.interfaces.null import Null
from fathom.interfaces.posix import Posix

MIB = 1 << 20
STREAMS = 4  # iperf3's parallel TCP streams: one stream seldom fills a fast link


@dataclass
class Item:
    """One measurement: a point of the baseline run."""

    kind: str  # engine | filesystem | device | network
    key: str
    host: ClientHost  # where it runs
    rw: str = "read"
    path: str | None = None
    osds: list[str] = field(default_factory=list)
    device: str | None = None
    peer: ClientHost | None = None  # network: the server host
    reverse: bool = False  # network: server to client

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"baseline": self.kind, "host": self.host.name, "rw": self.rw}
        if self.kind == "engine":
            out.update(interface="null", bs=4096, iodepth=16)
        elif self.kind in ("filesystem", "device"):
            out.update(interface="posix", bs=4 * MIB, iodepth=4 if self.kind == "filesystem" else 16,
                       path=self.path, device=self.device, osds=self.osds, direct=True)
        else:
            assert self.peer is not None
            out.update(interface="iperf3", server=self.peer.name, streams=STREAMS,
                       direction="server->client" if self.reverse else "client->server")
        return out


def plan(clients: list[ClientHost], servers: list[ClientHost], local_dir: Path | None,
         osds: dict[str, dict[str, Any]], server_names: dict[str, str]) -> tuple[list[Item], list[str]]:
    """The items, and what cannot be measured (said, never guessed). server_names: each server host's name as
    the cluster's metadata has it (its `uname -n`) -> its ClientHost name."""
    items: list[Item] = []
    skipped: list[str] = []
    for c in clients:
        items.append(Item("engine", f"engine@{c.name}", c, rw="randread"))
    if local_dir is not None:
        names = sorted(osds)
        scratch = str(local_dir / f"baseline-{os.getpid()}.fathom")
        here = next((c for c in clients if c.local), ClientHost(host="local"))
        for rw in ("write", "read"):
            items.append(Item("filesystem", f"filesystem-{rw}", here, rw=rw, path=scratch, osds=names,
                              device=next((d for o in osds.values() for d in o.get("devices") or []), None)))
    else:
        by_host = {h.name: h for h in servers}
        seen: set[tuple[str, str]] = set()
        for osd, o in sorted(osds.items()):
            host = by_host.get(server_names.get(str(o.get("host")), ""))
            if host is None:
                skipped.append(f"{osd}'s devices: its host {o.get('host')} is not among the --server-host hosts")
                continue
            for dev in o.get("devices") or []:
                if (host.name, dev) in seen:
                    next(i for i in items if i.device == dev and i.host.name == host.name).osds.append(osd)
                    continue
                seen.add((host.name, dev))
                items.append(Item("device", f"device-{dev}@{host.name}", host, path=f"/dev/{dev}", osds=[osd],
                                  device=dev))
    if not servers:
        skipped.append("network: no --server-host named (a client on the cluster's own host sends over no NIC)")
    for c in clients:
        for s in servers:
            for reverse in (False, True):
                arrow = "<-" if reverse else "->"
                items.append(Item("network", f"network {c.name}{arrow}{s.name}", c, peer=s, reverse=reverse))
    return items, skipped


def spec_of(item: Item, runtime_s: float) -> EngineSpec:
    """The engine point an engine, filesystem or device item runs."""
    load = Load(iodepth=int(item.params()["iodepth"]), duration_s=runtime_s + 1.0, ramp_s=1.0)
    if item.kind == "engine":
        return EngineSpec(target=Null(rw="randread", bs=4096), load=load, op_timeout_s=None)
    assert item.path is not None
    target = Posix(path=item.path, rw="write" if item.rw == "write" else "read", bs=4 * MIB, direct=True,  # type: ignore[arg-type]
                   **({"filesize": 256 * MIB, "end_fsync": True} if item.kind == "filesystem" else {}))
    return EngineSpec(target=target, load=load)


# ---- iperf3 ----------------------------------------------------------------------------------------------------

def iperf3_rate(text: str) -> tuple[float | None, str | None]:
    """(bits/s the receiver counted, error) from `iperf3 -J`'s output."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None, (text.strip().splitlines() or ["no output"])[-1][:200]
    if doc.get("error"):
        return None, str(doc["error"])
    got = ((doc.get("end") or {}).get("sum_received") or {}).get("bits_per_second")
    return (float(got), None) if got else (None, "iperf3 gave no received rate")


class Shell:
    """A command line on a host: this one, or an SSH host (fathom.hosts.ssh.SshHost)."""

    def __init__(self, host: ClientHost, opts: ClientsSpec):
        self.host, self.ssh = host, None
        if not host.local:
            from fathom.hosts.ssh import LOOP, SshHost

            self.ssh = SshHost(host, opts, role="baseline host")
            LOOP.run(self.ssh.connect(), timeout=opts.connect_timeout_s + 5)

    def run(self, cmd: str, timeout: float) -> tuple[int, str, str]:
        if self.ssh is None:
            p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)
            return p.returncode, p.stdout, p.stderr
        from fathom.hosts.ssh import LOOP

        return LOOP.run(self.ssh.run(cmd, timeout=timeout), timeout=timeout + 5)

    def close(self) -> None:
        if self.ssh is not None:
            self.ssh.close()


def network(client: Shell, server: Shell, reverse: bool, runtime_s: float) -> dict[str, Any]:
    """One direction between two hosts: an iperf3 server started on the server host for one test (-1), stopped by
    its pid if still there; the client's JSON read. {bits_s} or {error}."""
    for sh in (client, server):
        rc, _, _ = sh.run("command -v iperf3", 10)
        if rc != 0:
            return {"error": f"no iperf3 on {sh.host.name} (Debian: apt install iperf3)"}
    addr = server.host.host if not server.host.local else "127.0.0.1"
    port = random.randint(20000, 60000)
    rc, out, err = server.run(f"iperf3 -s -1 -p {port} >/dev/null 2>&1 </dev/null & echo $!", 15)
    if rc != 0 or not out.strip().isdigit():
        return {"error": f"iperf3 -s on {server.host.name}: {(err or out).strip()[-200:]}"}
    pid = int(out.strip())
    try:
        cmd = (f"iperf3 -J -c {shlex.quote(addr)} -p {port} -P {STREAMS} -t {runtime_s:g} -O 1"
               + (" -R" if reverse else ""))
        for _ in range(10):  # until the server listens
            rc, out, err = client.run(cmd, runtime_s + 30)
            bits, why = iperf3_rate(out)
            if bits is not None or "connect" not in (why or ""):
                break
            time.sleep(0.3)
        return {"bits_s": bits, "command": cmd} if bits is not None else {"error": f"iperf3 -c: {why or err}"}
    finally:
        # ours, by its pid, and only while that pid is still iperf3 (it exits after its one test)
        server.run(f"case \"$(tr '\\0' ' ' </proc/{pid}/cmdline 2>/dev/null)\" in 'iperf3 -s -1 '*) kill {pid};; esac;"
                   " true", 10)


# ---- the run ---------------------------------------------------------------------------------------------------

@dataclass
class Options:
    clients: list[ClientHost]  # none: this host
    servers: list[ClientHost]
    local_dir: Path | None
    db: str
    name: str
    runtime_s: float = 10.0
    server_key: str | None = None
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    conn: Any = None  # an attached cluster's fathom.cluster.ceph.Connection: its OSDs' devices and hosts


def hosts(texts: list[str], key: str | None = None) -> list[ClientHost]:
    """Hosts as the command line names them (user@host[:port], local)."""
    out = []
    for t in texts:
        try:
            out.append(ClientHost(**parse_client(t), **({"key_file": key} if key else {})))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return out


def run(o: Options, say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> int:
    """Measure every item, store each as it ends; returns the run id."""
    from fathom.dropin import record
    from fathom.results.store import Store
    from fathom.servers import capacity

    clients = [h for h in o.clients if h.pod is None] or [ClientHost(host="local")]  # pods: not measured here
    servers = [h.model_copy(update={"key_file": h.key_file or o.server_key}) for h in o.servers]
    opts = ClientsSpec(hosts=clients, known_hosts=o.known_hosts, accept_new_host_keys=o.accept_new_host_keys)
    sopts = ClientsSpec(hosts=servers or [ClientHost(host="local")], known_hosts=o.known_hosts,
                        accept_new_host_keys=o.accept_new_host_keys)
    shells: dict[str, Shell] = {}
    try:
        for h in clients:
            shells[h.name] = Shell(h, opts)
        names: dict[str, str] = {}
        for h in servers:
            shells[h.name] = sh = Shell(h, sopts)
            names[sh.run("uname -n", 10)[1].strip()] = h.name
        if o.local_dir is not None:
            from fathom.cluster.local import LocalCluster

            osds = capacity.osd_devices(LocalCluster(o.local_dir), None)
        else:
            from fathom.cluster.ceph import Ceph

            osds = capacity.osd_devices(None, Ceph(o.conn)) if o.conn is not None else {}
        items, skipped = plan(clients, servers, o.local_dir, osds, names)
        for s in skipped:
            say(f"baseline: not measured: {s}")
        env = record.bench_env(o.conn, None, {"baseline": {
            "clients": [h.name for h in clients], "servers": [h.name for h in servers], "osds": osds,
            "server_hosts": names, "runtime_s": o.runtime_s, "not_measured": skipped,
            "osd_hosts": sorted({str(v.get("host")) for v in osds.values()}) if o.local_dir is None else ["local"]}})
        with Store(o.db) as store:
            run_id = store.create_run(o.name, kind="baseline", env=env)
        status = "done"
        try:
            if o.local_dir is not None:  # the scratch directory: fathom's, removed below whatever happens
                (o.local_dir / f"baseline-{os.getpid()}.fathom").mkdir()
            for n, item in enumerate(items):
                say(f"baseline [{n + 1}/{len(items)}] {item.key} ({o.runtime_s:g} s)")
                _one(o, run_id, n, item, shells)
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            if o.local_dir is not None:
                shutil.rmtree(o.local_dir / f"baseline-{os.getpid()}.fathom", ignore_errors=True)
            with Store(o.db) as store:
                store.finish_run(run_id, status)
        return run_id
    finally:
        for sh in shells.values():
            sh.close()


def _one(o: Options, run_id: int, n: int, item: Item, shells: dict[str, Shell]) -> None:
    from fathom.dropin import engine, record
    from fathom.results.model import METRIC_COLUMNS
    from fathom.results.store import Store

    params = item.params()
    t0 = time.time()
    if item.kind == "network":
        assert item.peer is not None
        got = network(shells[item.host.name], shells[item.peer.name], item.reverse, o.runtime_s)
        status = "done" if got.get("bits_s") else "failed"
        metrics = None
        if status == "done":
            metrics = {k: None for k in METRIC_COLUMNS}
            metrics.update(runtime_s=o.runtime_s, bw_mib_s=got["bits_s"] / 8 / MIB)
        with Store(o.db) as store:
            store.record_point(run_id, n, item.key, item.kind, "iperf3", params, status, metrics=metrics,
                               result={"extra": {"iperf3": got}}, error=got.get("error"), started=t0,
                               ended=time.time())
        return
    spec = spec_of(item, o.runtime_s)
    cs = None if item.host.local else ClientsSpec(hosts=[item.host], known_hosts=o.known_hosts,
                                                  accept_new_host_keys=o.accept_new_host_keys)
    error = None
    try:
        out = engine.run_engine(spec, None, o.runtime_s + 120, clients=cs)
        if out.fatal or not out.summary:
            error = (out.fatal or {}).get("message") or (out.stderr or "the engine gave no summary").strip()[-300:]
    except FathomError as exc:
        out, error = None, exc.message
    m = record.measured(out, params, "failed" if error else "done", error)
    with Store(o.db) as store:
        store.record_point(run_id, n, item.key, item.kind, "fathom-engine", params, "failed" if error else "done",
                           metrics=m.metrics, result=m.result, error=error, started=m.started or t0,
                           ended=time.time(), intervals=m.intervals, histograms=m.hists, events=m.events)


def lines(points: list[dict[str, Any]]) -> list[str]:
    """Each stored point as a line with its unit (ops/s, MiB/s, Gbit/s), or why it failed."""
    out = []
    for p in points:
        q, m = p["params"], p.get("metrics") or {}
        if p["status"] != "done":
            out.append(f"{p['key']}: {p['status']}: {p.get('error') or 'no figure'}")
        elif q["baseline"] == "engine":
            out.append(f"{p['key']}: {m['iops']:,.0f} ops/s (null target, 4 KiB, 16 in flight)")
        elif q["baseline"] == "network":
            out.append(f"{p['key']}: {m['bw_mib_s'] * MIB * 8 / 1e9:.3g} Gbit/s ({q['direction']}, "
                       f"{q['streams']} TCP streams)")
        else:
            on = f" on {q['device']}" if q.get("device") else ""
            out.append(f"{p['key']}: {q['rw']} {m['bw_mib_s']:,.1f} MiB/s (4 MiB, O_DIRECT; "
                       f"{', '.join(q.get('osds') or []) or 'no OSD'}{on})")
    return out
