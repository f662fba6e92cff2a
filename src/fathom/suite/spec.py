"""Suite files: YAML validated into typed models, with errors that name file, line, field, value and what is allowed.

A suite is a study: the cluster it runs on (cluster), what to prepare (prep),
and the workloads with their sweeps. Workload fields use fio's names for fio's
concepts (rw, bs, iodepth, numjobs, rwmixread, runtime, ramp_time, size)
whatever engine runs them.

Layout:
    name, description
    cluster:     {kind: local, osds, objectstore, osd_size, ceph}   fathom's own disposable cluster (default;
                 ceph: DIR or a release name runs its daemons from another Ceph)
                 {kind: attached, conf, id, keyring}          an existing one
                 (`target: {kind: local | ceph, ...}`, the former name, is still read)
    prep:        {pools: [...], images: {...}, prefill, hygiene}
    clients:     {hosts: [local, user@host[:port], {host, user, port, key_file, instances, ...}], on_loss,
                 known_hosts, accept_new_host_keys, ceph}: where the engines run (fathom.hosts.clients); default
                 this host; ceph: whose Ceph client runs here (host, reef, tentacle, DIR; fathom.cluster.client)
    slo:         {workload, p50, p90, p99, p999, error_rate, by: rate | iodepth, start, min, max, resolution,
                 probe, max_probe}: what `fathom slo` searches (fathom.run.probes; docs/slo.md)
    report:      [files-study, rgw-study]: the study sections its runs' reports carry (fathom.report.studies)
    labels:      {KEY: VALUE}: tags on every run of the suite (fathom.suite.labels; `--label` adds and replaces)
    defaults:    fields every workload inherits
    workloads:   [{name, engine, rw, bs, ..., on_error, op_timeout, stall_timeout, faults, steady_state, sweep}]
                 faults: [{at_s, action, daemon}] on the engine's clock (fathom.suite.faults; docs/suites.md)
                 steady_state: {metric, window_s, criteria: {slope, deviation}, min_s, max_s}
                 stops each point once settled; max_s is the runtime (docs/suites.md)
    sweep:       {mode: product | zip, <field>: [values]}  (suite-wide, a workload's own sweep replaces it)
    repetitions: N
    quick:       a partial suite merged over this one by --quick

Here: loading, parsing and the checks between a suite's parts; the Suite, ClusterSpec and SloSpec models.
The workload's model is fathom.suite.workload, prep's fathom.suite.prep; the problems' collector (file:line) and
the checks of each workload against its suite, fathom.suite.checks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from fathom import interfaces
from fathom.suite import labels
from fathom.errors import FathomError, UsageError
from fathom.suite.faults import Fault, schedule_problems
from fathom.hosts.clients import ClientsSpec
from fathom.suite.prep import PrepSpec
from fathom.results import studies
from fathom.suite.checks import (Problems, check_steady, check_sweeps, checked_sweep, error_text, field_path,
                                 known_defaults, line_map, workload_label)
from fathom.fields import StrictModel, positive_seconds, size_value, suggest
from fathom.units import parse_duration, parse_fraction, parse_rate
from fathom.suite.workload import WORKLOAD_FIELDS, SweepSpec, Workload


class SuiteError(FathomError):
    exit_code = 2


class ClusterSpec(StrictModel):
    kind: Literal["local", "attached"] = "local"
    # attached: how to reach it (paths; the key stays in its keyring file)
    conf: str | None = None
    id: str | None = None
    keyring: str | None = None
    # local: what fathom starts
    osds: int = Field(1, ge=1, le=16)
    objectstore: Literal["bluestore", "memstore"] = "bluestore"
    osd_size: int = 10 * 1024**3
    mds: bool = False  # an MDS and a CephFS file system (the cephfs interface, ceph-fuse mounts)
    rgw: bool = False  # an RGW (beast, a plain and a TLS endpoint) for the s3 interface
    # extra ceph.conf options by section, e.g. {osd: {osd_memory_target: "939524096"}} (local only)
    settings: dict[str, dict[str, str]] = {}
    # local: where the daemons come from: a Ceph build directory, a root file system, or a release built with
    # `fathom cluster rootfs` (reef); default this host's Ceph (fathom.cluster.cephsrc)
    ceph: str | None = None
    # local: emulated hosts (fathom.cluster.box): the OSDs over `hosts` network namespaces, each sending at most
    # host_nic (a tc rate: 10gbit) with host_delay_ms on its link; a list sweeps the cluster's shape (one run and
    # one disposable cluster per value, labelled nodes=N: fathom.cli.run)
    hosts: int | list[int] | None = None
    host_nic: str | None = None
    host_delay_ms: float | None = Field(None, ge=0, le=10000)

    @field_validator("host_nic")
    @classmethod
    def _host_nic(cls, v: str | None) -> str | None:
        from fathom.units import tc_rate
        from fathom.errors import UsageError

        try:
            return tc_rate(v) if v is not None else None
        except UsageError:
            raise ValueError("a rate in bits per second, such as 10gbit, 2.5gbit or 500mbit") from None

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: int | list[int] | None) -> int | list[int] | None:
        vals = [v] if isinstance(v, int) else v or []
        if v is not None and (not vals or any(not 1 <= x <= 64 for x in vals) or len(set(vals)) != len(vals)):
            raise ValueError("1 to 64 emulated hosts, or a list of distinct such numbers (a sweep of the cluster's "
                             "shape: one disposable cluster per value)")
        return v

    def levels(self) -> list[int] | None:
        """The hosts a shape sweep runs one cluster each with, in order; None when hosts is not a list."""
        return list(self.hosts) if isinstance(self.hosts, list) else None

    @model_validator(mode="after")
    def _shaped_hosts(self) -> ClusterSpec:
        if self.hosts is None and (self.host_nic or self.host_delay_ms is not None):
            raise ValueError("host_nic and host_delay_ms shape emulated hosts: give hosts too")
        return self

    def box(self) -> dict[str, Any] | None:
        """The emulated hosts fathom.cluster.local.LocalCluster.up makes, or None."""
        if isinstance(self.hosts, list):
            raise UsageError(f"cluster.hosts sweeps {self.hosts}: a run takes one level (fathom run runs each)")
        return None if self.hosts is None else {"n": self.hosts, "nic": self.host_nic, "delay_ms": self.host_delay_ms}

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, v: Any) -> Any:
        if not isinstance(v, dict) or not all(isinstance(x, dict) for x in v.values()):
            raise ValueError("expected sections of options, e.g. {osd: {osd_memory_target: 939524096}}")
        return {str(k): {str(o): str(x) for o, x in sec.items()} for k, sec in v.items()}

    @field_validator("osd_size", mode="before")
    @classmethod
    def _osd_size(cls, v: Any) -> int:
        n = size_value(v, "osd_size")
        if n < 1024**3:
            raise ValueError("must be at least 1GiB")
        return n


class SloSpec(StrictModel):
    """An SLO search's defaults (`fathom slo`; fathom.run.probes): latency targets per percentile, the error
    target, which workload, the load searched and how finely. The command line overrides each."""

    workload: str | None = None
    p50: float | None = None  # ms
    p90: float | None = None
    p99: float | None = None
    p999: float | None = None
    error_rate: float | None = None  # a fraction: 0.001 or "0.1%"
    by: Literal["rate", "iodepth"] = "rate"
    start: float | None = None
    min: float | None = None
    max: float | None = None
    resolution: float = Field(0.05, gt=0, lt=1)
    probe: float = 10.0  # seconds at least per probe
    max_probe: float = 120.0

    @field_validator("p50", "p90", "p99", "p999", mode="before")
    @classmethod
    def _ms(cls, v: Any, info: Any) -> float | None:
        if v is None:
            return None
        return positive_seconds(v, info.field_name) * 1e3

    @field_validator("probe", "max_probe", mode="before")
    @classmethod
    def _probe_secs(cls, v: Any, info: Any) -> float:
        return positive_seconds(v, info.field_name)

    @field_validator("error_rate", "resolution", mode="before")
    @classmethod
    def _fraction(cls, v: Any, info: Any) -> float | None:
        if v is None:
            return None
        try:
            return parse_fraction(v, info.field_name)
        except UsageError:
            raise ValueError("expected a percentage such as 0.1% (or a fraction 0..1)") from None

    @field_validator("start", "min", "max", mode="before")
    @classmethod
    def _load(cls, v: Any, info: Any) -> float | None:
        try:
            return None if v is None else parse_rate(v, info.field_name)
        except UsageError:
            raise ValueError("expected a load above 0: ops/s (2000, 2.5k) or an iodepth") from None


class BaselineSpec(StrictModel):
    """`baseline:`: `fathom baseline` on the run's cluster and hosts once it is prepared, before the first point
    (fathom.dropin.baseline); its run's id is in the run's environment and its report sets each point against it."""

    runtime_s: float = Field(10.0, gt=0, le=600)  # each measurement's length, after a 1 s ramp


class Suite(StrictModel):
    name: str = Field(min_length=1)
    description: str = ""
    cluster: ClusterSpec = ClusterSpec()
    prep: PrepSpec = PrepSpec()
    defaults: dict[str, Any] = {}
    workloads: list[Workload] = Field(min_length=1)
    sweep: SweepSpec | None = None
    repetitions: int = Field(1, ge=1, le=1000)
    clients: ClientsSpec | None = None  # client hosts the points run on (fathom.hosts.clients); None: this host
    slo: SloSpec | None = None  # `fathom slo`'s targets and search (fathom.run.probes); `fathom run` ignores it
    report: list[str] = []  # study sections its runs' reports carry (fathom.report.studies; stored in the run's env)
    labels: dict[str, str] = {}  # tags on its runs (fathom.suite.labels), under the command line's --label
    baseline: BaselineSpec | None = None  # the hosts' raw ceilings measured first (fathom baseline)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, v: Any) -> dict[str, str]:
        if not isinstance(v, dict):
            raise ValueError("labels: a mapping of KEY: VALUE, e.g. {build: abc123, nodes: 8}")
        return labels.checked(v)

    @field_validator("defaults")
    @classmethod
    def _defaults(cls, v: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in v if k not in WORKLOAD_FIELDS]
        if bad:
            raise ValueError(f"unknown field {bad[0]!r}; allowed: {', '.join(WORKLOAD_FIELDS)}")
        return v

    @field_validator("report")
    @classmethod
    def _report(cls, v: list[str]) -> list[str]:
        return studies.check(v)


@dataclass
class LoadedSuite:
    suite: Suite
    source: str  # built-in name or file path
    yaml_text: str  # the file as written (stored with the run)
    quick: bool
    engine: str | None = None
    ceph: str | None = None  # --ceph: the disposable cluster's Ceph, over the suite's cluster.ceph


# ---- loading ---------------------------------------------------------------------

def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("fathom.suites").iterdir() if p.name.endswith(".yaml"))


def builtin_text(name: str) -> str:
    f = resources.files("fathom.suites") / f"{name}.yaml"
    if not f.is_file():
        raise SuiteError(f"no built-in suite {name!r}", hint=f"built-in suites: {', '.join(builtin_names())}; "
                                                              "or pass a path to a suite file")
    return f.read_text()


def resolve(ref: str) -> tuple[str, str]:
    """(source, yaml text) of a built-in suite name or a file path."""
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") or "/" in ref or p.is_file():
        try:
            return str(p), p.read_text()
        except FileNotFoundError:
            raise SuiteError(f"suite file {ref!r} does not exist",
                             hint=f"built-in suites: {', '.join(builtin_names())}") from None
        except UnicodeDecodeError:
            raise SuiteError(f"{ref}: not a suite file: it is not text (YAML)") from None
        except OSError as exc:
            raise SuiteError(f"cannot read suite file {ref!r}: {exc.strerror}") from None
    return ref, builtin_text(ref)


def at_hosts(loaded: LoadedSuite, n: int) -> None:
    """One level of a shape sweep (cluster.hosts a list): the cluster on n emulated hosts, and each client host's
    engines (`instances`) n times as many, so the clients scale with the hosts."""
    s = loaded.suite
    levels = s.cluster.levels()
    if levels is None or n not in levels:
        raise UsageError(f"cluster.hosts is {s.cluster.hosts}: no level of {n} hosts to run")
    clients = s.clients
    if clients is not None:
        clients = clients.model_copy(update={"hosts": [h.model_copy(update={"instances": min(256, h.instances * n)})
                                                       for h in clients.hosts]})
    loaded.suite = s.model_copy(update={"cluster": s.cluster.model_copy(update={"hosts": n}), "clients": clients})


def load(ref: str, quick: bool = False, engine: str | None = None) -> LoadedSuite:
    source, text = resolve(ref)
    return LoadedSuite(parse(text, source, quick, engine), source, text, quick, engine)


def use_ceph(loaded: LoadedSuite, ceph: str, attached: bool) -> None:
    """--ceph: the suite's disposable cluster runs its daemons from another Ceph (cluster.cephsrc resolves it
    now, so a missing build directory or root fails before anything is made)."""
    if loaded.suite.cluster.kind != "local" or attached:
        raise UsageError("--ceph picks the Ceph the disposable local cluster runs; an attached cluster runs its own",
                         hint="leave --ceph out, or drop the attachment")
    from fathom.cluster import cephsrc

    cephsrc.resolve(ceph)
    # suite models are frozen: the suite gets a copy whose cluster names this Ceph
    cluster = loaded.suite.cluster.model_copy(update={"ceph": ceph})
    loaded.suite = loaded.suite.model_copy(update={"cluster": cluster})
    loaded.ceph = ceph


def parse(text: str, source: str = "<suite>", quick: bool = False, engine: str | None = None) -> Suite:
    """Validate YAML text into a Suite. Every problem found is reported in one SuiteError, one per
    line with source:line, field, value and what is allowed (a YAML syntax error alone: nothing else
    can be read)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteError(f"{where}: not valid YAML: {problem}") from None
    if data is None:
        raise SuiteError(f"{source}: the suite file is empty", hint="a suite needs at least `name:` and `workloads:`")
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: a suite must be a YAML mapping (name:, workloads:, ...), "
                         f"got {type(data).__name__}")
    lines = line_map(node)
    _legacy_target(data, lines)
    problems = Problems(source, lines)
    quick_over = data.pop("quick", None)
    if quick:
        if quick_over is None:
            pass  # a suite without a quick section runs unchanged with --quick
        elif not isinstance(quick_over, dict):
            problems.add(("quick",), f"quick: expected a mapping of overrides, got {quick_over!r}")
        else:
            data = _merge(data, quick_over)
    defaults = data.get("defaults") or {}
    if isinstance(defaults, dict):
        defaults = known_defaults(defaults, problems)
        if "defaults" in data:
            data = {**data, "defaults": defaults}
    # sweeps: every axis problem reported where it is written; the axes that are fine are still checked
    if isinstance(data.get("sweep"), dict):
        data = {**data, "sweep": checked_sweep(data["sweep"], ("sweep",), "", problems)}
    raw_workloads = data.get("workloads")
    suite_sweep = data.get("sweep")
    own_sweep: set[int] = set()
    if isinstance(raw_workloads, list) and isinstance(defaults, dict):
        merged = []
        for i, w in enumerate(raw_workloads):
            if isinstance(w, dict):
                if "sweep" in w:
                    own_sweep.add(len(merged))
                    if isinstance(w["sweep"], dict):
                        w = {**w, "sweep": checked_sweep(w["sweep"], ("workloads", i, "sweep"),
                                                         workload_label(w), problems)}
                m = {**defaults, **w}
                if suite_sweep is not None and "sweep" not in w:
                    m["sweep"] = suite_sweep
                if engine:  # --engine: every workload on one engine (e.g. to compare engines)
                    m["engine"] = engine
                merged.append(m)
            else:
                merged.append(w)
        data = {**data, "workloads": merged}
    suite: Suite | None = None
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            problems.add(*_describe(err, lines, data, defaults, own_sweep))
    parts = _Parts.of(suite, data)
    _cross_checks(parts, lines, problems)
    _check_arrival(parts, data, lines, problems)
    check_steady(parts.workloads, data, lines, problems)
    check_sweeps(parts.workloads, data, own_sweep, problems)
    _check_faults(parts, data, lines, problems)
    found = problems.report()
    if found is not None:
        raise SuiteError(found)
    assert suite is not None  # no problem means the suite validated
    return suite


