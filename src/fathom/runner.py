"""Running a suite: cluster, prep, then one point at a time (point.py), each committed when it ends.

Data flows one way: spec -> plan -> cluster -> prep -> points (engine + companions)
-> store. The runner owns the lifecycle: a disposable local cluster (when no
attached cluster is given, and some workload needs one) is stopped whatever
happens — failure, Ctrl-C, SIGTERM — unless --keep-cluster; on an attached
cluster only what this run created is removed, and every setting its hygiene
changed is put back as it was found (fathom.cluster.restore; `fathom cluster
restore` after a SIGKILL). Ctrl-C marks the current point interrupted and keeps
every finished point; `--resume RUN` runs only the points not done.

Data a run's points leave for later points (rados bench's objects, read by the seq
and rand points) is named per run (the run's data tag), not per attempt, so a
resumed attempt reads what an earlier one wrote: it adopts the earlier attempt's
pools (attached) or its still-healthy disposable cluster (after SIGKILL). Where that
data is gone (the cluster was stopped on Ctrl-C, a pool was made anew), the write
point that left it runs again, unmeasured, before its first remaining reader, and
the run records that as an event (see resume.py).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom import engines, envinfo, faults, interfaces, plan, resume, spec, steady
from fathom import point as point_mod
from fathom.cluster import full, health
from fathom.companion import Companion
from fathom.cluster import rgw as rgw_prep
from fathom.cluster.ceph import Connection
from fathom.cluster.local import LocalCluster
from fathom.cluster.prep import Ledger, Prep
from fathom.cluster.restore import Restorer, unrestored_message
from fathom.cluster.target import Target, target_from_args
from fathom.errors import FathomError, UsageError
from fathom.progress import Progress
from fathom.store import Store
from fathom import telemetry

CHILD_GRACE_S = 120.0  # beyond runtime + ramp before an engine is considered hung
ADOPT_GATE_S = 60.0  # a left-behind disposable cluster not clean within this is not measured on


@dataclass
class RunOptions:
    suite_ref: str | None
    quick: bool = False
    engine: str | None = None  # every workload on this engine
    db: Path = Path("fathom-results.db")
    name: str | None = None
    resume: str | None = None
    keep_cluster: bool = False
    gate_timeout: float = 300.0
    on_full: str = "stop"  # a point failed on a full cluster: stop the run, or skip (record) every point left
    bind: str | None = None  # the disposable cluster's address (client hosts other than this one reach it there)
    tty: bool | None = None  # progress style; None = decide from stderr
    slo: dict[str, Any] | None = None  # an SLO search instead of the plan: the command line's settings over the
    # suite's `slo:` (fathom.probes.settings)


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


def run(opts: RunOptions, args: argparse.Namespace | None = None) -> Outcome:
    """Run (or resume) a suite as the CLI does; returns what happened. Raises FathomError before the first point."""
    t_run = time.monotonic()
    store = Store(opts.db)
    progress_msgs: list[str] = []

    def say(msg: str) -> None:
        progress_msgs.append(msg)
        print(f"  {msg}", file=__import__("sys").stderr, flush=True)

    # ---- what to run ----
    if opts.resume:
        prev = store.run(opts.resume)
        if prev.kind != "suite" or not prev.suite_yaml:
            raise UsageError(f"run {prev.id} ({prev.name}) is not a suite run; only suite runs can be resumed")
        if prev.env.get("slo"):
            raise UsageError(f"run {prev.id} ({prev.name}) is an SLO search: a search is not resumed",
                             hint="run `fathom slo` again (its probes depend on each other's results)")
        if opts.suite_ref and opts.suite_ref not in (prev.suite, Path(prev.suite or "").name):
            raise UsageError(f"run {prev.id} ran suite {prev.suite!r}, not {opts.suite_ref!r}",
                             hint="leave the suite out when resuming; the run's own copy of the suite is used")
        quick = bool(prev.env.get("quick"))
        eng = prev.env.get("engine_override")
        loaded = spec.LoadedSuite(spec.parse(prev.suite_yaml, prev.suite or "<stored suite>", quick, eng),
                                  prev.suite or "", prev.suite_yaml, quick, eng)
        run_id = prev.id
    else:
        loaded = spec.load(opts.suite_ref or "", quick=opts.quick, engine=opts.engine)
        run_id = None
    suite = loaded.suite
    points = plan.expand(suite)
    source = None
    if opts.slo is not None:  # the search builds its probes as it goes, from this one configuration
        from fathom import probes

        settings = probes.settings(suite.slo, opts.slo)
        base = probes.base_point(points, settings.workload)
        settings.workload = base.workload
        setup = probes.setup_points(points, base)
        points = [*setup, base]
        source = probes.Probes(settings, base, say, setup)
    done = store.done_keys(run_id) if run_id is not None else set()
    todo = [p for p in points if p.key not in done]
    for name in sorted({p.engine for p in todo}):
        engines.get(name).check()  # fail before starting a cluster: e.g. the engine binary is missing
    needs_cluster = any(interfaces.cluster_needed(p.params) for p in todo)
    clients_spec = _clients_spec(suite, args, todo)
    target = target_from_args(args) if args is not None else None
    if target is None and suite.cluster.kind == "attached":
        conn = Connection.from_args(suite.cluster.conf, suite.cluster.id, None, suite.cluster.keyring)
        target = Target(conn=conn)
        target.ceph().probe()
    schedules = {p.workload: [faults.Fault.model_validate(f) for f in p.params.get("faults") or []] for p in todo}
    schedules = {wl: fs for wl, fs in schedules.items() if fs}
    if target is not None and schedules:  # before anything is made: a fault this cluster cannot take
        faults.check_cluster(schedules, target.ceph(), target.local)

    if run_id is None:
        name = opts.name or f"{suite.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = store.create_run(name, kind="suite", suite=loaded.source, suite_yaml=loaded.yaml_text,
                                  env={"quick": loaded.quick, "engine_override": loaded.engine,
                                       "plan_points": len(points),
                                       **({"slo": {"settings": source.settings.to_dict()}} if source else {})})
    elif not todo:
        store.finish_run(run_id, "done")
        say(f"run {run_id}: all {len(points)} points are done; nothing to resume")
        return Outcome(run_id, "done", skipped=len(points))
    env = store.run(run_id).env
    # The run's data tag names what its points leave in the cluster (objects, pools on an attached
    # cluster): the same for every attempt, so a resumed read finds what an earlier attempt wrote.
    # The random part keeps two runs with the same id (two result databases) apart on one cluster.
    data_tag = env.get("data_tag") or f"fathom-{run_id}-{secrets.token_hex(3)}"
    # the attempt's own tag only names the attempt in the run's record
    attempt_tag = f"{data_tag}-a{len(env.get('attempts', [])) + 1}"
    attempts = env.get("attempts", []) + [{"tag": attempt_tag, "started": time.time(), "todo": len(todo)}]
    store.merge_env(run_id, attempts=attempts, data_tag=data_tag)
    store.update_run(run_id, status="running")

    def note(msg: str, kind: str = "resume", **data: Any) -> None:
        """Tell the user and keep it in the run's events."""
        say(msg)
        store.add_event(run_id, kind, msg, data=data or None)

    # finished write points whose data is gone -> why; kept in the run's env until written again
    data_lost: dict[str, str] = dict(env.get("data_lost") or {})

    def lose(keys: set[str], why: str) -> None:
        data_lost.update({k: why for k in keys})
        store.merge_env(run_id, data_lost=data_lost)

    def found(key: str) -> None:
        if data_lost.pop(key, None) is not None:
            store.merge_env(run_id, data_lost=data_lost)

    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    # a shell starts background jobs with SIGINT ignored; fathom run always stops cleanly on it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cluster: LocalCluster | None = None
    clients: Any = None
    # Scratch files (engine specs, job files, client conf) stay per attempt: a killed attempt's
    # directory is removed by the next attempt, which must never remove its own files with it.
    workdir = Path(tempfile.mkdtemp(prefix=f"fathom-run{run_id}-"))
    attempts[-1]["workdir"] = str(workdir)  # so a later --resume can remove it if this process is killed
    store.merge_env(run_id, attempts=attempts)
    prep: Prep | None = None
    outcome = Outcome(run_id, "failed", skipped=len(points) - len(todo))
    contexts: dict[str, engines.PointContext] = {}
    prog: Progress | None = None
    tel: point_mod.TelemetryCompanion | None = None
    prepared = _Prepared()
    s3_ctx: dict[str, Any] | None = None  # prep.rgw: what the s3 interface needs per point (no key material)
    try:
        # ---- client hosts: connected and their engines checked before any cluster starts ----
        if clients_spec is not None:
            from fathom.engines.clients import Clients

            if clients_spec.remote and target is None and needs_cluster and not opts.bind:
                raise UsageError("client hosts other than this one cannot reach a disposable cluster bound to "
                                 "127.0.0.1", hint="pass --bind ADDR (an address of this host they reach), or "
                                                   "attach to a cluster with --conf")
            say(f"connecting to {len(clients_spec.remote)} client host(s)" if clients_spec.remote else
                f"{sum(h.instances for h in clients_spec.hosts)} engines on this host")
            clients = Clients.open(clients_spec)
            store.merge_env(run_id, clients=clients.describe())
        # ---- cluster ----
        c = suite.cluster
        cluster, adopted_from = _abandoned_clusters(attempts[:-1], c if target is None and needs_cluster else None,
                                                    say, note)
        if target is None and not needs_cluster:
            target_desc: dict[str, Any] = {"kind": "none", "why": "no workload of this run needs a Ceph cluster"}
        elif target is None:
            target_desc = {"kind": "local (disposable)", "objectstore": c.objectstore,
                           "osds": c.osds, "osd_size": c.osd_size}
            if cluster is not None:
                target_desc["adopted_from_attempt"] = adopted_from
            else:
                cdir = Path(tempfile.mkdtemp(prefix=f"fathom-cluster{run_id}-"))
                # recorded before anything starts, so a later --resume can stop it if this process is killed
                attempts[-1]["cluster_dir"] = str(cdir)
                store.merge_env(run_id, attempts=attempts)
                cluster = LocalCluster(cdir, progress=say)
                say(f"starting a disposable local cluster in {cdir} ({c.osds} OSD(s), {c.objectstore})")
                t0 = time.monotonic()
                cluster.up(osds=c.osds, osd_size=c.osd_size, objectstore=c.objectstore, bind=opts.bind, mds=c.mds,
                           rgw=c.rgw, settings=c.settings or None)
                say(f"cluster HEALTH_OK in {time.monotonic() - t0:.1f} s")
            attempts[-1]["cluster_dir"] = str(cluster.root)  # this attempt's now: it stops it at the end
            store.merge_env(run_id, attempts=attempts)
            target = Target(conn=cluster.connection(), local=cluster)
            outcome.cluster_dir = str(cluster.root)
        else:
            target_desc = {"kind": "attached", "connection": target.conn.describe(),
                           "fathom_local_cluster": bool(target.local)}
        ceph = target.ceph() if target else None
        store.merge_env(run_id, target=target_desc, **envinfo.collect(ceph))

        # ---- prep ----
        if ceph is not None:
            attached = cluster is None
            # settings hygiene changes are recorded in the run's env before they are changed
            restorer = Restorer(ceph, persist=lambda rec: store.merge_env(run_id, restore=rec),
                                disposable=not attached, previous=env.get("restore"),
                                repair_args=("--db", str(opts.db), "--run", str(run_id)))
            fsid = ceph.ceph("fsid")["fsid"]
            prep = Prep(ceph, owner_prefix=data_tag, progress=say, restorer=restorer,
                        ledger=_earlier_ledger(env, fsid, run_id),
                        on_ledger=lambda led: store.merge_env(run_id, prep_created=led.to_dict()))
            prep.created.fsid = fsid
            earlier_prefill = env.get("prefill")
            store.merge_env(run_id, prefill=None)  # until this attempt knows its images are filled
            prepared = _prepare(suite, prep, attached, data_tag, env.get("pools") or {},
                                resume.data_pools(points, done, suite), note)
            store.merge_env(run_id, prep_created=prep.created.to_dict(), pools=prepared.pools)
            # a pool made anew holds nothing of earlier attempts: the finished writes into it must run again
            for name in {p.name for p in suite.prep.pools} - set(prepared.adopted):
                lose({w.key for w in points if w.key in done and resume.writes_run_data(w)
                      and resume.pool_of(w, suite) == name},
                     f"pool {prepared.pools[name]} was made anew by attempt {attempt_tag}"
                     + (" on a new disposable cluster" if cluster is not None and adopted_from is None else ""))
            if suite.prep.prefill and suite.prep.images:
                images_id = prepared.adopted.get(suite.prep.images.pool)
                if not prepared.images_made and earlier_prefill and images_id is not None \
                        and earlier_prefill.get("pool_id") == images_id and earlier_prefill.get("fsid") == fsid:
                    pf = earlier_prefill
                    note(f"images in {prepared.images_pool} were filled by an earlier attempt; not filled again")
                else:
                    pf = prep.prefill(prepared.images_pool, prepared.images,  # type: ignore[arg-type]
                                      suite.prep.images.size)
                    pf.update(fsid=fsid, pool_id=(prep.pool_info(prepared.images_pool) or {}).get("pool_id"))
                store.merge_env(run_id, prefill=pf)
            if suite.prep.rgw is not None:
                s3_ctx = rgw_prep.prepare(prep, suite.prep.rgw, prepared.pools, target.local if target else None,
                                          data_tag, attached, workdir)
                store.merge_env(run_id, prep_created=prep.created.to_dict(),
                                rgw={k: v for k, v in s3_ctx.items() if k != "keys_file"})
            if suite.prep.hygiene.enabled:
                hy = prep.hygiene(list(prepared.pools.values()), rbd_cache=suite.prep.hygiene.rbd_cache,
                                  rbd_io_scheduler=suite.prep.hygiene.rbd_io_scheduler)
                store.merge_env(run_id, hygiene=hy)

        # ---- points ----
        daemons = target.local_daemons() if target else []
        sampler = telemetry.Sampler(daemons)
        tel = point_mod.TelemetryCompanion(sampler, daemons, target.local.run_dir if target and target.local else None,
                                           refresh=target.local_daemons if target and target.local else None)
        next_gate: health.GateVerdict | None = None
        gate_timeout = opts.gate_timeout
        prog = Progress(None if source else len(points), [] if source else todo, tty=opts.tty)
        companions: list[Companion] = [tel, point_mod.ProgressCompanion(prog)]
        if outcome.skipped:
            prog.say(f"resuming run {run_id}: {outcome.skipped} point(s) done, {len(todo)} to run")

        def context(point: plan.Point) -> engines.PointContext:
            params = point.params
            pool = prepared.pools.get(params["pool"] or "", params["pool"]) if params["pool"] else \
                next(iter(prepared.pools.values()), None)
            ctx = engines.PointContext(
                conn=target.conn if target else None, pool=pool,
                images=prepared.images if interfaces.get(params["interface"]).needs_images
                and pool == prepared.images_pool else [],
                run_tag=data_tag, workdir=workdir, clients=clients,
                image_size=suite.prep.images.size if suite.prep.images else None,
                timeout=float(params["runtime"]) + float(params["ramp_time"]) + CHILD_GRACE_S, s3=s3_ctx)
            contexts[f"{point.engine}:{pool}"] = ctx
            return ctx

        rewrite_before = {rw.before.key: rw for rw in resume.rewrites(points, done, data_lost, suite)}
        full_state: dict[str, str] | None = None  # set once a point failed on a full cluster under --on-full skip
        for n, point in enumerate(source.points() if source else todo, start=len(points) - len(todo) + 1):
            if full_state is not None and point.params.get("rw") not in resume.READ_MODES:
                _skip(store, run_id, point, full_state, prog.say)
                outcome.failed += 1
                continue
            rw = rewrite_before.get(point.key)
            if rw is not None and rw.write.key in data_lost:
                if _rewrite(rw, data_lost[rw.write.key], context(rw.write), store, run_id, prog.say):
                    found(rw.write.key)
            ctx = context(point)
            if s3_ctx is not None and prep is not None and point.params.get("interface") == "s3" \
                    and point.params.get("rw") == "write":
                # a PUT starts on empty buckets: what earlier points wrote goes first, bypassing GC
                gone = rgw_prep.purge_user_buckets(prep, s3_ctx["user"])
                if gone:
                    prog.say(f"purged {len(gone)} bucket(s) of user {s3_ctx['user']} before {point.key}")
            prog.point_start(point, n)
            schedule = [faults.Fault.model_validate(f) for f in point.params.get("faults") or []]
            extra: list[Companion] = [faults.FaultCompanion(schedule, faults.Executor(
                ceph, target.local if target else None), prog.say)] if schedule and ceph is not None else []
            try:
                crit = steady.Criteria.of(point.params)  # a steady_state watch only for workloads with one
                watch: list[Companion] = [steady.SteadyStateCompanion(crit)] if crit else []
                res = point_mod.run_point(store, run_id, point, ctx, companions + extra + watch, ceph, gate_timeout,
                                          next_gate)
            except KeyboardInterrupt:
                prog.point_end(point, "interrupted", None)
                raise
            if source is not None:
                source.record(point, res)
            next_gate = res.next_gate
            # after faults the cluster heals first: its gate may take a recovery's time
            gate_timeout = max(opts.gate_timeout, faults.RECOVERY_GATE_S) if res.faulted else opts.gate_timeout
            if res.faulted and target is not None:  # a restarted daemon has a new pid
                tel.sampler.daemons = [d for d in target.local_daemons() if d.pid]
                tel.daemons = target.local_daemons()
            prog.point_end(point, res.status, res.metrics, res.error)
            if res.status == "done":
                outcome.done += 1
                found(point.key)  # a write that ran measured has written its data again
            else:
                outcome.failed += 1
                if target and target.local is not None and not all(d.running for d in target.local.daemons()):
                    dead = [d.name for d in target.local.daemons() if not d.running]
                    raise FathomError(f"{', '.join(dead)} stopped during point {point.key}; run {run_id} stopped",
                                      hint=f"resume later with `fathom run --resume {run_id} --db {opts.db}`")
                if res.full:
                    _on_full(store, run_id, point, res.full, opts)
                    full_state = res.full
        outcome.status = "done" if outcome.failed == 0 else "failed"
        if source is not None:
            answer = source.result()
            store.merge_env(run_id, slo=answer)
            store.add_event(run_id, "slo", answer["result"]["message"], data={"status": answer["result"]["status"]})
            say(f"SLO search: {answer['result']['message']}")
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        store.add_event(run_id, "interrupt", "run interrupted; finished points kept")
        if source is not None and source.search is not None and source.search.probes:
            answer = source.result()  # what the probes so far show, said to be partial
            answer["result"]["message"] = f"interrupted after {len(answer['result']['probes'])} probes; so far: " \
                + answer["result"]["message"]
            answer["interrupted"] = True
            store.merge_env(run_id, slo=answer)
        readers = resume.readers_without_data(points, store.done_keys(run_id), suite)
        if readers and prep is not None:
            gone = "disposable cluster" if cluster is not None else "pools"
            gone = "objects" if cluster is not None and opts.keep_cluster else gone
            say(f"{len(readers)} remaining read point(s) read data that finished write points left; it goes now "
                f"with the run's {gone}, so `--resume` writes it again (unmeasured, recorded as an event) first")
    except BaseException as exc:
        outcome.status = "failed"
        msg = exc.message if isinstance(exc, FathomError) else f"{type(exc).__name__}: {exc}"
        store.add_event(run_id, "error", f"run stopped: {msg}")
        raise
    finally:
        # a second Ctrl-C or SIGTERM must not leave the cluster running or its settings changed
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if clients is not None:
                clients.close()
            if prog is not None:
                prog.close()
            if tel is not None:
                outcome.telemetry_cost_pct = _record_cost(store, run_id, tel.sampler, tel.asok_cpu_s)
            store.finish_run(run_id, outcome.status)
            _teardown(store, run_id, contexts, prep, cluster, opts.keep_cluster, outcome, say,
                      on_cleaned=lambda engine, pool: lose(
                          _writes_into(points, store.done_keys(run_id), suite, prepared.pools, engine, pool),
                          f"the run's objects in pool {pool} were removed when attempt {attempt_tag} ended"))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, old_term)
            outcome.wall_s = time.monotonic() - t_run
            store.close()
    _summary(outcome, opts)
    return outcome


