"""A suite file's problems, all reported at once, each at the file:line where its value is written: the
collector, the map from YAML paths to lines, the text of pydantic's errors, and the checks of the workloads
that need the suite they were merged from (defaults, sweeps, steady state)."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from fathom.suite import steady
from fathom.errors import UsageError
from fathom.fields import suggest
from fathom.units import parse_duration
from fathom.suite.workload import WORKLOAD_FIELDS, Workload, repeated_points, swept_points, sweep_problems


class Problems:
    """The problems of one suite file, reported together: one line each, by line number."""

    def __init__(self, source: str, lines: dict[tuple, int]):
        self.source, self.lines = source, lines
        self.items: list[tuple[int, str]] = []

    def add(self, path: tuple, text: str) -> None:
        line = _line(self.lines, path)
        item = (line or 0, f"{self.source}:{line}: {text}" if line else f"{self.source}: {text}")
        if item not in self.items:  # a suite-wide value copied into every workload is one problem
            self.items.append(item)

    def report(self) -> str | None:
        """None without problems; else the one problem, or all of them by line number under their count."""
        if not self.items:
            return None
        if len(self.items) == 1:
            return self.items[0][1]
        ordered = sorted(self.items, key=lambda it: it[0])  # stable: one line keeps the order found
        return f"{self.source}: {len(ordered)} problems:\n" + "\n".join(f"  {t}" for _, t in ordered)


def workload_label(raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"workload {name!r}: " if name is not None else ""


def known_defaults(defaults: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """defaults without its unknown keys, each reported at its line (once, not in every workload)."""
    for k in defaults:
        if k not in WORKLOAD_FIELDS:
            hint = suggest(str(k), WORKLOAD_FIELDS, "allowed in defaults", WORKLOAD_FIELDS)
            problems.add(("defaults", k), f"unknown field 'defaults.{k}'{hint}")
    return {k: v for k, v in defaults.items() if k in WORKLOAD_FIELDS}


def checked_sweep(sweep: dict[str, Any], path: tuple, label: str, problems: Problems) -> dict[str, Any]:
    """A sweep without the axes that have problems (each reported), so the rest is still checked."""
    axes = {k: v for k, v in sweep.items() if k != "mode"}
    found = sweep_problems(axes, sweep.get("mode", "product"))
    for axis, msg in found:
        problems.add(path + ((axis,) if axis else ()), f"{label}{field_path(path + ((axis,) if axis else ()))}: {msg}")
    bad = {axis for axis, _ in found if axis}
    out = {k: v for k, v in sweep.items() if k not in bad}
    if any(axis is None for axis, _ in found):
        out["mode"] = "product"  # reported: its values are still checked one by one
    return out


def check_steady(workloads: list[Workload | None], data: dict[str, Any], lines: dict[tuple, int],
                 problems: Problems) -> None:
    """steady_state against its workload: a window the maximum can hold, min_s <= max_s, an engine that can
    be stopped, and no second runtime (with steady_state, max_s is the runtime)."""
    for i, w in enumerate(workloads):
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
            problems.add(path, f"{label}{field_path(path)}: runtime cannot be swept with steady_state.max_s set "
                               "(max_s is every point's runtime); sweep without max_s, or drop the runtime sweep")


def check_sweeps(workloads: list[Workload | None], data: dict[str, Any], own_sweep: set[int],
                 problems: Problems) -> None:
    """Every swept value must make a valid workload: validate each one where it is written. A value of
    the suite-wide sweep that fails in several workloads the same way is one problem naming them all."""
    found: dict[tuple[tuple, str], list[str]] = {}
    for i, w in enumerate(workloads):
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
                    msg = f"{field_path(path)}: {value!r} is not allowed for {key}; {error_text(exc.errors()[0])}"
                    found.setdefault((path, msg), []).append(w.name)
        if not any(names and names[-1] == w.name for names in found.values()):  # its values are fine
            where = ("workloads", i, "sweep") if own else ("sweep",)
            if (msg := _repeated(w, where, data.get("repetitions"))) is not None:
                found.setdefault((where, msg), []).append(w.name)
    for (path, msg), names in found.items():
        who = f"workload {names[0]!r}" if len(names) == 1 else f"workloads {', '.join(map(repr, names))}"
        problems.add(path, f"{who}: {msg}")


def _repeated(w: Workload, path: tuple, repetitions: Any) -> str | None:
    """A sweep whose points repeat (a zip row or product combination written twice, or equal once normalized:
    4k and 4096): each is one point of the run (one key), so their results would overwrite each other, and
    `fathom run` would say it did more points than it stored. Repetitions are the suite's `repetitions`."""
    if w.sweep and "runtime" in w.sweep.axes() and w.steady_state and w.steady_state.max_s is not None:
        return None  # max_s is every point's runtime: check_steady reports the runtime sweep
    try:
        same = repeated_points(w.name, [swept for _, swept in swept_points(w)])
    except ValidationError:
        return None  # a combination that is not a valid workload is reported by the checks of its values
    if not same:
        return None
    def one(key: str, pos: list[int]) -> str:
        where = ", ".join(map(str, pos[:-1])) + f" and {pos[-1]}"
        return f"points {where} are one point ({key.split('/', 1)[1].replace('/', ', ')})"

    n = max(len(pos) for _, pos in same) * (repetitions if isinstance(repetitions, int) else 1)
    return (f"{field_path(path)}: {'; '.join(one(k, pos) for k, pos in same)}; a run keeps one result per point, so "
            f"the later would overwrite the earlier. List each value (zip: each row) once and set `repetitions: {n}` "
            f"to measure every point {n} times (whole passes over the plan, stored apart as rep=1, 2, ...)")


def line_map(node: yaml.Node | None) -> dict[tuple, int]:
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


def field_path(loc: tuple) -> str:
    """A path as the suite file writes it: workloads[0].sweep.bs."""
    s = ""
    for part in loc:
        s += f"[{part}]" if isinstance(part, int) else (f".{part}" if s else str(part))
    return s


def error_text(err: dict[str, Any]) -> str:
    """What one pydantic error says is wrong or allowed, without pydantic's wording around it."""
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
