"""A run's client hosts, connected once, and a point run on all of them (fathom.engines.group).

`Clients.open(spec)` connects to every remote host at once, uploads and checks the
engine there (each by its transport: fathom.hosts.transport), and measures nothing yet; `run(params,
ctx)` builds one engine spec per engine instance (each writes under its own
object-name prefix, `<run tag>.<host>.<n>`, so writers never collide and a later
read on the same clients finds its own objects), runs them as one group and
returns the exact merge, with per-host and per-engine figures in `extra`.
`run_specs(make_spec, ...)` is the same for any engine spec (fathom bench).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fathom.results import merge
from fathom.engine_spec import Control, EngineSpec
from fathom.engines import group as group_mod
from fathom.interfaces.base import PointContext
from fathom.engines.fathom_engine import PROTOCOL, check_engine, point_spec
from fathom.hosts.ssh import LOOP
from fathom.hosts.transport import OpenContext, Transport, open_all
from fathom.errors import FathomError
from fathom.cluster.client import HOST, Client
from fathom.hosts.clients import ClientsSpec
from fathom.results.model import PointResult


@dataclass
class Clients:
    spec: ClientsSpec
    hosts: dict[str, Transport] = field(default_factory=dict)  # remote hosts by name, connected
    client: Client = HOST  # whose Ceph libraries this host's engines load (remote hosts load their own)

    @classmethod
    def open(cls, spec: ClientsSpec, ctx: OpenContext | None = None, needs_cluster: bool | None = None) -> Clients:
        """ctx: the run (its tag, connection and journal) for a transport that makes hosts (pods). needs_cluster:
        only the hosts of the transports that need the cluster, or of those that do not (the rest: `add`)."""
        out = cls(spec)
        out.add(ctx, needs_cluster)
        return out

    @classmethod
    def first(cls, cs: ClientsSpec, say: Callable[[str], None]) -> Clients:
        """The client hosts of cs that need nothing of the cluster (SSH), connected and their engines checked;
        the pods are added once the cluster is there (`add` with needs_cluster)."""
        if cs.kubernetes is not None:  # a missing kubeconfig is known now, not after a cluster started for the pods
            from fathom.hosts.k8s.api import existing_kubeconfig

            existing_kubeconfig(cs.kubernetes.kubeconfig)
        if cs.ssh:
            say(f"connecting to {len(cs.ssh)} client host(s) over SSH")
        elif not cs.remote:
            say(f"{sum(h.instances for h in cs.hosts)} engines on this host")
        return cls.open(cs, needs_cluster=False)

    def add(self, ctx: OpenContext | None = None, needs_cluster: bool | None = None) -> None:
        """The spec's remote hosts of the transports needs_cluster selects (fathom.hosts.transport.open_all)
        connected, with those connected before."""
        if ctx is not None and ctx.conn is not None:
            self.client = ctx.conn.client
        if self.spec.remote:
            binary = check_engine()
            self.hosts.update({h.name: h for h in LOOP.run(open_all(self.spec, binary, PROTOCOL, ctx, needs_cluster))})

    def close(self) -> None:
        hosts, self.hosts = list(self.hosts.values()), {}

        async def close_all() -> None:
            await asyncio.gather(*(h.aclose() for h in hosts), return_exceptions=True)

        if hosts:
            LOOP.run(close_all(), timeout=15)

    def describe(self) -> dict[str, Any]:
        d = self.spec.describe()
        for h in d["hosts"]:
            t = self.hosts.get(h["name"])
            if t is not None:
                h["engine_path"] = t.engine
                h.update(t.facts)
        return d

    def run(self, params: dict[str, Any], ctx: PointContext) -> PointResult:
        g, res, _ = self.run_specs(lambda: point_spec(params, ctx), ctx.timeout, ctx.on_interval, ctx.on_event,
                                   ctx.on_control, on_engines=ctx.on_engines, on_end=lambda: ctx.on_child(None),
                                   on_span=ctx.on_span)
        failed = g.failed or g.ended_badly()
        if failed:
            raise FathomError(failed)
        return res

    def run_specs(self, make_spec: Callable[[], EngineSpec], timeout: float,
                  on_interval: Callable[[dict[str, Any]], None], on_event: Callable[[dict[str, Any]], None],
                  on_control: Callable[[Any], None] = lambda handle: None,
                  on_engines: Callable[[dict[str, Any]], None] = lambda rows: None,
                  on_end: Callable[[], None] = lambda: None,
                  on_span: Callable[[list[dict[str, Any]]], None] = lambda recs: None,
                  ) -> tuple[group_mod.Group, PointResult, dict[str, Any]]:
        """One point on every engine of every host, each from a fresh make_spec() (its own object prefix):
        the finished group (a failure is in its `failed`), the merged point and the per-engine rows.
        on_engines gets the rows also when a Ctrl-C ends the point (the KeyboardInterrupt then carries the
        merged `.result`)."""
        instances = self._instances(make_spec)
        interval_s = float(instances[0].spec.get("interval_s") or 1.0)
        g = group_mod.Group(instances, str(check_engine()), interval_s, self.spec.on_loss, on_interval, on_event,
                            client=self.client)
        g.on_span = on_span
        on_control(group_mod.GroupHandle(g))
        conn = instances[0].spec["target"].get("connection") or {}
        ready = 2 * float(conn.get("timeout_s") or 10.0) + 10 + group_mod.READY_GRACE_S
        try:
            group_mod.run_group(g, ready, timeout + ready)
        except KeyboardInterrupt as exc:
            res, rows = _result(g)
            on_engines(rows)
            exc.result = res  # type: ignore[attr-defined]
            raise
        finally:
            on_end()
        res, rows = _result(g)
        on_engines(rows)
        return g, res, rows

    def _instances(self, make_spec: Callable[[], EngineSpec]) -> list[group_mod.Instance]:
        out = []
        engines = sum(h.instances for h in self.spec.hosts)
        for h in self.spec.hosts:
            for n in range(h.instances):
                spec = make_spec()
                spec.control = Control(wait=True, heartbeat_timeout_s=group_mod.HEARTBEAT_TIMEOUT_S)
                spec.seed = instance_seed(spec.seed, len(out))
                if spec.load.rate is not None:  # a suite's rate is offered over all engines: each its share
                    spec.load.rate /= engines
                t = spec.target
                if getattr(t, "prefix", None):
                    t.prefix = client_prefix(t.prefix, h.name, n)  # type: ignore[attr-defined]
                if hasattr(t, "spread"):  # a target served by several gateways: this engine's share
                    t.spread(len(out))
                conn = getattr(t, "connection", None)
                if conn is not None and (h.ceph_conf or h.keyring):
                    conn.conf = h.ceph_conf or conn.conf
                    conn.keyring = h.keyring or conn.keyring
                there = None if h.local else self.hosts[h.name]
                if conn is not None and there is not None:
                    conn.library_dir = None  # another host's engine loads that host's own Ceph libraries
                if conn is not None and getattr(there, "connection", None):  # a pod: the conf its Secret mounts
                    for k, v in there.connection.items():  # type: ignore[union-attr]
                        setattr(conn, k, v)
                out.append(group_mod.Instance(host=h.name, index=n, spec=spec.to_json(), transport=there))
        return out


def instance_seed(seed: int, k: int) -> int:
    """The seed of a point's k-th engine: the point's own for the first, others apart from it (engines of one seed
    would issue their open-loop arrivals in lockstep, the sum far burstier than the rate it offers)."""
    return seed + k * 7919


def client_prefix(prefix: str, host: str, instance: int) -> str:
    """The object-name prefix of one engine of a many-engine point: `<prefix>.<host>.<n>` (host with every
    character other than letters, digits, '_' and '-' as '_', so the part holds no '.')."""
    return f"{prefix}.{_slug(host)}.{instance}"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _result(g: group_mod.Group) -> tuple[PointResult, dict[str, Any]]:
    """The merged point and what the store keeps per engine (intervals and histograms by host and instance)."""
    totals, engines, intervals, hists = [], [], [], {}
    for i in g.instances:
        t = merge.engine_totals(i.run.summary, i.run.intervals)
        totals.append(t)
        ops = t["ops"]
        merged_h = merge.merge_ops([ops]) if ops else {}
        for kind, o in merged_h.items():
            if o.get("hist"):
                hists[(kind, i.host, i.index)] = o["hist"]
        all_h = [o["hist"] for o in merged_h.values() if o.get("hist")]
        engines.append({"host": i.host, "instance": i.index, "pid": i.pid, "ops": sum(int(o.get("ops") or 0)
                        for o in ops.values()), "bytes": sum(int(o.get("bytes") or 0) for o in ops.values()),
                        "measured_s": t["measured_s"], "cpu_s": t["user_s"] + t["sys_s"],
                        "hist": all_h[0] if len(all_h) == 1 else (merge.hdr.encode(merge.hdr.merge(all_h))
                                                                  if all_h else None),
                        "lost": i.lost, "exit_code": i.run.exit_code, "complete": t["complete"],
                        "stop": (i.run.summary or {}).get("stop"), "prefix": i.spec["target"].get("prefix"),
                        "seed": i.spec.get("seed"),
                        # the Ceph client library files it loaded (its start record), as a one-engine point's
                        # extra.libraries: each host's own (a pod's are its image's)
                        "libraries": (i.run.start or {}).get("libraries")})
        intervals += i.run.intervals
    res = merge.point_result(totals)
    offsets = [g.clocks[i.host].offset_s if i.host in g.clocks else 0.0 for i in g.instances]
    raw = [[{**r, "ts": r["ts_host"]} for r in i.run.intervals] for i in g.instances]
    skew = merge.start_skew_s(raw, offsets)
    res.stopped_early = bool(g.stop_reason) or any(e["stop"] not in (None, "duration", "ops", "bytes", "done")
                                                   for e in engines if e["complete"])
    # what stopped it: the stop asked for, else the first engine's own early stop (heartbeats lost, an error)
    res.stop_reason = g.stop_reason or next((s.get("stop_reason") for i in g.instances if not i.lost
                                             and (s := i.run.summary or {}).get("stopped_early")), None)
    res.extra.update({
        "hosts": merge.host_rows(engines),
        "engines": [{k: v for k, v in e.items() if k != "hist"} for e in engines],
        "clocks": {h: {"offset_ms": c.offset_s * 1e3, "rtt_ms": c.rtt_s * 1e3} for h, c in g.clocks.items()},
        "start_at": g.start_at, "start_skew_ms": skew * 1e3 if skew is not None else None,
        "clients_lost": dict(g.lost_hosts), "left_running": g.left_running, "interrupted": g.interrupted,
        "ended": time.time()})
    merged_rows = [{**r, "host": "", "instance": -1} for r in g.merged]
    return res, {"intervals": intervals + merged_rows, "histograms": hists}