def _clients_spec(suite: spec.Suite, args: argparse.Namespace | None, todo: list[plan.Point]) -> Any:
    """The run's client hosts: the command line's (--client, --clients-file) over the suite's; None for one
    engine on this host."""
    from fathom.cli.clientargs import clients_spec

    cs = clients_spec(args if args is not None else argparse.Namespace(), suite.clients)
    if cs is None or cs.only_local:
        return None
    other = sorted({p.engine for p in todo if p.engine != "fathom-engine"})
    if other:
        raise UsageError(f"client hosts run fathom-engine points only; this run has {', '.join(other)} points",
                         hint="run those workloads on fathom-engine (--engine fathom-engine), or without clients")
    return cs


def _on_full(store: Store, run_id: int, point: plan.Point, state: dict[str, str], opts: RunOptions) -> None:
    """A point failed on a full cluster, and every write after it would too. Policy `stop` ends the run (the
    rest stays to do: `--resume` runs it once there is room); `skip` records the writes left as skipped, each
    with why, and still runs the reads (a full cluster serves them)."""
    why = f"the cluster is full ({full.describe(state)})"
    if opts.on_full != "skip":
        raise FathomError(f"point {point.key} ended because {why}; run {run_id} stopped, finished points kept",
                          hint=f"free space (or raise the pool's quota), then "
                               f"`fathom run --resume {run_id} --db {opts.db}`")
    store.add_event(run_id, "skipped", f"point {point.key} failed because {why}: the writes after it are "
                    "skipped, the reads run (--on-full skip)", data={"full": state, "point": point.key})