def _legacy_target(data: dict[str, Any], lines: dict[tuple, int]) -> None:
    """`target: {kind: local | ceph, conf, id, keyring}` is the former name of the cluster's kind and access."""
    t = data.get("target")
    if not isinstance(t, dict) or not isinstance(data.get("cluster", {}), dict):
        return
    data.pop("target")
    t = dict(t)
    if "kind" in t:
        t["kind"] = {"ceph": "attached"}.get(t["kind"], t["kind"])
    data["cluster"] = {**t, **(data.get("cluster") or {})}
    for path, line in list(lines.items()):
        if path[:1] == ("target",) and ("cluster",) + path[1:] not in lines:
            lines[("cluster",) + path[1:]] = line


@dataclass
class _Parts:
    """The parts of a suite that validated (None: that part has problems), for the checks between them."""

    cluster: ClusterSpec | None
    prep: PrepSpec | None
    workloads: list[Workload | None]

    @classmethod
    def of(cls, suite: Suite | None, data: dict[str, Any]) -> _Parts:
        if suite is not None:
            return cls(suite.cluster, suite.prep, list(suite.workloads))

        def part(model: type[StrictModel], key: str) -> Any:
            if key not in data:
                return model()
            try:
                return model.model_validate(data[key])
            except ValidationError:
                return None

        raw = data.get("workloads")
        return cls(part(ClusterSpec, "cluster"), part(PrepSpec, "prep"),
                   [_valid_workload(w) for w in raw] if isinstance(raw, list) else [])


