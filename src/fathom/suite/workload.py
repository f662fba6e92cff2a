"""A suite's workload: the fields it may set and sweep (fio's names for fio's concepts, whatever engine runs
them), its sweep and steady-state models, and each field's validation, also against its engine and interface.
A workload's checks against the rest of its suite, reported at file:line, are in checks.py and spec.py."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, ConfigDict, Field, field_validator, model_validator

from fathom import interfaces
from fathom.suite import steady
from fathom.errors import UsageError
from fathom.suite.faults import Fault
from fathom.fields import StrictModel, duration_value, size_value, suggest
from fathom.units import parse_rate


RW_MODES = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")
# file interfaces' own fields (fio's names); absent from other workloads' params
FILE_FIELDS = ("path", "mount", "nrfiles", "filesize", "file_service", "ioengine", "direct", "invalidate", "fsync",
               "fdatasync", "end_fsync")
# fields one interface owns, declared in its module (Interface.fields: s3's placement, tls, max_inflight; nfs's
# server, export; null's delay_us); absent from other workloads' params
OWN_FIELDS = interfaces.own_fields()
# open loop: the offered rate (ops/s over all engines on all hosts) and the arrivals; absent in closed loop
OPEN_FIELDS = ("rate", "arrival")
WORKLOAD_FIELDS = ("engine", "interface", "target", "pool", "rw", "bs", "iodepth", "numjobs", "rwmixread", "runtime",
                   "ramp_time", "size", "object_size", "drop_caches", "on_error", "op_timeout", "stall_timeout",
                   "faults", "steady_state", *OPEN_FIELDS, *FILE_FIELDS, *OWN_FIELDS)
# the interfaces' own sweepable fields (s3's placement and tls, null's delay_us) are marked SWEEP in their modules
SWEEPABLE = ("rw", "bs", "iodepth", "numjobs", "rwmixread", "runtime", "ramp_time", "size", "object_size", "engine",
             "rate", "arrival",
             "nrfiles", "filesize", "ioengine", "direct", "file_service", *interfaces.sweepable())


class SweepSpec(StrictModel):
    """Values per workload field; `mode: product` (default) or `zip` (lists walked together)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    mode: Literal["product", "zip"] = "product"

    def axes(self) -> dict[str, list[Any]]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _axes(self) -> SweepSpec:
        problems = sweep_problems(self.axes(), self.mode)
        if problems:
            raise ValueError(problems[0][1])
        return self


def sweep_problems(axes: dict[str, Any], mode: Any) -> list[tuple[str | None, str]]:
    """(axis or None for the whole sweep, what is wrong) for every problem of a sweep's axes."""
    out: list[tuple[str | None, str]] = []
    for k, v in axes.items():
        if k not in SWEEPABLE:
            out.append((k, f"cannot sweep {k!r}{suggest(k, (*SWEEPABLE, 'mode'), 'sweepable fields', SWEEPABLE)}"))
        elif not isinstance(v, list) or not v:
            out.append((k, f"{k}: expected a non-empty list of values, got {v!r}"))
    lists = {k: v for k, v in axes.items() if isinstance(v, list)}
    if mode == "zip" and len({len(v) for v in lists.values()}) > 1:
        lens = ", ".join(f"{k}: {len(v)}" for k, v in lists.items())
        out.append((None, f"mode zip needs lists of equal length ({lens})"))
    return out


class SteadyCriteria(StrictModel):
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


class SteadyStateSpec(StrictModel):
    """Stop a point once its metric has settled (fathom.suite.steady); runtime becomes max_s."""

    metric: str
    window_s: float
    criteria: SteadyCriteria
    min_s: float = 0.0  # measured seconds before a stop may happen (the window must be full anyway)
    max_s: float | None = None  # measured seconds at most; sets the workload's runtime (None: runtime)

    @field_validator("metric", mode="before")
    @classmethod
    def _metric(cls, v: Any) -> Any:
        if v not in steady.METRICS:
            raise ValueError(suggest(str(v), steady.METRICS, "metrics", steady.METRICS)[2:])
        return v

    @field_validator("window_s", "min_s", "max_s", mode="before")
    @classmethod
    def _secs(cls, v: Any, info: Any) -> Any:
        if v is None and info.field_name == "max_s":
            return None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise ValueError("must be more than 0 s" if info.field_name != "min_s" else "must be 0 s or more")
        d = duration_value(v, info.field_name)
        if d <= 0 and info.field_name != "min_s":
            raise ValueError("must be more than 0 s")
        if info.field_name == "window_s" and d < 2 * steady.INTERVAL_S:
            raise ValueError(f"a window needs at least 2 intervals ({2 * steady.INTERVAL_S:g} s)")
        return d


class CommonFields(StrictModel):
    """A workload's fields that are no one interface's own (the file interfaces share theirs)."""

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
    faults: list[Fault] = []  # fathom.suite.faults: actions on the cluster during the point, on the engine's clock
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


if _twice := sorted(set(CommonFields.model_fields) & set(OWN_FIELDS)):
    raise TypeError(f"interface fields that are common workload fields too: {', '.join(_twice)}")