def _skip(store: Store, run_id: int, point: plan.Point, state: dict[str, str], say: Any) -> None:
    why = f"the cluster is full ({full.describe(state)})"
    store.record_point(run_id, point.idx, point.key, point.workload, point.engine, point.params, "skipped",
                       error=f"skipped: {why}; it writes (--on-full skip)",
                       events=[{"kind": "skipped", "message": f"skipped: {why}"}])
    say(f"{point.key} skipped: it writes and {why}")


def _record_cost(store: Store, run_id: int, sampler: telemetry.Sampler, asok_cpu_s: float) -> float | None:
    """What telemetry cost: the sampler thread's CPU plus admin-socket reads, % of one core while sampling."""
    wall = sampler.wall_s
    cost = 100.0 * (sampler.cpu_s + asok_cpu_s) / wall if wall > 0 else None
    info = {"sampler_cpu_s": round(sampler.cpu_s, 4), "asok_cpu_s": round(asok_cpu_s, 4), "sampled_s": round(wall, 2),
            "cost_pct_of_one_core": round(cost, 3) if cost is not None else None, "interval_s": sampler.interval,
            "daemons": [d.name for d in sampler.daemons]}
    store.merge_env(run_id, telemetry_cost=info)
    store.add_event(run_id, "telemetry", f"telemetry cost {cost:.2f}% of one core over {wall:.0f} s sampled"
                    if cost is not None else "no telemetry sampled", data=info)
    return cost


