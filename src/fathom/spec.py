"""Suite files: YAML validated into typed models, with errors that name file, line, field, value and what is allowed.

A suite is a study: the cluster it runs on (cluster), what to prepare (prep),
and the workloads with their sweeps. Workload fields use fio's names for fio's
concepts (rw, bs, iodepth, numjobs, rwmixread, runtime, ramp_time, size)
whatever engine runs them.

Layout:
    name, description
    cluster:     {kind: local, osds, objectstore, osd_size}   fathom's own disposable cluster (default)
                 {kind: attached, conf, id, keyring}          an existing one
                 (`target: {kind: local | ceph, ...}`, the former name, is still read)
    prep:        {pools: [...], images: {...}, prefill, hygiene}
    clients:     {hosts: [local, user@host[:port], {host, user, port, key_file, instances, ...}], on_loss,
                 known_hosts, accept_new_host_keys}: where the engines run (fathom.hosts); default this host
    slo:         {workload, p50, p90, p99, p999, error_rate, by: rate | iodepth, start, min, max, resolution,
                 probe, max_probe}: what `fathom slo` searches (fathom.probes; docs/slo.md)
    defaults:    fields every workload inherits
    workloads:   [{name, engine, rw, bs, ..., on_error, op_timeout, stall_timeout, faults, steady_state, sweep}]
                 faults: [{at_s, action, target}] on the engine's clock (fathom.faults; docs/suites.md)
                 steady_state: {metric, window_s, criteria: {slope, deviation}, min_s, max_s}
                 stops each point once settled; max_s is the runtime (docs/suites.md)
    sweep:       {mode: product | zip, <field>: [values]}  (suite-wide, a workload's own sweep replaces it)
    repetitions: N
    quick:       a partial suite merged over this one by --quick
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fathom import interfaces, steady
from fathom.errors import FathomError, UsageError
from fathom.faults import Fault, schedule_problems
from fathom.hosts import ClientsSpec
from fathom.units import parse_duration, parse_fraction, parse_rate, parse_size

RW_MODES = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")
# file interfaces' own fields (fio's names); absent from other workloads' params
FILE_FIELDS = ("path", "mount", "nrfiles", "filesize", "file_service", "ioengine", "direct", "invalidate", "fsync",
               "fdatasync", "end_fsync")
# the s3 interface's own fields (RGW placement, TLS, a cap on bytes in flight); absent from other workloads' params
S3_FIELDS = ("placement", "tls", "max_inflight")
# the nfs interface's own fields (which export, on which server); absent from other workloads' params
NFS_FIELDS = ("server", "export")
# open loop: the offered rate (ops/s over all engines on all hosts) and the arrivals; absent in closed loop
OPEN_FIELDS = ("rate", "arrival")
WORKLOAD_FIELDS = ("engine", "interface", "target", "pool", "rw", "bs", "iodepth", "numjobs", "rwmixread", "runtime",
                   "ramp_time", "size", "object_size", "drop_caches", "on_error", "op_timeout", "stall_timeout",
                   "faults", "steady_state", *OPEN_FIELDS, *FILE_FIELDS, *S3_FIELDS, *NFS_FIELDS)
SWEEPABLE = ("rw", "bs", "iodepth", "numjobs", "rwmixread", "runtime", "ramp_time", "size", "object_size", "engine",
             "rate", "arrival",
             "nrfiles", "filesize", "ioengine", "direct", "file_service", "placement", "tls")


class SuiteError(FathomError):
    exit_code = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _size(v: Any, what: str) -> int:
    try:
        return parse_size(v, what)
    except UsageError:
        raise ValueError("expected a size such as 4k, 64KiB, 256MiB or 2G (binary units)") from None


def _duration(v: Any, what: str) -> float:
    try:
        return parse_duration(v, what)
    except UsageError:
        raise ValueError("expected a duration such as 500ms, 30s or 5m") from None


def _positive_s(v: Any, what: str) -> float:
    d = _duration(v, what)
    if d <= 0:
        raise ValueError("must be longer than 0 s")
    return d


class ClusterSpec(_Model):
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

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, v: Any) -> Any:
        if not isinstance(v, dict) or not all(isinstance(x, dict) for x in v.values()):
            raise ValueError("expected sections of options, e.g. {osd: {osd_memory_target: 939524096}}")
        return {str(k): {str(o): str(x) for o, x in sec.items()} for k, sec in v.items()}

    @field_validator("osd_size", mode="before")
    @classmethod
    def _osd_size(cls, v: Any) -> int:
        n = _size(v, "osd_size")
        if n < 1024**3:
            raise ValueError("must be at least 1GiB")
        return n


class PoolSpec(_Model):
    name: str = Field(min_length=1)
    pg_num: int = Field(32, ge=1, le=65536)
    size: int = Field(1, ge=1, le=10)
    min_size: int | None = Field(None, ge=1, le=10)
    application: Literal["rbd", "rados", "rgw", "cephfs"] = "rbd"
    ec_k: int | None = Field(None, ge=1)
    ec_m: int | None = Field(None, ge=1)


class ImagesSpec(_Model):
    pool: str = Field(min_length=1)
    count: int = Field(1, ge=1, le=4096)
    size: int
    prefix: str = "fio_test_"

    @field_validator("size", mode="before")
    @classmethod
    def _sz(cls, v: Any) -> int:
        n = _size(v, "size")
        if n < 4 * 1024**2:
            raise ValueError("an image must be at least 4MiB")
        return n

    def names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(self.count)]


class HygieneSpec(_Model):
    enabled: bool = True
    rbd_cache: bool = False
    rbd_io_scheduler: Literal["none", "simple"] = "none"


class PlacementSpec(_Model):
    """An RGW placement target over pools of prep.pools: the data pool decides the data-protection scheme."""

    data_pool: str = Field(min_length=1)
    index_pool: str = Field(min_length=1)  # replicated (EC pools have no omap)
    data_extra_pool: str = Field(min_length=1)  # replicated: incomplete multipart uploads


class RgwPrepSpec(_Model):
    """RGW preparation (fathom.cluster.rgw): a placement target per scheme, pinned index shards, a user of
    fathom's own; buckets are made per point with the placement's LocationConstraint and purged between."""

    placements: dict[str, PlacementSpec] = Field(min_length=1)
    index_shards: int = Field(11, ge=1, le=65521)  # rgw_override_bucket_index_max_shards; resharding off

    @field_validator("placements")
    @classmethod
    def _names(cls, v: dict[str, PlacementSpec]) -> dict[str, PlacementSpec]:
        import re

        bad = [k for k in v if not re.match(r"^[a-z0-9][a-z0-9-]{0,30}$", k)]
        if bad:
            raise ValueError(f"placement name {bad[0]!r}: lowercase letters, digits and '-', at most 31")
        return v


class PrepSpec(_Model):
    pools: list[PoolSpec] = []
    images: ImagesSpec | None = None
    prefill: bool = False
    hygiene: HygieneSpec = HygieneSpec(enabled=False)
    rgw: RgwPrepSpec | None = None

    @field_validator("hygiene", mode="before")
    @classmethod
    def _hyg(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v

class SweepSpec(_Model):
    """Values per workload field; `mode: product` (default) or `zip` (lists walked together)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    mode: Literal["product", "zip"] = "product"

    def axes(self) -> dict[str, list[Any]]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _axes(self) -> SweepSpec:
        problems = _sweep_problems(self.axes(), self.mode)
        if problems:
            raise ValueError(problems[0][1])
        return self


