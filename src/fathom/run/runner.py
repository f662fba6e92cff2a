"""Running a suite: one attempt in phases (Phases): cluster, clients, prepare, points (point.py, each committed when it
ends), teardown. The client hosts that exist already (SSH) are connected by the checks before any Ceph call, the
pods made for the run once its cluster is there.

Data flows one way: spec -> plan -> cluster -> prep -> points (engine + companions) -> store. The runner owns the
lifecycle: a disposable local cluster (when no attached cluster is given, and some workload needs one) is stopped
whatever happens — failure, Ctrl-C, SIGTERM — unless --keep-cluster; on an attached cluster only what this run
created is removed, and every setting its hygiene changed is put back as it was found (fathom.cluster.restore;
`fathom cluster restore` after a SIGKILL). Ctrl-C marks the current point interrupted and keeps every finished
point; `--resume RUN` runs only the points not done.

Data a run's points leave for later points (rados bench's objects, read by the seq and rand points) is named per run
(the run's data tag), not per attempt, so a resumed attempt reads what an earlier one wrote: it adopts the earlier
attempt's pools (attached) or its still-healthy disposable cluster (after SIGKILL). Where that data is gone (the
cluster was stopped on Ctrl-C, a pool was made anew), the write point that left it runs again, unmeasured, before
its first remaining reader, and the run records that as an event (see resume.py). What attempts leave for each other
is the run's state record (attempt.py), apart from its environment.

The command line is resolved before the runner: RunOptions carries the attached cluster and the client hosts as the
CLI found them; nothing here reads argv.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom import engines, interfaces, live
from fathom.run import envinfo, reattach, resume
from fathom.run import faults as fault_run
from fathom.run import steady as steady_run
from fathom.suite import faults, plan, spec, steady
from fathom.hosts import clients as hosts
from fathom.servers import telemetry
from fathom.run import point as point_mod
from fathom.cluster import buckets, client, full, health, rgw as rgw_prep
from fathom.companion import Companion
from fathom.engines.clients import Clients
from fathom.cluster.ceph import Connection
from fathom.cluster.local import Daemon, LocalCluster
from fathom.cluster.prep import Prep
from fathom.cluster.restore import put_back
from fathom.cluster.attach import Attachment, client_for
from fathom.cluster.journal import FAULT_KIND, Journal
from fathom.hosts import impair
from fathom.run.attempt import Attempt
from fathom.run.work import RunOptions, Work, say as _say
from fathom.errors import FathomError, UsageError
from fathom.run.progress import Progress
from fathom.results.store import Store

CHILD_GRACE_S = 120.0  # beyond runtime + ramp before an engine is considered hung


@dataclass
class Outcome:
    run_id: int
    status: str  # done | failed | interrupted
    done: int = 0
    failed: int = 0
    skipped: int = 0
    wall_s: float = 0.0
    telemetry_cost_pct: float | None = None
    cluster_dir: str | None = None

    @property
    def exit_code(self) -> int:
        return {"done": 0, "failed": 1, "interrupted": 130}.get(self.status, 1)


@dataclass
class _Prepared:
    pools: dict[str, str] = field(default_factory=dict)  # suite pool name -> actual
    images: list[str] = field(default_factory=list)
    images_pool: str | None = None
    adopted: dict[str, int] = field(default_factory=dict)  # suite pool name -> pool id, kept from an earlier attempt
    images_made: bool = False  # some image was made in this attempt (so it is not prefilled yet)


def _raise_interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001
    raise KeyboardInterrupt


@dataclass
class Held:
    """What an attempt holds while it runs, each let go of by the teardown phase."""

    clients: Any = None  # fathom.engines.clients.Clients
    cluster: LocalCluster | None = None  # the disposable cluster this attempt runs on (started or adopted)
    adopted_from: str | None = None  # the attempt that started it, when adopted
    attached: Attachment | None = None  # how the points reach the cluster they measure
    prep: Prep | None = None
    prepared: _Prepared = field(default_factory=lambda: _Prepared())
    s3: dict[str, Any] | None = None  # prep.rgw: what the s3 interface needs per point (no key material)
    contexts: dict[str, engines.PointContext] = field(default_factory=dict)
    progress: Progress | None = None
    telemetry: point_mod.TelemetryCompanion | None = None
    coverage: Any = None  # fathom.servers.Coverage: the cluster's hosts sampled over SSH or read from Prometheus
    journal: Journal | None = None  # the run's undo journal on the cluster (Phases.journal)
    exporter: Any = None  # fathom.servers.mgrprom.Exporter, with --mgr-prometheus

    @property
    def ceph(self) -> Any:
        return self.attached.ceph() if self.attached else None


@dataclass
class Checked:
    """What the checks before a run found: the work, and the attached cluster and client hosts it runs on."""

    work: Work
    attached: Attachment | None
    needs_cluster: bool
    clients: Any  # fathom.hosts.clients.ClientsSpec, or None
    connected: Any = None  # fathom.engines.clients.Clients: the hosts that need no cluster (SSH), connected

    def close(self) -> None:
        """Let go of the connected hosts (a run that does not go on to its phases)."""
        if self.connected is not None:
            self.connected.close()


def run(opts: RunOptions) -> Outcome:
    """Run (or resume) a suite as the CLI does; returns what happened. Raises FathomError before the first point."""
    t_run = time.monotonic()
    # an existing store is opened before the checks (a file that is no results store is refused first); a new one
    # is made only once they pass, to record the run: a refused run leaves no empty store behind
    store = Store(opts.db) if Path(opts.db).exists() else None
    checked = None
    try:
        opts = reattach.resumed(opts, store)  # --resume: what the run was attached with, where none is given
        checked = Phases.check(opts, store)
        store = store or Store(opts.db)
        phases = Phases.begin(opts, store, checked)
    except BaseException:
        if checked is not None:
            checked.close()
        if store is not None:
            store.close()
        raise
    if phases.attempt is None:  # nothing left to do
        checked.close()
        store.close()
        return phases.outcome
    try:
        phases.run()
    finally:
        phases.outcome.wall_s = time.monotonic() - t_run
        store.close()
    _summary(phases.outcome, opts)
    return phases.outcome


class Phases:
    """One attempt at a run, in named phases: cluster, clients (the pods; SSH hosts come connected from check()),
    prepare, points, then teardown whatever happened. Each phase leaves what the next needs in `held`; the
    attempt keeps the run's state record."""

    def __init__(self, opts: RunOptions, store: Store, work: Work, run_id: int, held: Held, needs_cluster: bool,
                 clients: Any):
        self.opts, self.store, self.work, self.run_id, self.held = opts, store, work, run_id, held
        self.needs_cluster, self.clients_spec = needs_cluster, clients
        self.outcome = Outcome(run_id, "failed", skipped=len(work.points) - len(work.todo))
        self.attempt: Attempt | None = None

    @staticmethod
    def check(opts: RunOptions, store: Store | None) -> Checked:
        """Checks that fail before anything is made, the results store included (None: there is none yet):
        the suite or the run to resume, engines, client hosts, the attached cluster, faults. The client hosts
        that exist already (SSH) are connected before any Ceph call: a bad host is named at once, not after the
        cluster's checks (or a cluster that does not answer in time)."""
        work = Work.of(opts, store)
        todo = work.todo
        for name in sorted({p.engine for p in todo}):
            engines.get(name).check()  # fail before starting a cluster: e.g. the engine binary is missing
        needs_cluster = any(interfaces.cluster_needed(p.params) for p in todo)
        clients = hosts.clients_for(work.suite.clients, opts.clients, {p.engine for p in todo})
        attached = opts.attach
        c = work.suite.cluster
        if attached is None and c.kind == "attached":
            attached = Attachment(conn=Connection.from_args(c.conf, c.id, None, c.keyring))
            attached.conn = attached.conn.with_client(client_for(None, attached.conn.conf))
        asked = opts.client_ceph or (work.suite.clients.ceph if work.suite.clients else None)
        if attached is not None and asked:  # before the probe: the client that can read this cluster's keys
            attached.conn = attached.conn.with_client(client.resolve(asked))
        if (opts.servers is not None or opts.prometheus) and attached is None:
            raise UsageError("--server-host and --prometheus measure the hosts of an attached cluster; the "
                             "disposable cluster runs on this host, which fathom samples itself",
                             hint="attach with --conf, or leave them out")
        if clients is not None and clients.remote and attached is None and needs_cluster and not opts.bind:
            raise UsageError("client hosts other than this one cannot reach a disposable cluster bound to "
                             "127.0.0.1", hint="pass --bind ADDR (an address of this host they reach), or "
                                               "attach to a cluster with --conf")
        schedules = {p.workload: [faults.Fault.model_validate(f) for f in p.params.get("faults") or []] for p in todo}
        schedules = {wl: fs for wl, fs in schedules.items() if fs}
        checked = Checked(work, attached, needs_cluster, clients,
                          Clients.first(clients, _say) if clients is not None and todo else None)
        try:
            if attached is not None:
                attached.ceph().probe(timeout=30.0)
            if attached is not None and schedules:  # before anything is made: a fault this cluster cannot take
                fault_run.check_cluster(schedules, attached.ceph(), attached.local, opts.servers)
        except BaseException:
            checked.close()
            raise
        return checked

    @classmethod
    def begin(cls, opts: RunOptions, store: Store, checked: Checked) -> Phases:
        """The run's record (a new run's, or the resumed run's labels) and this attempt's."""
        work, todo = checked.work, checked.work.todo
        run_id = work.run_id
        if run_id is None:
            name = opts.name or f"{work.suite.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            src = work.source
            run_id = store.create_run(name, kind="suite", suite=work.loaded.source, suite_yaml=work.loaded.yaml_text,
                                      env={"quick": work.loaded.quick, "engine_override": work.loaded.engine,
                                           **({"ceph_override": work.loaded.ceph} if work.loaded.ceph else {}),
                                           "plan_points": len(work.points),
                                           **({"labels": lab} if (lab := {**work.suite.labels, **opts.labels})
                                              else {}),
                                           # the study sections its report carries (fathom.report.studies)
                                           **({"report": work.suite.report} if work.suite.report else {}),
                                           **({"slo": {"settings": src.settings.to_dict()}} if src else {})})
        elif opts.labels:  # --resume with --label: the stored labels, the new ones over them
            store.merge_env(run_id, labels={**(store.run(run_id).env.get("labels") or {}), **opts.labels})
        phases = cls(opts, store, work, run_id, Held(attached=checked.attached, clients=checked.connected),
                     checked.needs_cluster, checked.clients)
        if work.run_id is not None and not todo:
            store.finish_run(run_id, "done")
            _say(f"run {run_id}: all {len(work.points)} points are done; nothing to resume")
            phases.outcome = Outcome(run_id, "done", skipped=len(work.points))
            return phases
        phases.attempt = Attempt.begin(store, run_id, len(todo), _say)
        phases.attempt.save(**{reattach.KEY: reattach.record(opts)})  # what a later --resume attaches with
        store.update_run(run_id, status="running")
        return phases

    def run(self) -> None:
        # SIGTERM as Ctrl-C: the teardown runs (SIGINT's handler is the CLI's, fathom.cli.main.interruptible)
        old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        old_int = signal.getsignal(signal.SIGINT)
        try:
            # SSH hosts were connected by check(), before any Ceph call; pods are made once the cluster is
            # there, with its conf and journal
            self.start_cluster()
            self.connect_clients()
            self.connect_servers()
            self.prepare()
            self.run_points()
        except KeyboardInterrupt:
            self.interrupted()
        except BaseException as exc:
            self.outcome.status = "failed"
            msg = exc.message if isinstance(exc, FathomError) else f"{type(exc).__name__}: {exc}"
            self.store.add_event(self.run_id, "error", f"run stopped: {msg}")
            raise
        finally:
            # a second Ctrl-C or SIGTERM must not leave the cluster running or its settings changed
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                self.teardown()
            finally:
                assert self.attempt is not None
                self.attempt.close()
                signal.signal(signal.SIGINT, signal.default_int_handler if old_int is None else old_int)
                signal.signal(signal.SIGTERM, old_term)

    # ---- clients: the pods, made for the run once its cluster is there (SSH hosts: connected by check()) ----
    def connect_clients(self) -> None:
        cs, held = self.clients_spec, self.held
        if cs is None or held.clients is None:
            return
        from fathom.hosts.transport import OpenContext

        if held.attached is not None:  # this host's engines load the libraries of the client that reaches it
            held.clients.client = held.attached.conn.client
        if cs.kubernetes is not None:
            tag = self.attempt.tag.removeprefix("fathom-")  # type: ignore[union-attr]
            ctx = OpenContext(tag, held.attached.conn, self.journal() if held.ceph is not None else None, _say) \
                if held.attached is not None else OpenContext(tag, say=_say)
            held.clients.add(ctx, needs_cluster=True)
        self.store.merge_env(self.run_id, clients=held.clients.describe())

    # ---- cluster: the attached one, or a disposable one (adopted from a killed attempt, or started) ----
    def start_cluster(self) -> None:
        held, c, a = self.held, self.work.suite.cluster, self.attempt
        assert a is not None
        held.cluster, held.adopted_from = a.left_behind(c if held.attached is None and self.needs_cluster else None)
        if held.attached is None and not self.needs_cluster:
            desc: dict[str, Any] = {"kind": "none", "why": "no workload of this run needs a Ceph cluster"}
        elif held.attached is None:
            desc = {"kind": "local (disposable)", "objectstore": c.objectstore, "osds": c.osds,
                    "osd_size": c.osd_size, **({"hosts": c.box()} if c.hosts else {})}
            if held.cluster is not None:
                desc["adopted_from_attempt"] = held.adopted_from
            else:
                cdir = Path(tempfile.mkdtemp(prefix=f"fathom-cluster{self.run_id}-"))
                # recorded before anything starts, so a later --resume can stop it if this process is killed
                a.record(cluster_dir=str(cdir))
                held.cluster = LocalCluster(cdir, progress=_say)
                _say(f"starting a disposable local cluster in {cdir} ({c.osds} OSD(s), {c.objectstore})")
                t0 = time.monotonic()
                held.cluster.up(osds=c.osds, osd_size=c.osd_size, objectstore=c.objectstore, bind=self.opts.bind,
                                mds=c.mds, rgw=c.rgw, settings=c.settings or None, ceph=c.ceph, hosts=c.box(),
                                client=self.opts.client_ceph or (self.work.suite.clients.ceph
                                                                 if self.work.suite.clients else None))
                _say(f"cluster HEALTH_OK in {time.monotonic() - t0:.1f} s")
            a.record(cluster_dir=str(held.cluster.root))  # this attempt's now: it stops it at the end
            desc["ceph_source"] = held.cluster.source().to_dict()  # where its daemons (and version) came from
            held.attached = Attachment(conn=held.cluster.connection(), local=held.cluster)
            self.outcome.cluster_dir = str(held.cluster.root)
        else:
            desc = {"kind": "attached", "connection": held.attached.conn.describe(),
                    "fathom_local_cluster": bool(held.attached.local)}
            if held.attached.local:
                desc["ceph_source"] = held.attached.local.source().to_dict()
        self.store.merge_env(self.run_id, cluster=desc, **envinfo.collect(held.ceph))

    # ---- servers: the cluster's hosts sampled (SSH, Prometheus), placed by the cluster's own metadata ----
    def connect_servers(self) -> None:
        """The coverage of the cluster's hosts: with --server-host or --prometheus, and for any attached cluster
        that is not fathom's own (whose daemons fathom knows by the pids it started), so that this host's
        daemons are the attached cluster's by its metadata, picked as `fathom cluster status` picks them, never
        every process of a name (another cluster's mon.a on this host)."""
        opts, held = self.opts, self.held
        sources = opts.servers is not None or bool(opts.prometheus)
        users = held.attached is not None and held.attached.local is None
        if (sources or users) and held.ceph is not None:
            from fathom import servers

            # the samplers it uploads are written in the run's journal first: a killed run's --resume removes them
            journal = self.journal() if opts.servers is not None else None
            own = held.attached.local if held.attached else None  # its gateways and clients: the pids it started
            held.coverage = servers.connect(held.ceph, opts.servers, opts.prometheus, _say,
                                            held.attached.local_daemons() if held.attached else None,
                                            journal, run=self.attempt.data_tag if self.attempt else str(self.run_id),
                                            strict=sources, started=[d.pid for d in own.daemons() if d.pid]
                                            if own is not None else None)
            self.store.merge_env(self.run_id, **held.coverage.env)

    def local_daemons(self) -> list[Daemon]:
        """This host's daemons for its /proc sampler: a local cluster's own (by the pids fathom recorded); an
        attached cluster's as its metadata places them here (Coverage.local), the other sources covering theirs."""
        held = self.held
        found = held.attached.local_daemons() if held.attached else []
        return found if held.coverage is None else held.coverage.local(found)

    def journal(self) -> Journal:
        """The run's undo journal on this cluster (made once: the server hosts' samplers and prep share it)."""
        held, a = self.held, self.attempt
        assert a is not None and held.attached is not None
        if held.journal is None:
            ceph = held.ceph
            held.journal = a.journal(ceph.ceph("fsid")["fsid"], ceph.conn.describe(),
                                     disposable=held.cluster is not None)
        return held.journal

    # ---- prepare: pools, images, prefill, RGW, hygiene, each recorded before it is made ----
    def prepare(self) -> None:
        held, suite, a, store = self.held, self.work.suite, self.attempt, self.store
        ceph = held.ceph
        if ceph is None:
            return
        assert a is not None and held.attached is not None
        attached = held.cluster is None
        # what prep makes and hygiene changes is written to the run's journal before it is done
        fsid = ceph.ceph("fsid")["fsid"]
        journal = self.journal()
        held.prep = prep = Prep(ceph, owner_prefix=a.data_tag, progress=_say, journal=journal)
        earlier_prefill = a.state.get("prefill")
        a.save(prefill=None)  # until this attempt knows its images are filled
        points, done = self.work.points, self.work.done
        held.prepared = p = _prepare(suite, prep, attached, a.data_tag, a.state.get("pools") or {},
                                     resume.data_pools(points, done, suite), a.note)
        a.save(pools=p.pools)
        store.merge_env(self.run_id, layouts=envinfo.layouts(ceph, p.pools, suite.prep.rgw))
        if suite.baseline is not None and self.opts.baseline and "baseline_run" not in store.run(self.run_id).env:
            store.merge_env(self.run_id, baseline_run=self.opts.baseline(held, self.opts, suite.baseline.runtime_s))
        # a pool made anew holds nothing of earlier attempts: the finished writes into it must run again
        for name in {q.name for q in suite.prep.pools} - set(p.adopted):
            a.lose({w.key for w in points if w.key in done and resume.writes_run_data(w)
                    and resume.pool_of(w, suite) == name},
                   f"pool {p.pools[name]} was made anew by attempt {a.tag}"
                   + (" on a new disposable cluster" if held.cluster is not None and held.adopted_from is None
                      else ""))
        if suite.prep.prefill and suite.prep.images:
            images_id = p.adopted.get(suite.prep.images.pool)
            if not p.images_made and earlier_prefill and images_id is not None \
                    and earlier_prefill.get("pool_id") == images_id and earlier_prefill.get("fsid") == fsid:
                pf = earlier_prefill
                a.note(f"images in {p.images_pool} were filled by an earlier attempt; not filled again")
            else:
                pf = prep.prefill(p.images_pool, p.images, suite.prep.images.size)  # type: ignore[arg-type]
                pf.update(fsid=fsid, pool_id=(prep.pool_info(p.images_pool) or {}).get("pool_id"))
            a.save(prefill=pf)
        if suite.prep.rgw is not None:
            held.s3 = rgw_prep.prepare(prep, suite.prep.rgw, p.pools, held.attached.local, a.data_tag, attached,
                                       a.workdir)
            store.merge_env(self.run_id, rgw={k: v for k, v in held.s3.items() if k != "keys_file"})
        if suite.prep.hygiene.enabled:
            hy = prep.hygiene(list(p.pools.values()), rbd_cache=suite.prep.hygiene.rbd_cache,
                              rbd_io_scheduler=suite.prep.hygiene.rbd_io_scheduler)
            store.merge_env(self.run_id, hygiene=hy)
        if self.opts.mgr_prometheus:
            from fathom.servers import mgrprom

            url = mgrprom.enable(prep.restorer, *mgrprom.own_endpoint(held.attached))
            via = mgrprom.include_perf_counters(prep.restorer)
            ex = held.exporter = mgrprom.Exporter(ceph, url)
            ex.via = via
            store.merge_env(self.run_id, mgr_prometheus={"url": ex.url, "stats_period_s": ex.period,
                                                         "perf_counters": via})

    def context(self, point: plan.Point) -> engines.PointContext:
        held, a, params = self.held, self.attempt, point.params
        assert a is not None
        pools = held.prepared.pools
        pool = pools.get(params["pool"] or "", params["pool"]) if params["pool"] else next(iter(pools.values()), None)
        images = self.work.suite.prep.images
        ctx = engines.PointContext(
            conn=held.attached.conn if held.attached else None, pool=pool,
            images=held.prepared.images if interfaces.get(params["interface"]).needs_images
            and pool == held.prepared.images_pool else [],
            run_tag=a.data_tag, workdir=a.workdir, clients=held.clients, image_size=images.size if images else None,
            timeout=float(params["runtime"]) + float(params["ramp_time"]) + CHILD_GRACE_S, s3=held.s3, prep=held.prep)
        held.contexts[f"{point.engine}:{pool}"] = ctx
        return ctx

    def capacity_companion(self, cov: Any) -> Companion:
        """Each point's ceilings (fathom.servers.capacity): hosts probed once, fathom's own cluster's daemons by
        their pids (a namespace host's too), else those this host's sampler covers."""
        from fathom.servers import capacity

        local = self.held.attached.local if self.held.attached else None
        comp = capacity.companion(getattr(cov, "servers", None),
                                  (lambda: local.daemons()) if local is not None else self.local_daemons,
                                  capacity.osd_devices(local, self.held.ceph), local.state() if local else None)
        self.store.merge_env(self.run_id, capacity={"hosts": comp.hosts})
        return comp

    # ---- points: one at a time, each committed when it ends ----
    def run_points(self) -> None:
        held, work, store, run_id, a, outcome = self.held, self.work, self.store, self.run_id, self.attempt, \
            self.outcome
        assert a is not None
        source, points, todo = work.source, work.points, work.todo
        ceph = held.ceph
        daemons = self.local_daemons()
        local = held.attached.local if held.attached else None
        cov = held.coverage
        held.telemetry = tel = point_mod.TelemetryCompanion(
            telemetry.Sampler(daemons, host_kind=cov.here_host if cov else "host", **telemetry.boxed(local)), daemons,
            local.run_dir if local else None,
            refresh=held.attached.local_daemons if held.attached and local and cov is None else None,
            sockets=held.attached.local_daemons() if held.attached and local else None)
        next_gate: health.GateVerdict | None = None
        gate_timeout = self.opts.gate_timeout
        held.progress = prog = Progress(None if source else len(points), [] if source else todo, tty=self.opts.tty)
        companions: list[Companion] = [tel, point_mod.ProgressCompanion(prog)]
        live.attach(prog, store, run_id, work, self.opts.live)  # the running point's seconds; --metrics' page
        if cov is not None:
            companions[1:1] = cov.companions(prog.say)
        if held.exporter is not None:  # after telemetry: a daemon's admin socket counters win (histograms too)
            from fathom.servers.mgrprom import MgrPrometheusCompanion

            companions.insert(1, MgrPrometheusCompanion(held.exporter))
        if ceph is not None:  # through the mons: a user's cluster's counters (no host access), the OSDs' latency
            tell, osd_lat = point_mod.tell_readers(ceph, local, counters=held.attached is not None
                                                   and held.attached.local is None)
            if tell is not None:
                companions.insert(1 + (held.exporter is not None), tell)
            companions.append(osd_lat)
        companions.append(self.capacity_companion(cov))
        if outcome.skipped:
            prog.say(f"resuming run {run_id}: {outcome.skipped} point(s) done, {len(todo)} to run")
        rewrite_before = {rw.before.key: rw for rw in resume.rewrites(points, work.done, a.data_lost, work.suite)}
        full_state: dict[str, str] | None = None  # set once a point failed on a full cluster under --on-full skip
        for n, point in enumerate(source.points() if source else todo, start=len(points) - len(todo) + 1):
            if full_state is not None and point.params.get("rw") not in resume.READ_MODES:
                full.skip(store, run_id, point, full_state, prog.say)
                outcome.failed += 1
                continue
            rw = rewrite_before.get(point.key)
            if rw is not None and rw.write.key in a.data_lost:
                if resume.rewrite(rw, a.data_lost[rw.write.key], self.context(rw.write), store, run_id, prog.say):
                    a.found(rw.write.key)
            ctx = self.context(point)
            prog.point_start(point, n)
            schedule = [faults.Fault.model_validate(f) for f in point.params.get("faults") or []]
            acts = fault_run.Executor(ceph, local, self.journal(), self.opts.servers) if schedule and ceph else None
            extra: list[Companion] = [fault_run.FaultCompanion(schedule, acts, prog.say)] if acts else []
            try:
                crit = steady.Criteria.of(point.params)  # a steady_state watch only for workloads with one
                watch: list[Companion] = [steady_run.SteadyStateCompanion(crit)] if crit else []
                res = point_mod.run_point(store, run_id, point, ctx, companions + extra + watch, ceph, gate_timeout,
                                          next_gate)
            except KeyboardInterrupt:
                prog.point_end(point, "interrupted", None)
                raise
            if source is not None:
                source.record(point, res)
            next_gate = res.next_gate
            # after faults the cluster heals first: its gate may take a recovery's time
            gate_timeout = max(self.opts.gate_timeout, faults.RECOVERY_GATE_S) if res.faulted else \
                self.opts.gate_timeout
            if res.faulted and held.attached is not None:  # a restarted daemon has a new pid
                tel.daemons = self.local_daemons()
                tel.sampler.daemons = [d for d in tel.daemons if d.pid]
            prog.point_end(point, res.status, res.metrics, res.error)
            if res.status == "done":
                outcome.done += 1
                a.found(point.key)  # a write that ran measured has written its data again
                continue
            outcome.failed += 1
            if local is not None and not all(d.running for d in local.daemons()):
                dead = [d.name for d in local.daemons() if not d.running]
                raise FathomError(f"{', '.join(dead)} stopped during point {point.key}; run {run_id} stopped",
                                  hint=f"resume later with `{self.resume_command()}`")
            if res.full:
                full.on_full(store, run_id, point, res.full, self.opts.on_full, self.resume_command())
                full_state = res.full
        outcome.status = "done" if outcome.failed == 0 else "failed"
        if source is not None:
            answer = source.result()
            store.merge_env(run_id, slo=answer)
            store.add_event(run_id, "slo", answer["result"]["message"], data={"status": answer["result"]["status"]})
            _say(f"SLO search: {answer['result']['message']}")

    def resume_command(self) -> str:
        return reattach.command(self.run_id, self.opts.db, reattach.record(self.opts))

    def interrupted(self) -> None:
        """Ctrl-C or SIGTERM: finished points kept; a search says what its probes so far show."""
        self.outcome.status = "interrupted"
        self.store.add_event(self.run_id, "interrupt", "run interrupted; finished points kept")
        source = self.work.source
        if source is not None and source.search is not None and source.search.probes:
            answer = source.result()  # what the probes so far show, said to be partial
            answer["result"]["message"] = f"interrupted after {len(answer['result']['probes'])} probes; so far: " \
                + answer["result"]["message"]
            answer["interrupted"] = True
            self.store.merge_env(self.run_id, slo=answer)
        readers = resume.readers_without_data(self.work.points, self.store.done_keys(self.run_id), self.work.suite)
        if readers and self.held.prep is not None:
            cluster = self.held.cluster
            gone = "disposable cluster" if cluster is not None else " and ".join(sorted(
                {"S3 buckets" if r.params["interface"] == "s3" else "pools" for r in readers}, reverse=True))
            gone = "objects" if cluster is not None and self.opts.keep_cluster else gone
            _say(f"{len(readers)} remaining read point(s) read data that finished write points left; it goes now "
                 f"with the run's {gone}, so `--resume` writes it again (unmeasured, recorded as an event) first")

    # ---- teardown: client hosts, telemetry's cost, the run's status, then what the attempt made ----
    def teardown(self) -> None:
        held, store, run_id, a, work = self.held, self.store, self.run_id, self.attempt, self.work
        assert a is not None
        for part in (held.clients, held.coverage, held.progress):
            if part is not None:
                part.close()
        if held.telemetry is not None:
            tel = held.telemetry
            self.outcome.telemetry_cost_pct = point_mod.record_cost(store, run_id, tel.sampler, tel.asok_cpu_s)
        store.finish_run(run_id, self.outcome.status)
        _teardown(store, run_id, a, held, self.opts.keep_cluster, on_cleaned=lambda engine, pool: a.lose(
            _writes_into(work.points, store.done_keys(run_id), work.suite, held.prepared.pools, engine, pool),
            f"the run's objects in {f'pool {pool}' if pool else 'S3'} were removed when attempt {a.tag} ended"))