def _prepare(suite: spec.Suite, prep: Prep, attached: bool, data_tag: str, earlier_pools: dict[str, str],
             holds_data: set[str], note: Any) -> _Prepared:
    """Make the suite's pools and images, adopting those an earlier attempt of this run made (prep's ledger).

    holds_data: suite pool names finished points used. A pool of the run that is not of
    the suite's shape (half-made by a killed attempt) is made anew only if it holds none.
    """
    out = _Prepared()
    for p in suite.prep.pools:
        # on someone else's cluster every pool carries the run's data tag; a disposable cluster is all ours
        actual = f"{data_tag}-{p.name}" if attached else p.name
        if earlier_pools.get(p.name) in prep.created.pools:
            actual = earlier_pools[p.name]
        ec = None
        if p.ec_k and p.ec_m:
            ec = prep.ec_profile(f"{actual}-ec", p.ec_k, p.ec_m)
        shape = {"pg_num": p.pg_num, "size": p.size, "min_size": p.min_size, "application": p.application}
        info = prep.pool_info(actual) if actual in prep.created.pools else None
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
    for name in [n for n in prep.created.pools if n not in out.pools.values()]:
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


def _earlier_ledger(env: dict[str, Any], fsid: str, run_id: int) -> Ledger:
    """What earlier attempts of this run made on this cluster: theirs to adopt, and this attempt's to remove."""
    led = Ledger.from_dict(env.get("prep_created") or {})
    if led.fsid == fsid:
        return led
    if led.fsid is None:  # recorded before ledgers named their cluster: only what carries the run's name
        mine = f"fathom-{run_id}-"
        return Ledger(pools=[p for p in led.pools if p.startswith(mine)],
                      ec_profiles=[e for e in led.ec_profiles if e.startswith(mine)],
                      images=[(p, i) for p, i in led.images if p.startswith(mine)], fsid=fsid)
    return Ledger(fsid=fsid)  # another cluster's (a disposable one since stopped): nothing of it is here