def _sweep_problems(axes: dict[str, Any], mode: Any) -> list[tuple[str | None, str]]:
    """(axis or None for the whole sweep, what is wrong) for every problem of a sweep's axes."""
    out: list[tuple[str | None, str]] = []
    for k, v in axes.items():
        if k not in SWEEPABLE:
            out.append((k, f"cannot sweep {k!r}{_suggest(k, (*SWEEPABLE, 'mode'), 'sweepable fields', SWEEPABLE)}"))
        elif not isinstance(v, list) or not v:
            out.append((k, f"{k}: expected a non-empty list of values, got {v!r}"))
    lists = {k: v for k, v in axes.items() if isinstance(v, list)}
    if mode == "zip" and len({len(v) for v in lists.values()}) > 1:
        lens = ", ".join(f"{k}: {len(v)}" for k, v in lists.items())
        out.append((None, f"mode zip needs lists of equal length ({lens})"))
    return out


def _suggest(word: str, known: Iterable[str], what: str, allowed: Iterable[str]) -> str:
    """'; did you mean X? (what: allowed)' with the closest known name, or '; what: allowed' without one."""
    close = difflib.get_close_matches(word, list(known), n=1)
    listed = ", ".join(allowed)
    return f"; did you mean {close[0]!r}? ({what}: {listed})" if close else f"; {what}: {listed}"


