"""fathom-engine as an engine: a planned point mapped to the engine's point spec (engine/PROTOCOL.md).

The engine runs the ramp and the measured window itself (duration_s covers
both), reports one `interval` a second on its own clock (epoch seconds) and a
`summary` with HDR histograms per op kind, its own CPU and peak RSS. The
process is run by fathom.engines.fathom_engine.run_point.
"""

from __future__ import annotations

from typing import Any

from fathom import interfaces
from fathom.engine_spec import EngineSpec, Load
from fathom.engines.base import PointContext, register
from fathom.errors import FathomError
from fathom.model import PERCENTILES, OpStats, PointResult

def point_spec(p: dict[str, Any], ctx: PointContext) -> EngineSpec:
    """The engine spec of one planned point: the interface's target section plus the generic load."""
    return EngineSpec(target=interfaces.get(p["interface"]).target(p, ctx),
                      load=Load(iodepth=int(p["iodepth"]), duration_s=float(p["runtime"]) + float(p["ramp_time"]),
                                ramp_s=float(p["ramp_time"])))


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def result_from_summary(summary: dict[str, Any], wall_s: float | None, user_s: float | None,
                        sys_s: float | None) -> PointResult:
    measured = float(summary.get("measured_s") or 0.0)
    ops: dict[str, OpStats] = {}
    for kind, o in (summary.get("ops") or {}).items():
        lat = o.get("lat_ns") or {}
        errs = o.get("errors", 0)
        ops[kind] = OpStats(
            ops=int(o.get("ops", 0)), bytes=int(o.get("bytes", 0)), runtime_s=measured,
            lat_mean_ns=lat.get("mean"), lat_stdev_ns=lat.get("stdev"), lat_min_ns=lat.get("min"),
            lat_max_ns=lat.get("max"), percentiles_ns={k: float(lat[k]) for k in PERCENTILES if lat.get(k) is not None},
            hist=o.get("hist"), errors=int(errs if isinstance(errs, int) else sum((errs or {}).values())),
        )
    errors = summary.get("errors") or []
    if isinstance(errors, dict):
        errors = [{"op": k, "kind": kk, "count": v} for k, d in errors.items() for kk, v in
                  (d.items() if isinstance(d, dict) else [("error", d)])]
    cpu = summary.get("cpu") or {}
    return PointResult(
        engine="fathom-engine", ops=ops, runtime_s=measured,
        client_user_s=user_s if user_s is not None else cpu.get("user_s"),
        client_sys_s=sys_s if sys_s is not None else cpu.get("sys_s"),
        wall_s=wall_s, errors=list(errors),
        stopped_early=bool(summary.get("stopped_early")), stop_reason=summary.get("stop_reason"),
        extra={"engine_cpu": cpu, "max_rss_kib": summary.get("max_rss_kib"), "ramp_s": summary.get("ramp_s"),
               "in_flight_abandoned": summary.get("in_flight_abandoned"), "connect_s": summary.get("connect_s")},
    )


class NativeAdapter:
    name = "fathom-engine"
    binary_hint = "build it with `make install` (needs cargo; the binary is engine/target/release/fathom-engine)"

    def unsupported(self, w: Any) -> str | None:
        return interfaces.get(w.interface).unsupported(w.rw)

    def _module(self) -> Any:
        try:
            from fathom.engines import fathom_engine
        except ImportError:
            raise FathomError("the fathom-engine adapter is not installed in this checkout",
                              hint=self.binary_hint, exit_code=4) from None
        return fathom_engine

    def check(self) -> None:
        fe = self._module()
        try:
            path = fe.engine_path()
        except FathomError:
            raise
        except Exception as exc:  # noqa: BLE001 - report any lookup failure as "not found"
            raise FathomError(f"fathom-engine not found: {exc}", hint=self.binary_hint, exit_code=4) from None
        if not path:
            raise FathomError("fathom-engine binary not found", hint=self.binary_hint, exit_code=4)

    def run(self, params: dict[str, Any], ctx: PointContext) -> PointResult:
        fe = self._module()
        spec = point_spec(params, ctx).to_json()

        def on_record(rec: dict[str, Any]) -> None:
            if rec.get("type", rec.get("kind")) == "interval":
                ctx.on_interval(rec)
            elif rec.get("type", rec.get("kind")) == "start" and rec.get("pid"):
                ctx.on_child(int(rec["pid"]))

        kwargs: dict[str, Any] = {"on_record": on_record, "timeout": ctx.timeout}
        import inspect

        sig = inspect.signature(fe.run_point).parameters
        if "on_start" in sig:
            kwargs["on_start"] = ctx.on_child
        try:
            er = fe.run_point(spec, **{k: v for k, v in kwargs.items() if k in sig or k in ("on_record", "timeout")})
        finally:
            ctx.on_child(None)
        summary = _get(er, "summary")
        if not summary:
            errs = _get(er, "errors") or []
            code = _get(er, "exit_code", _get(er, "returncode"))
            raise FathomError(f"fathom-engine ended without a summary (exit code {code}): "
                              f"{str(errs)[-500:] or _get(er, 'stderr', '')[-500:]}")
        ru = _get(er, "rusage")
        user_s = _get(ru, "ru_utime", _get(er, "user_s")) if ru is not None else _get(er, "user_s")
        sys_s = _get(ru, "ru_stime", _get(er, "sys_s")) if ru is not None else _get(er, "sys_s")
        res = result_from_summary(summary, _get(er, "wall_s"), user_s, sys_s)
        res.extra["spec"] = spec
        return res

    def cleanup(self, ctx: PointContext) -> None:
        return None  # rados objects written by the engine go with the run's pool


register(NativeAdapter())