def _abandoned_clusters(attempts: list[dict[str, Any]], want: spec.ClusterSpec | None, say: Any,
                        note: Any) -> tuple[LocalCluster | None, str | None]:
    """Deal with what killed attempts left: their disposable clusters and scratch directories.

    A killed attempt (SIGKILL) cannot clean up; its cluster keeps running, with the
    data its points wrote. When `want` (this attempt needs a disposable cluster of
    that shape), the newest such cluster is adopted if it is usable; every other one
    is stopped. Returns the adopted cluster and the tag of the attempt that started it.
    """
    adopted: tuple[LocalCluster | None, str | None] = (None, None)
    seen: set[str] = set()
    for a in reversed(attempts):
        w = a.get("workdir")
        if w and Path(w).name.startswith("fathom-run") and Path(w).is_dir():
            shutil.rmtree(w, ignore_errors=True)
        d = a.get("cluster_dir")
        if not d or d in seen or not LocalCluster(d).exists():
            continue
        seen.add(d)
        lc = LocalCluster(d, progress=say)
        why = _unusable(lc, want) if want is not None and adopted[0] is None else "this attempt does not use it"
        if why is None:
            note(f"adopted the disposable cluster an interrupted attempt left in {d}, with the data its points "
                 "wrote", cluster_dir=d, attempt=a.get("tag"))
            adopted = (lc, a.get("tag"))
            continue
        note(f"stopping the disposable cluster an interrupted attempt left in {d}: {why}", cluster_dir=d,
             attempt=a.get("tag"))
        lc.down()
    return adopted


