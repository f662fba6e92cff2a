"""What an interface module provides (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fathom.cluster.ceph import Connection
from fathom.fields import StrictModel

if TYPE_CHECKING:
    from fathom import engine_spec


class OwnFields(StrictModel):
    """The workload fields one interface owns (its module's `Fields`, given as Interface.fields): their types,
    defaults and validators, which the registry merges into workload.Workload. Each defaults to None: set on a
    workload of another interface, it is refused ("placement applies to the s3 interface, not to rbd")."""


class _Sweep:
    """Marks an interface's field a suite may sweep: `tls: Annotated[bool | None, SWEEP] = None`."""

    def __repr__(self) -> str:
        return "SWEEP"


SWEEP = _Sweep()


@dataclass(frozen=True)
class Interface:
    name: str
    needs_cluster: bool  # False: runs with no Ceph cluster at all (the runner starts none)
    rw_modes: tuple[str, ...]  # fio rw names fathom-engine runs on it
    # planned point (fio-named params) + context -> its section of the engine spec (the engine calls it its
    # target: engine_spec.Target); pure (no mount, no server)
    section: Callable[[dict[str, Any], "PointContext"], "engine_spec.Target"]
    # what a point needs made before it runs (a mount, a server, empty buckets): called before its health gate;
    # keeps what section() needs of it in ctx.prepared; returns what it did worth telling, or None
    prepare: Callable[[dict[str, Any], "PointContext"], str | None] | None = None
    needs_images: bool = False  # prep.images must define RBD images
    files: bool = False  # a file interface: workload.FILE_FIELDS apply
    needs_path: bool = False  # the workload must name a path (a local directory, file or device)
    # params -> True when a point needs no cluster after all (nfs against a server of the user's own)
    cluster_free: Callable[[dict[str, Any]], bool] | None = None
    # the workload fields only this interface takes, declared here (an OwnFields model; merged into workload.Workload)
    fields: type[OwnFields] | None = None
    # its own checks of a workload (a workload.Workload) beyond its fields' types: raises ValueError
    check: Callable[[Any], None] | None = None
    # drives RGW: a local cluster needs rgw: true, and its health gate also waits for RGW's reshard queue and GC
    rgw: bool = False
    # its read points read the objects the run's write points left (named by the run's data tag): a resumed
    # run writes them again first when they are gone (resume.py)
    run_data: bool = False
    # its own figures of a finished point: (metrics, PointResult, params, intervals, perf counters, events) -> None,
    # adding to metrics and events
    metrics: Callable[..., None] | None = None
    op_size_key: str = "bs"  # the field that gives one op's size when set (s3: object_size; bs otherwise)

    @property
    def own_fields(self) -> tuple[str, ...]:
        """The names of the workload fields only this interface takes (its `fields` model's), in their order."""
        return tuple(self.fields.model_fields) if self.fields is not None else ()

    @property
    def sweepable(self) -> tuple[str, ...]:
        """Its own fields a suite may sweep (marked SWEEP)."""
        if self.fields is None:
            return ()
        return tuple(k for k, f in self.fields.model_fields.items() if any(m is SWEEP for m in f.metadata))

    def cluster_needed(self, params: dict[str, Any]) -> bool:
        """Whether a point with these params needs a Ceph cluster (a mount fathom makes is on one)."""
        if params.get("mount"):
            return True
        return self.needs_cluster and not (self.cluster_free is not None and self.cluster_free(params))

    def unsupported(self, rw: str) -> str | None:
        """Why fathom-engine cannot run this rw mode here, or None."""
        if rw not in self.rw_modes:
            return f"fathom-engine on {self.name} runs rw {', '.join(self.rw_modes)}, not {rw!r}"
        return None


def engine_rw(rw: str) -> str:
    """fio's `readwrite` is the engine's `rw` (a sequential mix)."""
    return "rw" if rw == "readwrite" else rw


@dataclass
class PointContext:
    """What an adapter needs besides the point's own parameters. No secrets: the keyring is a path."""

    conn: Connection | None  # None: no cluster (an interface that needs none, such as null)
    pool: str | None  # the pool as prepared (may carry a run prefix)
    images: list[str]  # RBD images as prepared
    # the run's data tag, for object names / rados bench --run-name: unique per run, the same in every
    # attempt of it, so a resumed read finds what an earlier attempt wrote
    run_tag: str
    workdir: Path  # scratch files (job files, outputs) for this run
    timeout: float  # hard limit on the child's wall time, s
    image_size: int | None = None  # bytes per RBD image, as prepared
    on_interval: Callable[[dict[str, Any]], None] = lambda rec: None  # live records, engine clock
    on_child: Callable[[int | None], None] = lambda pid: None  # child pid for telemetry (None when it ends)
    # the running engine's control handle (has .stop(reason)), for companions that end a point early
    on_control: Callable[[Any], None] = lambda handle: None
    # client hosts (fathom.engines.clients.Clients): the point runs on every engine of every host
    clients: Any = None
    on_event: Callable[[dict[str, Any]], None] = lambda event: None  # point events (a client host lost)
    # per-engine records of a many-engine point: {"intervals": [...], "histograms": {(op, host, n): b64}}
    on_engines: Callable[[dict[str, Any]], None] = lambda records: None
    # a many-engine point: the engines' records of each span, just before its merged record (the live view's hosts)
    on_span: Callable[[list[dict[str, Any]]], None] = lambda records: None
    # s3 with prep.rgw (fathom.cluster.rgw.prepare): keys file path, placements -> LocationConstraint,
    # endpoints, CA file; paths and names only
    s3: dict[str, Any] | None = None
    # what the interface's prepare step made for the point (fathom.interfaces.prepare): a mount's path, a server
    prepared: dict[str, Any] = field(default_factory=dict)
    prep: Any = None  # the run's fathom.cluster.prep.Prep (what fathom made on the cluster), for prepare steps
    seed: int = 1  # the point's engine seed (fathom.suite.plan.seed); a many-engine point's engines derive theirs