def _valid_workload(raw: Any) -> Workload | None:
    try:
        return Workload.model_validate(raw)
    except ValidationError:
        return None


def _cross_checks(parts: _Parts, lines: dict[tuple, int], problems: Problems) -> None:
    """Rules between fields, each reported where the offending value is written. A rule that
    needs a part with problems of its own is skipped: those are reported already."""
    prep = parts.prep
    pools = {p.name for p in prep.pools} if prep else set()
    im = prep.images if prep else None
    if prep and im and im.pool not in pools:
        problems.add(("prep", "images", "pool"), f"prep.images.pool: {im.pool!r} is not one of prep.pools (defined: "
                                                 f"{', '.join(sorted(pools)) or 'none'})")
    if prep and prep.rgw:
        for pid, pl in prep.rgw.placements.items():
            for role in ("data_pool", "index_pool", "data_extra_pool"):
                if getattr(pl, role) not in pools:
                    problems.add(("prep", "rgw", "placements", pid, role),
                                 f"prep.rgw.placements.{pid}.{role}: {getattr(pl, role)!r} is not one of prep.pools "
                                 f"(defined: {', '.join(sorted(pools)) or 'none'})")
    if prep and prep.prefill and not im:
        problems.add(("prep", "prefill"), "prep.prefill: prefill: true needs prep.images")
    seen: set[str] = set()
    for i, w in enumerate(parts.workloads):
        if w is None:
            continue
        if w.name in seen:
            problems.add(("workloads", i, "name"),
                         f"workloads[{i}].name: workload name {w.name!r} is used twice; names must be unique")
        seen.add(w.name)
        if prep and parts.cluster and parts.cluster.kind == "local" and w.pool and w.pool not in pools:
            where = ("workloads", i, "pool") if ("workloads", i, "pool") in lines else ("defaults", "pool")
            problems.add(where, f"{field_path(where)}: workload {w.name!r}: pool {w.pool!r} is not created by "
                                f"prep.pools (defined: {', '.join(sorted(pools)) or 'none'})")
        swept = list(w.sweep.axes().get("placement") or []) if w.sweep else []
        for value in ([w.placement] if w.placement is not None else []) + swept:
            if prep is None:
                break
            names = sorted(prep.rgw.placements) if prep.rgw else []
            if value not in names:
                where = ("workloads", i, "placement") if ("workloads", i, "placement") in lines else \
                    ("defaults", "placement")
                problems.add(where, f"{field_path(where)}: workload {w.name!r}: placement {value!r} is not one of "
                                    f"prep.rgw.placements (defined: {', '.join(names) or 'none'})")
        if interfaces.get(w.interface).rgw and parts.cluster and parts.cluster.kind == "local" \
                and not parts.cluster.rgw:
            problems.add(("cluster",), f"cluster: workload {w.name!r} drives {w.interface}: the local cluster "
                                       "needs rgw: true")
        if prep and interfaces.get(w.interface).needs_images and not im:
            problems.add(("workloads", i),
                         f"workloads[{i}]: workload {w.name!r} drives {w.interface} but prep.images defines no images")