def _unusable(lc: LocalCluster, want: spec.ClusterSpec) -> str | None:
    """Why a left-behind disposable cluster cannot serve this attempt, or None when it can."""
    dead = [d.name for d in lc.daemons() if not d.running]
    if dead or not lc.daemons():
        return f"{', '.join(dead) or 'its daemons'} not running"
    st = lc.state() or {}
    have = (st.get("osds"), st.get("objectstore"), st.get("osd_size"))
    if have != (want.osds, want.objectstore, want.osd_size):
        return f"it has {have[0]} OSD(s), {have[1]}, {have[2]} bytes each; the suite asks for " \
               f"{want.osds}, {want.objectstore}, {want.osd_size}"
    if want.mds and not st.get("mds"):
        return "it has no MDS; the suite asks for one"
    if want.rgw and not st.get("rgw"):
        return "it has no RGW; the suite asks for one"
    verdict = health.gate(lc.ceph(timeout=15), timeout=ADOPT_GATE_S)
    if not verdict.ok:
        return f"not clean after {ADOPT_GATE_S:.0f} s: {verdict.reason}"
    return None


def _rewrite(rw: resume.Rewrite, lost: str, ctx: engines.PointContext, store: Store, run_id: int,
             say: Any) -> bool:
    """Run a finished write point again, unmeasured, so the read after it finds its data; True if it did."""
    w = rw.write
    why = f"the data finished point {w.key} wrote is gone ({lost})"
    say(f"{why}: writing it again, unmeasured, before {rw.before.key}")
    try:
        res = engines.get(w.engine).run(w.params, ctx)
    except FathomError as exc:
        msg = f"{why}; writing it again failed: {exc.message}"
        store.add_event(run_id, "error", msg, data={"write": w.key, "before": rw.before.key})
        say(msg)
        return False
    ops = sum(o.ops for o in res.ops.values())
    nbytes = sum(o.bytes for o in res.ops.values())
    store.add_event(run_id, "rewrite", f"{why}: wrote it again, unmeasured, before {rw.before.key} "
                                       f"({ops} ops, {nbytes / 2**20:.0f} MiB); {w.key} keeps its measured result",
                    data={"write": w.key, "before": rw.before.key, "pool": ctx.pool, "ops": ops, "bytes": nbytes})
    return ops > 0


