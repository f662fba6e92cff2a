"""What an interface module provides (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from fathom import engine_spec
    from fathom.engines.base import PointContext


@dataclass(frozen=True)
class Interface:
    name: str
    needs_cluster: bool  # False: runs with no Ceph cluster at all (the runner starts none)
    rw_modes: tuple[str, ...]  # fio rw names fathom-engine runs on it
    # planned point (fio-named params) + context -> the engine's target section; pure (no mount, no server)
    target: Callable[[dict[str, Any], "PointContext"], "engine_spec.Target"]
    # what a point needs made before it runs (a mount, a server, empty buckets): called before its health gate;
    # keeps what target() needs of it in ctx.prepared; returns what it did worth telling, or None
    prepare: Callable[[dict[str, Any], "PointContext"], str | None] | None = None
    needs_images: bool = False  # prep.images must define RBD images
    files: bool = False  # a file interface: workload.FILE_FIELDS apply
    needs_path: bool = False  # the workload must name a path (a local directory, file or device)
    # params -> True when a point needs no cluster after all (nfs against a server of the user's own)
    cluster_free: Callable[[dict[str, Any]], bool] | None = None
    own_fields: tuple[str, ...] = ()  # workload fields only this interface takes (workload.Workload declares them)
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
