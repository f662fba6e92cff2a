"""The engine's point spec, typed: the one place Python builds what fathom-engine reads (engine/PROTOCOL.md).

Mirrors engine/src/spec.rs; each target's own section is a dataclass in its
interface module (fathom.interfaces.<name>, mirroring engine/src/targets/<name>.rs).
Defaults here are the engine's defaults; the test
suite checks every built-in suite's points with `fathom-engine --check`, so the
two languages cannot drift apart. Credentials are paths (a keyring file), never
key material: a spec is echoed into the store with every point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

PROTOCOL = 2

Rw = Literal["read", "write", "randread", "randwrite", "rw", "randrw"]


@dataclass
class Connection:
    """How a Ceph target reaches the cluster: conf, entity name and keyring paths, client options."""

    conf: str | None = None
    name: str | None = None  # full entity name, client.admin
    keyring: str | None = None  # a path
    options: dict[str, str] = field(default_factory=dict)  # client config, applied last
    timeout_s: float = 10.0
    engine_defaults: bool = True
    library_dir: str | None = None  # where the Ceph libraries must come from (the engine refuses others)

    @classmethod
    def of(cls, conn: Any, timeout_s: float | None = None, **options: str) -> "Connection":
        """From a fathom.cluster.ceph.Connection (paths only; no secrets)."""
        opts = {str(k): str(v) for k, v in (getattr(conn, "options", None) or {}).items()}
        opts.update(options)
        client = getattr(conn, "client", None)
        return cls(conf=conn.conf, name=conn.name, keyring=conn.keyring or None, options=opts,
                   timeout_s=float(timeout_s) if timeout_s is not None else 10.0,
                   library_dir=client.library_dir() if client is not None else None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"conf": self.conf, "name": self.name, "timeout_s": self.timeout_s}
        if self.keyring:
            out["keyring"] = self.keyring
        if self.options:
            out["options"] = dict(self.options)
        if not self.engine_defaults:
            out["engine_defaults"] = False
        if self.library_dir:
            out["library_dir"] = self.library_dir
        return out


class Target(Protocol):
    """A target's own section of the spec; each interface module defines its dataclass (fathom.interfaces).
    Optional: `prefix` (each engine of a many-engine point gets its own), `spread(k)` (the spec of the point's
    k-th engine, e.g. its share of several gateways)."""

    kind: str

    def fields(self) -> dict[str, Any]: ...

    @property
    def jobs(self) -> int: ...


@dataclass
class Load:
    """Closed loop (iodepth outstanding per job) or open loop (rate ops/s). ops and bytes bound each job."""

    iodepth: int = 16
    duration_s: float | None = None  # ramp included
    ramp_s: float = 0.0
    ops: int | None = None  # per job, counted after the ramp
    bytes: int | None = None  # per job
    rate: float | None = None
    arrival: Literal["uniform", "poisson"] = "uniform"
    submit_batch: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"iodepth": self.iodepth, "ramp_s": self.ramp_s, "arrival": self.arrival}
        for k in ("duration_s", "ops", "bytes", "rate", "submit_batch"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


@dataclass
class Control:
    """stdin as the control channel: `go` at a start time (wait), `stop`, heartbeats."""

    wait: bool = False
    heartbeat_timeout_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"wait": self.wait, "heartbeat_timeout_s": self.heartbeat_timeout_s}


@dataclass
class EngineSpec:
    target: Target
    load: Load = field(default_factory=Load)
    on_error: Literal["stop", "continue"] = "stop"
    op_timeout_s: float | None = 30.0
    stall_timeout_s: float = 60.0
    verify: bool = False
    seed: int = 1
    interval_s: float = 1.0
    callback_sched: Literal["batch", "normal"] = "batch"
    control: Control | None = None

    def to_json(self) -> dict[str, Any]:
        return {"protocol": PROTOCOL, "target": {"kind": self.target.kind, **self.target.fields()},
                "load": self.load.to_json(), "on_error": self.on_error, "op_timeout_s": self.op_timeout_s,
                "stall_timeout_s": self.stall_timeout_s, "verify": self.verify, "seed": self.seed,
                "interval_s": self.interval_s, "callback_sched": self.callback_sched,
                "control": self.control.to_json() if self.control else None}

    @property
    def slots(self) -> int:
        return self.target.jobs * self.load.iodepth
