"""What a run is to run: the command line's options (RunOptions) and the suite planned, or the stored run
resumed (Work)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fathom.cluster.attach import Attachment
from fathom.errors import FathomError, UsageError
from fathom.hosts.clients import ClientChoice
from fathom.results.store import Store
from fathom.suite import plan, spec


def say(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


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
    ceph: str | None = None  # the disposable cluster's daemons from this Ceph (build dir, root, release name)
    client_ceph: str | None = None  # --client-ceph: whose Ceph client (fathom.cluster.client), over clients.ceph
    tty: bool | None = None  # progress style; None = decide from stderr
    slo: dict[str, Any] | None = None  # an SLO search instead of the plan: the command line's settings over the
    # suite's `slo:` (fathom.run.probes.settings)
    attach: Attachment | None = None  # the cluster the command line attached to (the runner checks it is reachable)
    attach_env: bool = False  # that attachment is CEPH_CONF's alone: no option named it (--resume's stored one wins)
    clients: ClientChoice | None = None  # the command line's client hosts, over the suite's
    servers: Any = None  # fathom.servers.ServersSpec: the cluster's hosts sampled over SSH (attached clusters)
    server_args: list[str] = field(default_factory=list)  # the options that gave them, as the resume command names them
    mgr_prometheus: bool = False  # every daemon's perf counters from the mgr's prometheus module (enabled if off)
    prometheus: str | None = None  # an existing Prometheus with node-exporter: the cluster hosts' figures
    labels: dict[str, str] = field(default_factory=dict)  # --label, over the suite's labels (fathom.suite.labels)
    live: Any = None  # fathom.live.Observer (--metrics): sees the run's progress as it goes
    # a suite's `baseline:`: (held, options, runtime_s) -> the baseline run's id, once the cluster is prepared
    # (the command line gives fathom.cli.baseline.before_points: fathom baseline lives above the runner)
    baseline: Callable[[Any, Any, float], int] | None = None
    hosts_level: int | None = None  # one level of a shape sweep (cluster.hosts a list; fathom.cli.run runs each)


@dataclass
class Work:
    """What a run (or its resumption) is to run: the suite, its points, those done, and, for an SLO search,
    the probes' source."""

    loaded: spec.LoadedSuite
    points: list[plan.Point]
    done: set[str]
    run_id: int | None = None
    source: Any = None  # fathom.run.probes.Probes: the search makes its points as it goes

    @property
    def suite(self) -> spec.Suite:
        return self.loaded.suite

    @property
    def todo(self) -> list[plan.Point]:
        return [p for p in self.points if p.key not in self.done]

    @classmethod
    def of(cls, opts: RunOptions, store: Store | None) -> Work:
        """The suite to run (or the stored run to resume, from `store`: None when there is no store yet), planned."""
        run_id = None
        if opts.resume:
            if store is None:
                raise FathomError(f"--resume {opts.resume}: no results store at {opts.db}",
                                  hint="pass --db with the file the run was stored in")
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
            run_id, ceph = prev.id, prev.env.get("ceph_override")
            level = ((prev.env.get("cluster") or {}).get("hosts") or {}).get("n")
            if opts.ceph and opts.ceph != ceph:
                raise UsageError(f"--ceph: run {prev.id} ran on {ceph or 'this host'}'s Ceph; a resumed run keeps it")
        else:
            loaded = spec.load(opts.suite_ref or "", quick=opts.quick, engine=opts.engine)
            ceph, level = opts.ceph, opts.hosts_level
        if loaded.suite.cluster.levels() is not None:
            if level is None:
                raise UsageError(f"{loaded.source}: cluster.hosts sweeps {loaded.suite.cluster.hosts}: each level is "
                                 "a run of its own", hint="run it with `fathom run`, which runs every level in turn")
            spec.at_hosts(loaded, int(level))
        if ceph:  # the suite's disposable cluster runs its daemons from another Ceph
            spec.use_ceph(loaded, ceph, attached=opts.attach is not None)
        work = cls(loaded, plan.expand(loaded.suite), store.done_keys(run_id) if run_id is not None else set(),
                   run_id)
        if opts.slo is not None:  # the search builds its probes as it goes, from this one configuration
            from fathom.run import probes

            settings = probes.settings(work.suite.slo, opts.slo)
            base = probes.base_point(work.points, settings.workload)
            settings.workload = base.workload
            setup = probes.setup_points(work.points, base)
            work.points = [*setup, base]
            work.source = probes.Probes(settings, base, say, setup)
        return work