def _check_arrival(parts: _Parts, data: dict[str, Any], lines: dict[tuple, int], problems: Problems) -> None:
    """`arrival` says how an open loop's arrivals come: it needs a rate, given, swept, or searched by the
    suite's `slo:` (by rate, its default; the probes take the workload's arrival)."""
    slo = data.get("slo")
    searched = isinstance(slo, dict) and slo.get("by", "rate") == "rate"
    for i, w in enumerate(parts.workloads):
        if w is None:
            continue
        axes = w.sweep.axes() if w.sweep else {}
        if (w.arrival is None and "arrival" not in axes) or w.rate is not None or "rate" in axes or searched:
            continue
        where = next((p for p in (("workloads", i, "arrival"), ("workloads", i, "sweep", "arrival"),
                                  ("defaults", "arrival"), ("sweep", "arrival")) if p in lines), ("workloads", i))
        problems.add(where, f"workload {w.name!r}: {field_path(where)}: arrival applies to open loop: give rate (ops/s "
                            "over all engines), sweep it, or search it (slo:), or leave arrival out")


def _check_faults(parts: _Parts, data: dict[str, Any], lines: dict[tuple, int], problems: Problems) -> None:
    """Each fault that is valid on its own against its workload and the cluster (fathom.suite.faults), also in a
    workload with problems elsewhere, so every problem of a schedule is reported at once."""
    raw = data.get("workloads")
    if parts.cluster is None or not isinstance(raw, list):
        return
    for i, w in enumerate(raw):
        if not isinstance(w, dict) or not isinstance(w.get("faults"), list):
            continue
        faults, index = [], []
        for j, f in enumerate(w["faults"]):
            try:
                faults.append(Fault.model_validate(f))
                index.append(j)
            except ValidationError:
                pass  # reported with the workload's own problems
        iface = w.get("interface", w.get("target", "rbd"))
        try:
            needs_cluster = interfaces.get("null" if iface is None else str(iface)).cluster_needed(w)
        except FathomError:
            continue  # an unknown interface is reported already
        for j, fld, msg in schedule_problems(faults, parts.cluster.kind, parts.cluster.osds, _point_end_s(w),
                                             needs_cluster, str(w.get("engine", "fathom-engine")),
                                             min(parts.cluster.levels() or [0]) or parts.cluster.hosts):
            where = ("workloads", i, "faults") if ("workloads", i, "faults") in lines else ("defaults", "faults")
            path = where + (index[j] if index else 0, fld)
            problems.add(path, f"{workload_label(w)}{field_path(path)}: {msg}")