def _prepare(suite: spec.Suite, prep: Prep, attached: bool, data_tag: str, earlier_pools: dict[str, str],
             holds_data: set[str], note: Any) -> _Prepared:
    """Make the suite's pools and images, adopting those an earlier attempt of this run made (the run's journal).

    holds_data: suite pool names finished points used. A pool of the run that is not of
    the suite's shape (half-made by a killed attempt) is made anew only if it holds none.
    """
    out = _Prepared()
    for p in suite.prep.pools:
        # on someone else's cluster every pool carries the run's data tag; a disposable cluster is all ours
        actual = f"{data_tag}-{p.name}" if attached else p.name
        if earlier_pools.get(p.name) in prep.made("pool"):
            actual = earlier_pools[p.name]
        ec = None
        if p.ec_k and p.ec_m:
            ec = prep.ec_profile(f"{actual}-ec", p.ec_k, p.ec_m)
        shape = {"pg_num": p.pg_num, "size": p.size, "min_size": p.min_size, "application": p.application}
        info = prep.pool_info(actual) if actual in prep.made("pool") else None
        if info is not None:
            diff = prep.shape_diff(actual, ec_profile=ec, **shape)  # type: ignore[arg-type]
            if not diff:
                out.pools[p.name] = actual
                out.adopted[p.name] = int(info["pool_id"])
                note(f"adopted pool {actual} (id {info['pool_id']}) that an earlier attempt of this run made, "
                     "with what it holds", pool=actual, pool_id=int(info["pool_id"]))
                continue
            if p.name in holds_data:
                raise FathomError(f"pool {actual} holds data of finished points of this run but is no longer as "
                                  f"the suite makes it: {'; '.join(diff)}",
                                  hint="restore those settings and resume again, or start a new run of the suite")
            note(f"pool {actual} that an earlier attempt of this run made is not as the suite makes it "
                 f"({'; '.join(diff)}) and holds no finished point's data: removed and made anew",
                 pool=actual, pool_id=int(info["pool_id"]), differences=diff)
            prep.remove_pool(actual)
        # RGW writes whole RADOS objects: its EC pools need no overwrites (erasure-code.rst)
        out.pools[p.name] = prep.pool(actual, ec_profile=ec, allow_ec_overwrites=bool(ec) and p.application != "rgw",
                                      **shape)  # type: ignore[arg-type]
    # pools an earlier attempt made that this one does not use (named otherwise, by an older fathom)
    for name in [n for n in prep.made("pool") if n not in out.pools.values()]:
        if prep.pool_info(name) is not None:
            note(f"removed pool {name} that an earlier attempt of this run left", pool=name)
        prep.remove_pool(name)
    im = suite.prep.images
    if im:
        out.images_pool = out.pools[im.pool]
        names = im.names()
        kept = prep.adopt_images(out.images_pool, names, im.size) if im.pool in out.adopted else []
        if kept:
            note(f"adopted {len(kept)} RBD image(s) in {out.images_pool} that an earlier attempt of this run made")
        made = [n for n in names if n not in kept]
        if made:
            prep.images(out.images_pool, made, im.size)
        out.images, out.images_made = names, bool(made)
    return out