class SteadyCriteria(_Model):
    """Limits in % of the window mean (fio's `iops_slope:0.3%`, `iops:2%`); a number or '5%'."""

    slope: float | None = Field(None, gt=0)  # max |least-squares slope|, % of the window mean per second
    deviation: float | None = Field(None, gt=0)  # max |value - window mean|, % of the window mean

    @field_validator("slope", "deviation", mode="before")
    @classmethod
    def _pct(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().endswith("%"):
            try:
                return float(v.strip()[:-1])
            except ValueError:
                raise ValueError("expected a percentage such as 5 or 0.5%") from None
        return v


class SloSpec(_Model):
    """An SLO search's defaults (`fathom slo`; fathom.probes): latency targets per percentile, the error
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
        return _positive_s(v, info.field_name) * 1e3

    @field_validator("probe", "max_probe", mode="before")
    @classmethod
    def _probe_secs(cls, v: Any, info: Any) -> float:
        return _positive_s(v, info.field_name)

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


class SteadyStateSpec(_Model):
    """Stop a point once its metric has settled (fathom.steady); runtime becomes max_s."""

    metric: str
    window_s: float
    criteria: SteadyCriteria
    min_s: float = 0.0  # measured seconds before a stop may happen (the window must be full anyway)
    max_s: float | None = None  # measured seconds at most; sets the workload's runtime (None: runtime)

    @field_validator("metric", mode="before")
    @classmethod
    def _metric(cls, v: Any) -> Any:
        if v not in steady.METRICS:
            raise ValueError(_suggest(str(v), steady.METRICS, "metrics", steady.METRICS)[2:])
        return v

    @field_validator("window_s", "min_s", "max_s", mode="before")
    @classmethod
    def _secs(cls, v: Any, info: Any) -> Any:
        if v is None and info.field_name == "max_s":
            return None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise ValueError("must be more than 0 s" if info.field_name != "min_s" else "must be 0 s or more")
        d = _duration(v, info.field_name)
        if d <= 0 and info.field_name != "min_s":
            raise ValueError("must be more than 0 s")
        if info.field_name == "window_s" and d < 2 * steady.INTERVAL_S:
            raise ValueError(f"a window needs at least 2 intervals ({2 * steady.INTERVAL_S:g} s)")
        return d


class Workload(_Model):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    engine: str = "fathom-engine"
    # what the workload drives (fathom.interfaces); `target:` is its former name, still read
    interface: str = Field("rbd", validation_alias=AliasChoices("interface", "target"))
    pool: str | None = None
    rw: Literal[RW_MODES] = "randread"  # type: ignore[valid-type]
    bs: int = 4096
    iodepth: int = Field(1, ge=1, le=4096)
    numjobs: int = Field(1, ge=1, le=1024)
    rwmixread: int = Field(50, ge=0, le=100)
    runtime: float = 60.0
    ramp_time: float = 0.0
    size: int | None = None  # region per job (fio's size); None = the whole image
    object_size: int | None = None  # rados: object size (defaults to bs)
    drop_caches: bool = False
    # fathom-engine's error handling (so a point can survive a failover); see engine/PROTOCOL.md
    on_error: Literal["stop", "continue"] = "stop"
    op_timeout: float | None = 30.0  # an op not done after this long counts as an ETIMEDOUT error; null: none
    stall_timeout: float = 60.0  # no op completing for this long ends the point (e.g. a full or paused cluster)
    faults: list[Fault] = []  # fathom.faults: actions on the cluster during the point, on the engine's clock
    steady_state: SteadyStateSpec | None = None  # stop each point once settled; its max_s is the runtime
    # open loop (engine/PROTOCOL.md "load"): ops/s offered over all engines on all hosts, arrivals uniform or
    # poisson, latency from each op's intended start; iodepth caps the ops in flight per job. None: closed loop
    rate: float | None = None
    arrival: Literal["uniform", "poisson"] | None = None
    # file interfaces (posix): a directory, file or block device, and fio's file-set options (engine/PROTOCOL.md)
    path: str | None = None
    mount: Literal["ceph-fuse", "rbd-ext4"] | None = None  # posix on a mount fathom makes on its local cluster
    nrfiles: int | None = Field(None, ge=1, le=1_000_000)
    filesize: int | None = None
    file_service: Literal["job", "shared"] | None = None
    ioengine: Literal["sync", "io_uring"] | None = None
    direct: bool | None = None
    invalidate: bool | None = None
    fsync: int | None = Field(None, ge=0)
    fdatasync: int | None = Field(None, ge=0)
    end_fsync: bool | None = None
    # s3: the RGW placement of prep.rgw the buckets are made on, TLS at RGW, and a cap on the bytes in flight
    # (jobs x iodepth x object size; iodepth is lowered to fit, never below 1)
    placement: str | None = None
    tls: bool | None = None
    max_inflight: int | None = None
    # nfs: `export: cephfs | local` (nfs-ganesha fathom runs on its local cluster), or server HOST[:PORT] with
    # the export's pseudo path
    server: str | None = None
    export: str | None = None
    sweep: SweepSpec | None = None

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str) -> str:
        from fathom.engines import names

        if v not in names():
            raise ValueError(f"unknown engine {v!r}; engines: {', '.join(names())}")
        return v

    @field_validator("interface", mode="before")
    @classmethod
    def _interface(cls, v: Any) -> str:
        from fathom.interfaces import names

        if v is None:  # YAML reads a bare `interface: null` as no value; it names the null interface
            v = "null"
        if v not in names():
            raise ValueError(f"unknown interface {v!r}; interfaces: {', '.join(names())}")
        return v

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> float | None:
        try:
            return None if v is None else parse_rate(v, "rate")
        except UsageError:
            raise ValueError("expected ops/s above 0, such as 2000, 2.5k or 10k/s") from None

    @field_validator("max_inflight", mode="before")
    @classmethod
    def _inflight(cls, v: Any) -> Any:
        return None if v is None else _size(v, "max_inflight")

    @field_validator("bs", "size", "object_size", "filesize", mode="before")
    @classmethod
    def _sizes(cls, v: Any, info: Any) -> Any:
        if v is None:
            return None
        n = _size(v, info.field_name)
        if n < 512:
            raise ValueError("must be at least 512 bytes")
        return n

    @field_validator("runtime", "ramp_time", mode="before")
    @classmethod
    def _durations(cls, v: Any, info: Any) -> float:
        d = _duration(v, info.field_name)
        if info.field_name == "runtime" and d <= 0:
            raise ValueError("must be longer than 0 s")
        return d

    @field_validator("op_timeout", "stall_timeout", mode="before")
    @classmethod
    def _timeouts(cls, v: Any, info: Any) -> float | None:
        if v is None and info.field_name == "op_timeout":
            return None
        d = _duration(v, info.field_name)
        if d <= 0:
            raise ValueError("must be longer than 0 s" + (" (null: no op timeout)" if info.field_name == "op_timeout"
                                                          else ""))
        return d

    @model_validator(mode="after")
    def _engine_fits(self) -> "Workload":
        from fathom.engines import get

        problem = get(self.engine).unsupported(self)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _open_loop(self) -> "Workload":
        swept = self.sweep is not None and "rate" in self.sweep.axes()
        if self.arrival is not None and self.rate is None and not swept:
            raise ValueError("arrival applies to open loop: give rate (ops/s over all engines), or leave arrival out")
        if self.rate is not None and self.arrival is None:
            object.__setattr__(self, "arrival", "uniform")
        return self

    @model_validator(mode="after")
    def _steady_runtime(self) -> "Workload":
        # with steady_state, the point's runtime is its maximum: the engine runs until max_s unless stopped
        if self.steady_state is not None and self.steady_state.max_s is not None:
            object.__setattr__(self, "runtime", self.steady_state.max_s)
        return self

    @model_validator(mode="after")
    def _file_fields(self) -> "Workload":
        from fathom.interfaces import get

        iface = get(self.interface)
        given = [k for k in FILE_FIELDS if getattr(self, k) is not None]
        if iface.needs_path and not (self.path or self.mount):
            raise ValueError(f"interface {self.interface} needs path (a directory, a file or a block device) "
                             "or mount (ceph-fuse, rbd-ext4)")
        if self.mount and not iface.needs_path:
            raise ValueError(f"mount applies to the posix interface, not to {self.interface}")
        if given and not iface.files:
            raise ValueError(f"{given[0]} applies to file interfaces (posix, cephfs, nfs), not to {self.interface}")
        s3 = [k for k in S3_FIELDS if getattr(self, k) is not None]
        if s3 and self.interface != "s3":
            raise ValueError(f"{s3[0]} applies to the s3 interface, not to {self.interface}")
        nfs_given = [k for k in NFS_FIELDS if getattr(self, k) is not None]
        if nfs_given and self.interface != "nfs":
            raise ValueError(f"{nfs_given[0]} applies to the nfs interface, not to {self.interface}")
        if self.interface == "nfs":
            from fathom.interfaces.nfs import OWN_EXPORTS

            if self.server and not (self.export or "").startswith("/"):
                raise ValueError("with server, export is the export's pseudo path (e.g. /export)")
            if not self.server and (self.export or "local") not in OWN_EXPORTS:
                raise ValueError(f"export is {' or '.join(OWN_EXPORTS)} (nfs-ganesha on fathom's local cluster), "
                                 "or a pseudo path with server: HOST[:PORT]")
        return self

    def params(self) -> dict[str, Any]:
        out = self.model_dump(exclude={"sweep", "name"})
        return {k: v for k, v in out.items()
                if v is not None or k not in (*OPEN_FIELDS, *FILE_FIELDS, *S3_FIELDS, *NFS_FIELDS)}


class Suite(_Model):
    name: str = Field(min_length=1)
    description: str = ""
    cluster: ClusterSpec = ClusterSpec()
    prep: PrepSpec = PrepSpec()
    defaults: dict[str, Any] = {}
    workloads: list[Workload] = Field(min_length=1)
    sweep: SweepSpec | None = None
    repetitions: int = Field(1, ge=1, le=1000)
    clients: ClientsSpec | None = None  # client hosts the points run on (fathom.hosts); None: this host
    slo: SloSpec | None = None  # `fathom slo`'s targets and search (fathom.probes); `fathom run` ignores it

    @field_validator("defaults")
    @classmethod
    def _defaults(cls, v: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in v if k not in WORKLOAD_FIELDS]
        if bad:
            raise ValueError(f"unknown field {bad[0]!r}; allowed: {', '.join(WORKLOAD_FIELDS)}")
        return v



@dataclass
class LoadedSuite:
    suite: Suite
    source: str  # built-in name or file path
    yaml_text: str  # the file as written (stored with the run)
    quick: bool
    engine: str | None = None


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


def load(ref: str, quick: bool = False, engine: str | None = None) -> LoadedSuite:
    source, text = resolve(ref)
    return LoadedSuite(parse(text, source, quick, engine), source, text, quick, engine)


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
    lines = _line_map(node)
    _legacy_target(data, lines)
    problems = _Problems(source, lines)
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
        defaults = _known_defaults(defaults, problems)
        if "defaults" in data:
            data = {**data, "defaults": defaults}
    # sweeps: every axis problem reported where it is written; the axes that are fine are still checked
    if isinstance(data.get("sweep"), dict):
        data = {**data, "sweep": _checked_sweep(data["sweep"], ("sweep",), "", problems)}
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
                        w = {**w, "sweep": _checked_sweep(w["sweep"], ("workloads", i, "sweep"),
                                                          _workload_label(w), problems)}
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
    _check_steady(parts, data, lines, problems)
    _check_sweeps(parts, data, own_sweep, problems)
    _check_faults(parts, data, lines, problems)
    problems.raise_if_any()
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


class _Problems:
    """The problems of one suite file, reported together: one line each, by line number."""

    def __init__(self, source: str, lines: dict[tuple, int]):
        self.source, self.lines = source, lines
        self.items: list[tuple[int, str]] = []

    def add(self, path: tuple, text: str) -> None:
        line = _line(self.lines, path)
        item = (line or 0, f"{self.source}:{line}: {text}" if line else f"{self.source}: {text}")
        if item not in self.items:  # a suite-wide value copied into every workload is one problem
            self.items.append(item)

    def raise_if_any(self) -> None:
        if not self.items:
            return
        if len(self.items) == 1:
            raise SuiteError(self.items[0][1])
        ordered = sorted(self.items, key=lambda it: it[0])  # stable: one line keeps the order found
        raise SuiteError(f"{self.source}: {len(ordered)} problems:\n" + "\n".join(f"  {t}" for _, t in ordered))


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

        def part(model: type[_Model], key: str) -> Any:
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


def _workload_label(raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"workload {name!r}: " if name is not None else ""


def _known_defaults(defaults: dict[str, Any], problems: _Problems) -> dict[str, Any]:
    """defaults without its unknown keys, each reported at its line (once, not in every workload)."""
    for k in defaults:
        if k not in WORKLOAD_FIELDS:
            hint = _suggest(str(k), WORKLOAD_FIELDS, "allowed in defaults", WORKLOAD_FIELDS)
            problems.add(("defaults", k), f"unknown field 'defaults.{k}'{hint}")
    return {k: v for k, v in defaults.items() if k in WORKLOAD_FIELDS}


def _checked_sweep(sweep: dict[str, Any], path: tuple, label: str, problems: _Problems) -> dict[str, Any]:
    """A sweep without the axes that have problems (each reported), so the rest is still checked."""
    axes = {k: v for k, v in sweep.items() if k != "mode"}
    found = _sweep_problems(axes, sweep.get("mode", "product"))
    for axis, msg in found:
        problems.add(path + ((axis,) if axis else ()), f"{label}{_path(path + ((axis,) if axis else ()))}: {msg}")
    bad = {axis for axis, _ in found if axis}
    out = {k: v for k, v in sweep.items() if k not in bad}
    if any(axis is None for axis, _ in found):
        out["mode"] = "product"  # reported: its values are still checked one by one
    return out


def _cross_checks(parts: _Parts, lines: dict[tuple, int], problems: _Problems) -> None:
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
            problems.add(where, f"{_path(where)}: workload {w.name!r}: pool {w.pool!r} is not created by prep.pools "
                                f"(defined: {', '.join(sorted(pools)) or 'none'})")
        swept = list(w.sweep.axes().get("placement") or []) if w.sweep else []
        for value in ([w.placement] if w.placement is not None else []) + swept:
            if prep is None:
                break
            names = sorted(prep.rgw.placements) if prep.rgw else []
            if value not in names:
                where = ("workloads", i, "placement") if ("workloads", i, "placement") in lines else \
                    ("defaults", "placement")
                problems.add(where, f"{_path(where)}: workload {w.name!r}: placement {value!r} is not one of "
                                    f"prep.rgw.placements (defined: {', '.join(names) or 'none'})")
        if w.interface == "s3" and parts.cluster and parts.cluster.kind == "local" and not parts.cluster.rgw:
            problems.add(("cluster",), f"cluster: workload {w.name!r} drives s3: the local cluster needs rgw: true")
        if prep and interfaces.get(w.interface).needs_images and not im:
            problems.add(("workloads", i),
                         f"workloads[{i}]: workload {w.name!r} drives {w.interface} but prep.images defines no images")


def _check_steady(parts: _Parts, data: dict[str, Any], lines: dict[tuple, int], problems: _Problems) -> None:
    """steady_state against its workload: a window the maximum can hold, min_s <= max_s, an engine that can
    be stopped, and no second runtime (with steady_state, max_s is the runtime)."""
    for i, w in enumerate(parts.workloads):
        if w is None or w.steady_state is None:
            continue
        ss = w.steady_state

        def where(*sub: str, i: int = i) -> tuple:
            own = ("workloads", i, "steady_state", *sub)
            return own if own[:3] in lines else ("defaults", "steady_state", *sub)

        label = f"workload {w.name!r}: "
        for key, msg in steady.problems(ss.model_dump(), w.runtime, w.engine):
            problems.add(where(*((key,) if key else ())), f"{label}{msg}")
        if ss.max_s is None:
            continue
        raw = data["workloads"][i].get("runtime") if isinstance(data["workloads"][i], dict) else None
        if ("workloads", i, "runtime") in lines and raw is not None:
            try:
                given = parse_duration(raw, "runtime")
            except UsageError:
                given = None
            if given is not None and given != ss.max_s:
                problems.add(("workloads", i, "runtime"),
                             f"{label}runtime ({given:g} s) and steady_state.max_s ({ss.max_s:g} s) differ: with "
                             "steady_state the runtime is max_s; leave runtime out")
        if w.sweep is not None and "runtime" in w.sweep.axes():
            path = ("workloads", i, "sweep", "runtime")
            path = path if path in lines else ("sweep", "runtime")
            problems.add(path, f"{label}{_path(path)}: runtime cannot be swept with steady_state.max_s set "
                               "(max_s is every point's runtime); sweep without max_s, or drop the runtime sweep")


def _check_faults(parts: _Parts, data: dict[str, Any], lines: dict[tuple, int], problems: _Problems) -> None:
    """Each fault that is valid on its own against its workload and the cluster (fathom.faults), also in a
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
                                             needs_cluster, str(w.get("engine", "fathom-engine"))):
            where = ("workloads", i, "faults") if ("workloads", i, "faults") in lines else ("defaults", "faults")
            path = where + (index[j] if index else 0, fld)
            problems.add(path, f"{_workload_label(w)}{_path(path)}: {msg}")


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