def _point_end_s(w: dict[str, Any]) -> float:
    """The shortest point of a workload (runtime plus ramp over its sweep): a fault must fall inside every one."""
    sweep = w.get("sweep") if isinstance(w.get("sweep"), dict) else {}

    def least(key: str, default: float) -> float:
        vals = []
        for v in (sweep.get(key) if isinstance(sweep.get(key), list) else [w.get(key, default)]):
            try:
                vals.append(parse_duration(v, key))
            except UsageError:
                pass  # reported by the field's own check
        return min(vals, default=default)

    return least("runtime", 60.0) + least("ramp_time", 0.0)


def _merge(base: Any, over: Any) -> Any:
    """Deep merge of mappings; lists and scalars in `over` replace."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def _describe(err: Any, lines: dict[tuple, int], data: dict[str, Any], defaults: dict[str, Any],
              own_sweep: set[int]) -> tuple[tuple, str]:
    """One pydantic error as (path where it is written, field: value: what is allowed)."""
    loc = tuple(err["loc"])
    # pydantic puts a tagged-union/literal member name in loc for some types; drop non-field parts
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
    path = loc
    field = field_path(loc) or "suite"
    ctx_name = ""
    if len(loc) >= 3 and loc[0] == "workloads" and ("workloads", loc[1], loc[2]) not in lines \
            and loc[2] in defaults:
        # a workload field inherited from defaults: reported once, where defaults has it
        path = loc = ("defaults",) + loc[2:]
        field = field_path(loc)
    elif len(loc) >= 3 and loc[0] == "workloads" and loc[2] == "sweep" and loc[1] not in own_sweep:
        # the suite-wide sweep is copied into every workload: report it once, where it is written
        path = loc = ("sweep",) + loc[3:]
        field = field_path(loc)
    if len(loc) >= 2 and loc[0] == "workloads" and isinstance(loc[1], int):
        try:
            ctx_name = workload_label(data["workloads"][loc[1]])
        except (IndexError, KeyError, TypeError):
            pass
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1]) + (["quick"] if len(loc) == 1 else [])
        hint = suggest(str(loc[-1]), allowed, "allowed here", allowed) if allowed else ""
        return path, f"{ctx_name}unknown field {field!r}{hint}"
    if err["type"] == "missing":
        return path, f"{ctx_name}{field}: this field is required"
    value = err.get("input")
    if isinstance(value, (dict, list)):
        return path, f"{ctx_name}{field}: {error_text(err)}"
    return path, f"{ctx_name}{field}: {value!r} is not allowed; {error_text(err)}"


def _allowed_keys(loc: tuple) -> list[str]:
    model: Any = Suite
    for part in loc:
        if isinstance(part, int):
            continue
        f = model.model_fields.get(part)
        if f is None:
            return []
        ann = f.annotation
        for cand in getattr(ann, "__args__", (ann,)):
            inner = getattr(cand, "__args__", (cand,))
            for c in (cand, *inner):
                if isinstance(c, type) and issubclass(c, BaseModel):
                    model = c
                    break
            else:
                continue
            break
        else:
            return []
    return [k for k in model.model_fields]