def _writes_into(points: list[plan.Point], done: set[str], suite: spec.Suite, pools: dict[str, str], engine: str,
                 pool: str | None) -> set[str]:
    """Finished write points whose data an engine's cleanup of `pool` (actual name) removed."""
    return {w.key for w in points if w.key in done and resume.writes_run_data(w) and w.engine == engine
            and pools.get(resume.pool_of(w, suite) or "", resume.pool_of(w, suite)) == pool}


def _teardown(store: Store, run_id: int, contexts: dict[str, engines.PointContext], prep: Prep | None,
              cluster: LocalCluster | None, keep: bool, outcome: Outcome, say: Any,
              on_cleaned: Any = lambda engine, pool: None) -> None:
    errors = []
    if (cluster is None or keep) and prep is not None:
        for key, ctx in contexts.items():
            engine = key.split(":", 1)[0]
            try:
                ctx.on_child = lambda pid: None
                ctx.timeout = 300.0
                if engines.get(engine).cleanup(ctx):
                    on_cleaned(engine, ctx.pool)  # a resumed attempt must write again what reads need
            except FathomError as exc:
                errors.append(exc.message)
    if prep is not None and (cluster is None or keep):  # a disposable cluster that is stopped needs no restore
        _restore_settings(store, run_id, prep.restorer, say)
    if prep is not None and cluster is None:
        try:
            removed = prep.cleanup()
            store.merge_env(run_id, prep_created={}, prep_removed=removed)
        except FathomError as exc:
            errors.append(f"cleanup of what this run created failed: {exc.message}")
    if cluster is not None:
        if keep:
            say(f"kept the local cluster in {cluster.root}: `fathom cluster down --dir {cluster.root}` stops it")
        else:
            try:
                stopped = cluster.down()
                say(f"stopped the disposable cluster ({', '.join(stopped)})")
                if prep is not None:
                    prep.restorer.set_moot("the disposable cluster was stopped")
            except FathomError as exc:
                errors.append(exc.message)
    for e in errors:
        store.add_event(run_id, "warning", e)
        say(f"warning: {e}")