# The interfaces' own fields are a base of Workload: one model inheriting every interface module's `fields` model
# (interfaces.fields_model()), built when the registry loads, so adding an interface touches its module only.
# Workload stays a class statement (not create_model() over all the parts) so that a type checker reads it: its
# common fields, validators and params() keep their types. Pydantic validates the result as one flat model: the same
# field names in error locations, the same extra="forbid" refusal of an unknown field by name, the same field order
# (common fields, the interfaces', sweep; spec.py's "allowed here" lists follow it), the interfaces' validators
# inherited. A type checker cannot follow a base computed at import: it sees the stand-in below, whose attributes are
# Any, so `w.placement` type-checks as Any rather than str | None.
if TYPE_CHECKING:
    class _InterfaceFields(StrictModel):
        def __getattr__(self, name: str) -> Any: ...
else:
    _InterfaceFields = interfaces.fields_model()


class Workload(_InterfaceFields, CommonFields):
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

    @field_validator("bs", "size", "object_size", "filesize", mode="before")
    @classmethod
    def _sizes(cls, v: Any, info: Any) -> Any:
        if v is None:
            return None
        n = size_value(v, info.field_name)
        if n < 512:
            raise ValueError("must be at least 512 bytes")
        return n

    @field_validator("runtime", "ramp_time", mode="before")
    @classmethod
    def _durations(cls, v: Any, info: Any) -> float:
        d = duration_value(v, info.field_name)
        if info.field_name == "runtime" and d <= 0:
            raise ValueError("must be longer than 0 s")
        return d

    @field_validator("op_timeout", "stall_timeout", mode="before")
    @classmethod
    def _timeouts(cls, v: Any, info: Any) -> float | None:
        if v is None and info.field_name == "op_timeout":
            return None
        d = duration_value(v, info.field_name)
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
        # arrival without rate is the suite's to judge (spec: a rate sweep or an SLO search sets the rate)
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
        iface = interfaces.get(self.interface)
        given = [k for k in FILE_FIELDS if getattr(self, k) is not None]
        if iface.needs_path and not (self.path or self.mount):
            raise ValueError(f"interface {self.interface} needs path (a directory, a file or a block device) "
                             "or mount (ceph-fuse, rbd-ext4)")
        if self.mount and not iface.needs_path:
            raise ValueError(f"mount applies to the posix interface, not to {self.interface}")
        if given and not iface.files:
            raise ValueError(f"{given[0]} applies to file interfaces (posix, cephfs, nfs), not to {self.interface}")
        for name in interfaces.names():
            owned = [k for k in interfaces.get(name).own_fields if getattr(self, k) is not None]
            if owned and self.interface != name:
                raise ValueError(f"{owned[0]} applies to the {name} interface, not to {self.interface}")
        if iface.check is not None:
            iface.check(self)
        return self

    def params(self) -> dict[str, Any]:
        out = self.model_dump(exclude={"sweep", "name"})
        return {k: v for k, v in out.items()
                if v is not None or k not in (*OPEN_FIELDS, *FILE_FIELDS, *OWN_FIELDS)}


def sweep_combos(sweep: SweepSpec | None) -> list[dict[str, Any]]:
    """The sweep's value combinations as written, in plan order (product: the last axis varies fastest; zip:
    the lists walked together); [{}] without a sweep."""
    if not sweep:
        return [{}]
    axes = sweep.axes()
    rows = zip(*axes.values()) if sweep.mode == "zip" else itertools.product(*axes.values())
    return [dict(zip(axes, vals)) for vals in rows]


def swept_points(w: Workload) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(params, swept) of every point of the workload in plan order: every field with the combination applied,
    and the swept fields alone, units normalized (bs 4k -> 4096), as the point's key names them."""
    base = w.params()
    out = []
    for combo in sweep_combos(w.sweep):
        # re-validating normalizes units; the swept values themselves were validated by spec
        params = Workload.model_validate({**base, **combo, "name": w.name, "sweep": None}).params() \
            if combo else dict(base)
        out.append((params, {k: params[k] for k in combo}))
    return out


def _fmt(k: str, v: Any) -> str:
    return f"{v:g}" if k == "rate" else str(v)  # rate=1200, not 1200.0 (other keys stay as stored runs have them)


def point_key(workload: str, swept: dict[str, Any], rep: int | None = None) -> str:
    """A point's stable identity in its run (what --resume matches and the store keeps one point per):
    the workload, its swept values, and the repetition when the suite repeats."""
    return workload + "".join(f"/{k}={_fmt(k, v)}" for k, v in swept.items()) + (f"/rep={rep}" if rep else "")


def repeated_points(workload: str, swept: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """Points of one workload's sweep (swept_points' swept values, in order) that are one point: the same key,
    from a zip row or product combination repeated, or values equal once normalized (4k and 4096). (key,
    1-based positions) of each. The store keeps one point per key: these would overwrite each other's results."""
    seen: dict[str, list[int]] = {}
    for i, values in enumerate(swept, 1):
        seen.setdefault(point_key(workload, values), []).append(i)
    return [(k, pos) for k, pos in seen.items() if len(pos) > 1]
