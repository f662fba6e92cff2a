"""Running a suite: cluster, prep, then one point at a time (point.py), each committed when it ends.

Data flows one way: spec -> plan -> cluster -> prep -> points (engine + companions)
-> store. The runner owns the lifecycle: a disposable local cluster (when no
attached cluster is given, and some workload needs one) is stopped whatever
happens — failure, Ctrl-C, SIGTERM — unless --keep-cluster; on an attached
cluster only what this run created is removed, and every setting its hygiene
changed is put back as it was found (fathom.cluster.restore; `fathom cluster
restore` after a SIGKILL). Ctrl-C marks the current point interrupted and keeps
every finished point; `--resume RUN` runs only the points not done.
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

from fathom import engines, envinfo, interfaces, plan, spec
from fathom import point as point_mod
from fathom.cluster import health
from fathom.cluster.ceph import Connection
from fathom.cluster.local import LocalCluster
from fathom.cluster.prep import Prep
from fathom.cluster.restore import Restorer, unrestored_message
from fathom.cluster.target import Target, target_from_args
from fathom.errors import FathomError, UsageError
from fathom.progress import Progress
from fathom.store import Store
from fathom import telemetry

CHILD_GRACE_S = 120.0  # beyond runtime + ramp before an engine is considered hung


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
    tty: bool | None = None  # progress style; None = decide from stderr


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
    done = store.done_keys(run_id) if run_id is not None else set()
    todo = [p for p in points if p.key not in done]
    for name in sorted({p.engine for p in todo}):
        engines.get(name).check()  # fail before starting a cluster: e.g. the engine binary is missing
    needs_cluster = any(interfaces.get(p.params["interface"]).needs_cluster for p in todo)
    target = target_from_args(args) if args is not None else None
    if target is None and suite.cluster.kind == "attached":
        conn = Connection.from_args(suite.cluster.conf, suite.cluster.id, None, suite.cluster.keyring)
        target = Target(conn=conn)
        target.ceph().probe()

    if run_id is None:
        name = opts.name or f"{suite.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = store.create_run(name, kind="suite", suite=loaded.source, suite_yaml=loaded.yaml_text,
                                  env={"quick": loaded.quick, "engine_override": loaded.engine,
                                       "plan_points": len(points)})
    elif not todo:
        store.finish_run(run_id, "done")
        say(f"run {run_id}: all {len(points)} points are done; nothing to resume")
        return Outcome(run_id, "done", skipped=len(points))
    attempt = secrets.token_hex(3)
    run_tag = f"fathom-{run_id}-{attempt}"
    env = store.run(run_id).env
    attempts = env.get("attempts", []) + [{"tag": run_tag, "started": time.time(), "todo": len(todo)}]
    store.merge_env(run_id, attempts=attempts)
    store.update_run(run_id, status="running")

    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    # a shell starts background jobs with SIGINT ignored; fathom run always stops cleanly on it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cluster: LocalCluster | None = None
    workdir = Path(tempfile.mkdtemp(prefix=f"fathom-run{run_id}-"))
    attempts[-1]["workdir"] = str(workdir)  # so a later --resume can remove it if this process is killed
    store.merge_env(run_id, attempts=attempts)
    prep: Prep | None = None
    outcome = Outcome(run_id, "failed", skipped=len(points) - len(todo))
    contexts: dict[str, engines.PointContext] = {}
    prog: Progress | None = None
    tel: point_mod.TelemetryCompanion | None = None
    try:
        # ---- cluster ----
        _stop_abandoned_clusters(attempts[:-1], say)
        if target is None and not needs_cluster:
            target_desc: dict[str, Any] = {"kind": "none", "why": "no workload of this run needs a Ceph cluster"}
        elif target is None:
            cdir = Path(tempfile.mkdtemp(prefix=f"fathom-cluster{run_id}-"))
            # recorded before anything starts, so a later --resume can stop it if this process is killed
            attempts[-1]["cluster_dir"] = str(cdir)
            store.merge_env(run_id, attempts=attempts)
            cluster = LocalCluster(cdir, progress=say)
            c = suite.cluster
            say(f"starting a disposable local cluster in {cdir} ({c.osds} OSD(s), {c.objectstore})")
            t0 = time.monotonic()
            cluster.up(osds=c.osds, osd_size=c.osd_size, objectstore=c.objectstore)
            say(f"cluster HEALTH_OK in {time.monotonic() - t0:.1f} s")
            target = Target(conn=cluster.connection(), local=cluster)
            outcome.cluster_dir = str(cdir)
            target_desc = {"kind": "local (disposable)", "objectstore": c.objectstore,
                                           "osds": c.osds, "osd_size": c.osd_size}
        else:
            target_desc = {"kind": "attached", "connection": target.conn.describe(),
                           "fathom_local_cluster": bool(target.local)}
        ceph = target.ceph() if target else None
        store.merge_env(run_id, target=target_desc, **envinfo.collect(ceph))

        # ---- prep ----
        prepared = _Prepared()
        if ceph is not None:
            attached = cluster is None
            # settings hygiene changes are recorded in the run's env before they are changed
            restorer = Restorer(ceph, persist=lambda rec: store.merge_env(run_id, restore=rec),
                                disposable=not attached, previous=env.get("restore"),
                                repair_args=("--db", str(opts.db), "--run", str(run_id)))
            prep = Prep(ceph, owner_prefix=run_tag, progress=say, restorer=restorer)
            if attached:
                _remove_leftovers(store, run_id, ceph, say)
            prepared = _prepare(suite, prep, attached, run_tag, say)
            store.merge_env(run_id, prep_created=prep.created.to_dict(), pools=prepared.pools)
            if suite.prep.prefill and suite.prep.images:
                pf = prep.prefill(prepared.images_pool, prepared.images,  # type: ignore[arg-type]
                                  suite.prep.images.size)
                store.merge_env(run_id, prefill=pf)
            if suite.prep.hygiene.enabled:
                hy = prep.hygiene(list(prepared.pools.values()), rbd_cache=suite.prep.hygiene.rbd_cache,
                                  rbd_io_scheduler=suite.prep.hygiene.rbd_io_scheduler)
                store.merge_env(run_id, hygiene=hy)

        # ---- points ----
        daemons = target.local_daemons() if target else []
        sampler = telemetry.Sampler(daemons)
        tel = point_mod.TelemetryCompanion(sampler, daemons, target.local.run_dir if target and target.local else None)
        next_gate: health.GateVerdict | None = None
        prog = Progress(len(points), todo, tty=opts.tty)
        companions: list[point_mod.Companion] = [tel, point_mod.ProgressCompanion(prog)]
        if outcome.skipped:
            prog.say(f"resuming run {run_id}: {outcome.skipped} point(s) done, {len(todo)} to run")
        for n, point in enumerate(todo, start=len(points) - len(todo) + 1):
            params = point.params
            pool = prepared.pools.get(params["pool"] or "", params["pool"]) if params["pool"] else \
                next(iter(prepared.pools.values()), None)
            ctx = engines.PointContext(
                conn=target.conn if target else None, pool=pool,
                images=prepared.images if interfaces.get(params["interface"]).needs_images
                and pool == prepared.images_pool else [],
                run_tag=run_tag, workdir=workdir,
                image_size=suite.prep.images.size if suite.prep.images else None,
                timeout=float(params["runtime"]) + float(params["ramp_time"]) + CHILD_GRACE_S)
            contexts[f"{point.engine}:{pool}"] = ctx
            prog.point_start(point, n)
            try:
                res = point_mod.run_point(store, run_id, point, ctx, companions, ceph, opts.gate_timeout, next_gate)
            except KeyboardInterrupt:
                prog.point_end(point, "interrupted", None)
                raise
            next_gate = res.next_gate
            prog.point_end(point, res.status, res.metrics, res.error)
            if res.status == "done":
                outcome.done += 1
            else:
                outcome.failed += 1
                if target and target.local is not None and not all(d.running for d in target.local.daemons()):
                    dead = [d.name for d in target.local.daemons() if not d.running]
                    raise FathomError(f"{', '.join(dead)} stopped during point {point.key}; run {run_id} stopped",
                                      hint=f"resume later with `fathom run --resume {run_id} --db {opts.db}`")
        outcome.status = "done" if outcome.failed == 0 else "failed"
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        store.add_event(run_id, "interrupt", "run interrupted; finished points kept")
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
            if prog is not None:
                prog.close()
            if tel is not None:
                outcome.telemetry_cost_pct = _record_cost(store, run_id, tel.sampler, tel.asok_cpu_s)
            store.finish_run(run_id, outcome.status)
            _teardown(store, run_id, contexts, prep, cluster, opts.keep_cluster, outcome, say)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, old_term)
            outcome.wall_s = time.monotonic() - t_run
            store.close()
    _summary(outcome, opts)
    return outcome


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


def _prepare(suite: spec.Suite, prep: Prep, attached: bool, run_tag: str, say: Any) -> _Prepared:
    out = _Prepared()
    for p in suite.prep.pools:
        # on someone else's cluster every pool carries the run's tag; a disposable cluster is all ours
        actual = f"{run_tag}-{p.name}" if attached else p.name
        ec = None
        if p.ec_k and p.ec_m:
            ec = prep.ec_profile(f"{actual}-ec", p.ec_k, p.ec_m)
        out.pools[p.name] = prep.pool(actual, pg_num=p.pg_num, size=p.size, min_size=p.min_size,
                                      application=p.application, ec_profile=ec, allow_ec_overwrites=bool(ec))
    im = suite.prep.images
    if im:
        out.images_pool = out.pools[im.pool]
        out.images = prep.images(out.images_pool, im.names(), im.size)
    return out


def _stop_abandoned_clusters(attempts: list[dict[str, Any]], say: Any) -> None:
    """A killed attempt cannot clean up; the next attempt stops its disposable cluster and removes
    its scratch directory (engine specs, client conf), both found by the paths it recorded."""
    for a in attempts:
        d = a.get("cluster_dir")
        if d and LocalCluster(d).exists():
            say(f"stopping the disposable cluster an interrupted attempt left in {d}")
            LocalCluster(d).down()
        w = a.get("workdir")
        if w and Path(w).name.startswith("fathom-run") and Path(w).is_dir():
            shutil.rmtree(w, ignore_errors=True)


def _remove_leftovers(store: Store, run_id: int, ceph: Any, say: Any) -> None:
    """On resume against an attached cluster: a killed attempt of this run may have left its own pools."""
    left = store.run(run_id).env.get("prep_created") or {}
    pools = left.get("pools") or []
    if not pools:
        return
    existing = {p["pool_name"] for p in ceph.ceph("osd", "pool", "ls", "detail")}
    for pool in pools:
        if pool in existing and pool.startswith(f"fathom-{run_id}-"):
            ceph.ceph("osd", "pool", "rm", pool, pool, "--yes-i-really-really-mean-it", fmt_json=False)
            say(f"removed pool {pool} left by an earlier attempt of run {run_id}")


def _teardown(store: Store, run_id: int, contexts: dict[str, engines.PointContext], prep: Prep | None,
              cluster: LocalCluster | None, keep: bool, outcome: Outcome, say: Any) -> None:
    errors = []
    if (cluster is None or keep) and prep is not None:
        for key, ctx in contexts.items():
            try:
                ctx.on_child = lambda pid: None
                ctx.timeout = 300.0
                engines.get(key.split(":", 1)[0]).cleanup(ctx)
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