def _check_sweeps(parts: _Parts, data: dict[str, Any], own_sweep: set[int], problems: _Problems) -> None:
    """Every swept value must make a valid workload: validate each one where it is written. A value of
    the suite-wide sweep that fails in several workloads the same way is one problem naming them all."""
    found: dict[tuple[tuple, str], list[str]] = {}
    for i, w in enumerate(parts.workloads):
        if w is None or not w.sweep:
            continue
        raw = dict(data["workloads"][i])
        own = i in own_sweep
        for key, values in w.sweep.axes().items():
            for j, value in enumerate(values):
                try:
                    Workload.model_validate({**raw, key: value, "sweep": None})
                except ValidationError as exc:
                    path = ("workloads", i, "sweep", key, j) if own else ("sweep", key, j)
                    msg = f"{_path(path)}: {value!r} is not allowed for {key}; {_msg(exc.errors()[0])}"
                    found.setdefault((path, msg), []).append(w.name)
    for (path, msg), names in found.items():
        who = f"workload {names[0]!r}" if len(names) == 1 else f"workloads {', '.join(map(repr, names))}"
        problems.add(path, f"{who}: {msg}")


def _merge(base: Any, over: Any) -> Any:
    """Deep merge of mappings; lists and scalars in `over` replace."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def _line_map(node: yaml.Node | None) -> dict[tuple, int]:
    """Path (keys and list indexes) -> 1-based line where that value is written."""
    out: dict[tuple, int] = {}

    def walk(n: yaml.Node, path: tuple) -> None:
        out[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = k.value
                out[path + (key,)] = k.start_mark.line + 1
                walk(v, path + (key,))
                out[path + (key,)] = k.start_mark.line + 1
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, path + (i,))

    if node is not None:
        walk(node, ())
    return out


def _line(lines: dict[tuple, int], path: tuple) -> int | None:
    """Line of a path, or of the nearest enclosing value that is written in the file."""
    for n in range(len(path), -1, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return None


def _path(loc: tuple) -> str:
    s = ""
    for part in loc:
        s += f"[{part}]" if isinstance(part, int) else (f".{part}" if s else str(part))
    return s


def _msg(err: dict[str, Any]) -> str:
    t, ctx = err["type"], err.get("ctx") or {}
    if t == "literal_error":
        return f"allowed: {ctx.get('expected', '').replace(' or ', ', ')}"
    if t == "missing":
        return "this field is required"
    if t == "extra_forbidden":
        return "unknown field"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def _describe(err: Any, lines: dict[tuple, int], data: dict[str, Any], defaults: dict[str, Any],
              own_sweep: set[int]) -> tuple[tuple, str]:
    """One pydantic error as (path where it is written, field: value: what is allowed)."""
    loc = tuple(err["loc"])
    # pydantic puts a tagged-union/literal member name in loc for some types; drop non-field parts
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
    path = loc
    field = _path(loc) or "suite"
    ctx_name = ""
    if len(loc) >= 3 and loc[0] == "workloads" and ("workloads", loc[1], loc[2]) not in lines \
            and loc[2] in defaults:
        # a workload field inherited from defaults: reported once, where defaults has it
        path = loc = ("defaults",) + loc[2:]
        field = _path(loc)
    elif len(loc) >= 3 and loc[0] == "workloads" and loc[2] == "sweep" and loc[1] not in own_sweep:
        # the suite-wide sweep is copied into every workload: report it once, where it is written
        path = loc = ("sweep",) + loc[3:]
        field = _path(loc)
    if len(loc) >= 2 and loc[0] == "workloads" and isinstance(loc[1], int):
        try:
            ctx_name = _workload_label(data["workloads"][loc[1]])
        except (IndexError, KeyError, TypeError):
            pass
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1]) + (["quick"] if len(loc) == 1 else [])
        hint = _suggest(str(loc[-1]), allowed, "allowed here", allowed) if allowed else ""
        return path, f"{ctx_name}unknown field {field!r}{hint}"
    if err["type"] == "missing":
        return path, f"{ctx_name}{field}: this field is required"
    value = err.get("input")
    if isinstance(value, (dict, list)):
        return path, f"{ctx_name}{field}: {_msg(err)}"
    return path, f"{ctx_name}{field}: {value!r} is not allowed; {_msg(err)}"


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
