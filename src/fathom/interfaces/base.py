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
    # planned point (fio-named params) + context -> the engine's target section
    target: Callable[[dict[str, Any], "PointContext"], "engine_spec.Target"]
    needs_images: bool = False  # prep.images must define RBD images
    files: bool = False  # a file interface: spec.FILE_FIELDS apply
    needs_path: bool = False  # the workload must name a path (a local directory, file or device)
    # params -> True when a point needs no cluster after all (nfs against a server of the user's own)
    cluster_free: Callable[[dict[str, Any]], bool] | None = None
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