def _writes_into(points: list[plan.Point], done: set[str], suite: spec.Suite, pools: dict[str, str], engine: str,
                 pool: str | None) -> set[str]:
    """Finished write points whose data an engine's cleanup of `pool` (actual name) removed; pool None: the
    run's S3 buckets' (engine: the interface, s3)."""
    return {w.key for w in points if w.key in done and resume.writes_run_data(w) and (
        w.params["interface"] == engine if pool is None else
        w.engine == engine and pools.get(resume.pool_of(w, suite) or "", resume.pool_of(w, suite)) == pool)}


def _teardown(store: Store, run_id: int, a: Attempt, held: Held, keep: bool,
              on_cleaned: Callable[[str, str | None], None]) -> None:
    """What the attempt made goes: the engines' objects and what prep made on an attached (or kept) cluster,
    the settings hygiene changed put back; a disposable cluster is stopped unless kept."""
    errors = []
    prep, cluster = held.prep, held.cluster
    if (cluster is None or keep) and prep is not None:
        for key, ctx in held.contexts.items():
            engine = key.split(":", 1)[0]
            try:
                ctx.on_child = lambda pid: None
                ctx.timeout = 300.0
                if engines.get(engine).cleanup(ctx):
                    on_cleaned(engine, ctx.pool)  # a resumed attempt must write again what reads need
            except FathomError as exc:
                errors.append(exc.message)
    if prep is not None and prep.journal.pending(FAULT_KIND):  # a host a fault left impaired (Ctrl-C in a point)
        impair.undo_all(prep.journal, _say)  # a killed host's daemons: started by the cluster its entry names
    if prep is not None and (cluster is None or keep):  # a disposable cluster that is stopped needs no restore
        put_back(prep.restorer, store.path, lambda kind, msg, data=None: store.add_event(run_id, kind, msg, data=data),
                 _say)
        if held.exporter is not None:
            from fathom.servers import mgrprom

            mgrprom.check_put_back(prep.ceph, held.exporter, lambda kind, msg: store.add_event(run_id, kind, msg), _say)
    if prep is not None and cluster is None:
        # the objects the run's PUTs wrote and the buckets they made (a resumed attempt writes again what reads need)
        if buckets.at_end(prep.journal, prep.ceph, _say, errors, lambda msg: store.add_event(run_id, "cleanup", msg),
                          store.path, run_id):
            on_cleaned("s3", None)
        try:
            # RGW's users and placements before the pools they use (and radosgw-admin only if fathom made some)
            rgw_prep.cleanup(prep)
            prep.cleanup()
        except FathomError as exc:
            errors.append(f"cleanup of what this run created failed: {exc.message}")
    if cluster is not None:
        if keep:
            _say(f"kept the local cluster in {cluster.root}: `fathom cluster down --dir {cluster.root}` stops it")
        else:
            try:
                stopped = cluster.down()
                _say(f"stopped the disposable cluster ({', '.join(stopped)})")
                if prep is not None:
                    prep.journal.set_moot("the disposable cluster was stopped")
            except FathomError as exc:
                errors.append(exc.message)
    for e in errors:
        store.add_event(run_id, "warning", e)
        _say(f"warning: {e}")


def _summary(o: Outcome, opts: RunOptions) -> None:
    cost = f"; telemetry cost {o.telemetry_cost_pct:.2f}% of one core" if o.telemetry_cost_pct is not None else ""
    line = (f"run {o.run_id} {o.status}: {o.done} point(s) done, {o.failed} failed"
            f"{f', {o.skipped} already done' if o.skipped else ''} in {o.wall_s:.0f} s{cost}; results in {opts.db}")
    print(line)
    if o.status == "interrupted":
        print(f"resume with: {reattach.command(o.run_id, opts.db, reattach.record(opts))}", file=sys.stderr)
