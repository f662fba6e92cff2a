"""The one interface every load engine fills, like fio's ioengine ops table.

An adapter turns one planned point (a dict of fio-named parameters) into a run
of its engine and returns a PointResult. Adding an engine means one module in
this package that defines its adapter as `ADAPTER` and its line in the package's
TABLE; nothing else changes. Adapters of peer tools run them as a child process through engines.launch (fathom-engine
runs under the engine group, engines.group), in its own session
(Ctrl-C reaches fathom only, which stops the child and marks the point), with
PR_SET_PDEATHSIG so a SIGKILLed fathom does not leave load running, and
measure the child's CPU with os.wait4.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Callable, Protocol

from fathom.cluster.ceph import Connection
from fathom.interfaces.base import PointContext
from fathom.engines import launch
from fathom.engines.launch import ChildRun
from fathom.results.model import PointResult


class EngineAdapter(Protocol):
    name: str
    binary_hint: str

    def unsupported(self, workload: Any) -> str | None:
        """Why this engine cannot run the workload (workload.Workload), or None."""

    def check(self) -> None:
        """Raise FathomError (naming how to install) when the engine cannot run here."""

    def run(self, params: dict[str, Any], ctx: PointContext) -> PointResult:
        """Run one point; raise FathomError on failure, KeyboardInterrupt passes through after stopping the child."""

    def cleanup(self, ctx: PointContext) -> bool | None:
        """Remove what this engine left in the cluster for the run (e.g. rados bench objects).

        True when it removed objects the run's read points read (a resume must write them again)."""


# ---- running a child engine ------------------------------------------------------

_prctl: Any = None


def _load_prctl() -> None:
    """libc's prctl, loaded in the parent: ctypes is imported only when a peer tool runs (it costs every
    command's start-up otherwise), and never between fork and exec."""
    global _prctl
    if _prctl is None:
        import ctypes

        try:
            _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
        except OSError:
            _prctl = False


def _pdeathsig() -> None:
    # Runs in the child between fork and exec: die with the parent, so a killed
    # fathom does not leave an engine loading the cluster.
    if _prctl:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_child(argv: list[str], ctx: PointContext, env: dict[str, str] | None = None,
              on_chunk: Callable[[str], None] | None = None, cwd: Path | None = None) -> ChildRun:
    """Run a peer tool to completion through the launcher, streaming its output pieces (split on newlines
    and \\r) to on_chunk; its pid goes to ctx.on_child for telemetry. Exit code, output and its own rusage."""
    _load_prctl()
    try:
        return launch.run(argv, timeout=ctx.timeout, env=env, cwd=cwd, on_line=on_chunk, split_cr=True,
                          on_start=lambda child: ctx.on_child(child.pid), preexec=_pdeathsig)
    finally:
        ctx.on_child(None)


def ceph_env(conn: Connection, workdir: Path) -> dict[str, str]:
    """Environment for a librados client: CEPH_CONF, plus a conf copy naming the keyring when one was given.

    Engines such as fio's rbd engine read only the conf file (no CEPH_ARGS), so a
    --keyring is passed by writing `[<name>] keyring = <path>` after the user's conf.
    """
    env = conn.env()
    if conn.keyring:
        conf = workdir / "client.conf"
        if not conf.exists():
            text = Path(conn.conf).read_text()
            conf.write_text(f"{text}\n[{conn.name}]\nkeyring = {conn.keyring}\n")
        env["CEPH_CONF"] = str(conf)
    return env


def last_json(text: str) -> Any:
    """The last JSON document in text that may carry stray lines before it (fio: lines, rados bench prose)."""
    import json

    dec = json.JSONDecoder()
    found = None
    i = 0
    while True:
        j = min((k for k in (text.find("{", i), text.find("[", i)) if k >= 0), default=-1)
        if j < 0:
            break
        try:
            obj, end = dec.raw_decode(text, j)
        except json.JSONDecodeError:
            i = j + 1
            continue
        found = obj
        i = end
    return found