def _restore_settings(store: Store, run_id: int, restorer: Restorer, say: Any) -> None:
    """Put back what hygiene changed, newest first; what cannot be is printed with its commands and kept."""
    todo = len(restorer.pending())
    if not todo:
        return
    left = restorer.restore(say)
    if len(left) < todo:
        store.add_event(run_id, "restore", f"restored {todo - len(left)} setting(s) this run had changed")
    if left:
        msg = unrestored_message(left, restorer.to_dict(), store.path)
        store.add_event(run_id, "warning", msg, data={"unrestored": [e.to_dict() for e in left],
                                                      "commands": restorer.repair_commands(left)})
        say(f"warning: {msg}")


def _summary(o: Outcome, opts: RunOptions) -> None:
    import sys

    cost = f"; telemetry cost {o.telemetry_cost_pct:.2f}% of one core" if o.telemetry_cost_pct is not None else ""
    line = (f"run {o.run_id} {o.status}: {o.done} point(s) done, {o.failed} failed"
            f"{f', {o.skipped} already done' if o.skipped else ''} in {o.wall_s:.0f} s{cost}; results in {opts.db}")
    print(line)
    if o.status == "interrupted":
        print(f"resume with: fathom run --resume {o.run_id} --db {opts.db}", file=sys.stderr)
