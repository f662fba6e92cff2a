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
    defaults:    fields every workload inherits
    workloads:   [{name, engine, rw, bs, ..., sweep}]
    sweep:       {mode: product | zip, <field>: [values]}  (suite-wide, a workload's own sweep replaces it)
    repetitions: N
    quick:       a partial suite merged over this one by --quick
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fathom import interfaces
from fathom.errors import FathomError, UsageError
from fathom.units import parse_duration, parse_size

RW_MODES = ("read", "write", "randread", "randwrite", "rw", "readwrite", "randrw")
WORKLOAD_FIELDS = ("engine", "interface", "target", "pool", "rw", "bs", "iodepth", "numjobs", "rwmixread", "runtime",
                   "ramp_time", "size", "object_size", "drop_caches")
SWEEPABLE = ("rw", "bs", "iodepth", "numjobs", "rwmixread", "runtime", "ramp_time", "size", "object_size", "engine")


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


class PrepSpec(_Model):
    pools: list[PoolSpec] = []
    images: ImagesSpec | None = None
    prefill: bool = False
    hygiene: HygieneSpec = HygieneSpec(enabled=False)

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
    def _axes(self) -> "SweepSpec":
        axes = self.axes()
        for k, v in axes.items():
            if k not in SWEEPABLE:
                raise ValueError(f"cannot sweep {k!r}; sweepable fields: {', '.join(SWEEPABLE)}")
            if not isinstance(v, list) or not v:
                raise ValueError(f"{k}: expected a non-empty list of values, got {v!r}")
        if self.mode == "zip" and len({len(v) for v in axes.values()}) > 1:
            lens = ", ".join(f"{k}: {len(v)}" for k, v in axes.items())
            raise ValueError(f"mode zip needs lists of equal length ({lens})")
        return self


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

    @field_validator("bs", "size", "object_size", mode="before")
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

    @model_validator(mode="after")
    def _engine_fits(self) -> "Workload":
        from fathom.engines import get

        problem = get(self.engine).unsupported(self)
        if problem:
            raise ValueError(problem)
        return self

    def params(self) -> dict[str, Any]:
        return self.model_dump(exclude={"sweep", "name"})


class Suite(_Model):
    name: str = Field(min_length=1)
    description: str = ""
    cluster: ClusterSpec = ClusterSpec()
    prep: PrepSpec = PrepSpec()
    defaults: dict[str, Any] = {}
    workloads: list[Workload] = Field(min_length=1)
    sweep: SweepSpec | None = None
    repetitions: int = Field(1, ge=1, le=1000)

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
    """Validate YAML text into a Suite; any problem is one SuiteError naming source:line, field and value."""
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
    quick_over = data.pop("quick", None)
    if quick:
        if quick_over is None:
            pass  # a suite without a quick section runs unchanged with --quick
        elif not isinstance(quick_over, dict):
            raise SuiteError(f"{_where(source, lines, ('quick',))}: quick: expected a mapping of overrides, "
                             f"got {quick_over!r}")
        else:
            data = _merge(data, quick_over)
    raw_workloads = data.get("workloads")
    defaults = data.get("defaults") or {}
    suite_sweep = data.get("sweep")
    own_sweep: set[int] = set()
    if isinstance(raw_workloads, list) and isinstance(defaults, dict):
        merged = []
        for w in raw_workloads:
            if isinstance(w, dict):
                if "sweep" in w:
                    own_sweep.add(len(merged))
                m = {**defaults, **w}
                if suite_sweep is not None and "sweep" not in w:
                    m["sweep"] = suite_sweep
                if engine:  # --engine: every workload on one engine (e.g. to compare engines)
                    m["engine"] = engine
                merged.append(m)
            else:
                merged.append(w)
        data = {**data, "workloads": merged}
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        raise SuiteError(_describe(exc, source, lines, data, defaults, own_sweep)) from None
    _cross_checks(suite, source, lines)
    _check_sweeps(suite, data, source, lines, own_sweep)
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


def _cross_checks(suite: Suite, source: str, lines: dict[tuple, int]) -> None:
    """Rules between fields, each reported where the offending value is written."""
    def fail(path: tuple, msg: str) -> None:
        raise SuiteError(f"{_where(source, lines, path)}: {_path(path)}: {msg}")

    pools = {p.name for p in suite.prep.pools}
    im = suite.prep.images
    if im and im.pool not in pools:
        fail(("prep", "images", "pool"), f"{im.pool!r} is not one of prep.pools (defined: "
                                         f"{', '.join(sorted(pools)) or 'none'})")
    if suite.prep.prefill and not im:
        fail(("prep", "prefill"), "prefill: true needs prep.images")
    seen: set[str] = set()
    for i, w in enumerate(suite.workloads):
        if w.name in seen:
            fail(("workloads", i, "name"), f"workload name {w.name!r} is used twice; names must be unique")
        seen.add(w.name)
        if suite.cluster.kind == "local" and w.pool and w.pool not in pools:
            where = ("workloads", i, "pool") if ("workloads", i, "pool") in lines else ("defaults", "pool")
            fail(where, f"workload {w.name!r}: pool {w.pool!r} is not created by prep.pools "
                        f"(defined: {', '.join(sorted(pools)) or 'none'})")
        if interfaces.get(w.interface).needs_images and not im:
            fail(("workloads", i), f"workload {w.name!r} drives {w.interface} but prep.images defines no images")


def _check_sweeps(suite: Suite, data: dict[str, Any], source: str, lines: dict[tuple, int],
                  own_sweep: set[int]) -> None:
    """Every swept value must make a valid workload: validate each one where it is written."""
    for i, w in enumerate(suite.workloads):
        if not w.sweep:
            continue
        raw = dict(data["workloads"][i])
        own = i in own_sweep
        for key, values in w.sweep.axes().items():
            for j, value in enumerate(values):
                try:
                    Workload.model_validate({**raw, key: value, "sweep": None})
                except ValidationError as exc:
                    err = exc.errors()[0]
                    path = ("workloads", i, "sweep", key, j) if own else ("sweep", key, j)
                    raise SuiteError(f"{_where(source, lines, path)}: workload {w.name!r}: {_path(path)}: "
                                     f"{value!r} is not allowed for {key}; {_msg(err)}") from None


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


def _where(source: str, lines: dict[tuple, int], path: tuple) -> str:
    for n in range(len(path), -1, -1):
        if path[:n] in lines:
            return f"{source}:{lines[path[:n]]}"
    return source


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
    msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
    return msg[:1].lower() + msg[1:]


def _describe(exc: ValidationError, source: str, lines: dict[tuple, int], data: dict[str, Any],
              defaults: dict[str, Any], own_sweep: set[int]) -> str:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    # pydantic puts a tagged-union/literal member name in loc for some types; drop non-field parts
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
    path = loc
    # a workload field inherited from defaults: point at the defaults line
    if len(loc) >= 3 and loc[0] == "workloads" and ("workloads", loc[1], loc[2]) not in lines \
            and loc[2] in defaults:
        path = ("defaults", loc[2]) + loc[3:]
    field = _path(loc) or "suite"
    ctx_name = ""
    # the suite-wide sweep is copied into every workload: report it once, where it is written
    if len(loc) >= 3 and loc[0] == "workloads" and loc[2] == "sweep" and loc[1] not in own_sweep:
        path = loc = ("sweep",) + loc[3:]
        field = _path(loc)
    where = _where(source, lines, path)
    if len(loc) >= 2 and loc[0] == "workloads" and isinstance(loc[1], int):  # noqa: SIM102
        try:
            ctx_name = f"workload {data['workloads'][loc[1]].get('name')!r}: "
        except (AttributeError, IndexError, KeyError, TypeError):
            pass
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        hint = f"; allowed here: {', '.join(allowed)}" if allowed else ""
        return f"{where}: {ctx_name}unknown field {field!r}{hint}"
    if err["type"] == "missing":
        return f"{where}: {ctx_name}{field}: this field is required"
    value = err.get("input")
    if isinstance(value, (dict, list)):
        return f"{where}: {ctx_name}{field}: {_msg(err)}"
    return f"{where}: {ctx_name}{field}: {value!r} is not allowed; {_msg(err)}"


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
