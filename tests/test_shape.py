"""The package's shape: packages by concern in one order, each importing only those below it; no circle
between files, counting every import (function-level, type-only, and the plugin tables' module names); at
most 12 modules at the top; no function over 100 lines, no module over 700."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
KNOWN: list[set[str]] = []  # circles known and accepted: none


def modules() -> dict[str, Path]:
    out = {}
    for f in SRC.rglob("*.py"):
        parts = f.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """fathom modules `name` imports anywhere in its body (under `if TYPE_CHECKING:` too), and those a plugin
    table of it names by a string ("fathom.interfaces.s3": loaded by name, used all the same)."""
    out: set[str] = set()
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for top in ast.parse(path.read_text()).body:
        for n in ast.walk(top):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "." in n.value and n.value in known:
                out.add(n.value)
            if isinstance(n, ast.Import):
                out.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                    base = ".".join(up + ([n.module] if n.module else []))
                out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in n.names)
    return {m for m in out if m in known and m != name}


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


# Floors, top first: a module imports only modules of its own package or of a floor below its own. Top-level
# modules are floors of their own; `fathom` (the package: its lazy public face) and `fathom.__main__` stand above all.
FLOORS: list[tuple[str, ...]] = [
    ("cli",),
    ("api",),
    ("run", "dropin"),
    ("report",),
    ("analysis",),
    ("suite",),
    ("engines",),
    ("interfaces",),
    ("live", "servers"),
    ("results",),
    ("hosts",),
    ("cluster",),
    ("companion", "engine_spec", "fields", "plugins", "binaries"),
    ("units",),
    ("errors", "version"),
]
TOP_LEVEL_MAX = 12


def floor(module: str) -> tuple[int, str]:
    """(floor, package) of a module: its package is the first name below `fathom`."""
    part = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(FLOORS):
        if part in names:
            return i, part
    if module in ("fathom", "fathom.__main__"):
        return -1, module
    raise AssertionError(f"{module}: its package {part!r} has no floor in FLOORS")


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import that reaches a floor above the importer's, or another package on the importer's floor."""
    out = []
    for m, imps in graph.items():
        fm, pm = floor(m)
        for i in imps:
            fi, pi = floor(i)
            if fi < fm or (fi == fm and pi != pm):
                out.append(f"{m} -> {i}")
    return sorted(out)


def test_circles_are_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circles() -> None:
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    assert graph["fathom.run.point"] >= {"fathom.companion", "fathom.run.faults"}  # the walk sees imports
    assert "fathom.interfaces.reconcile" in graph["fathom.interfaces.s3"]  # function-level ones too
    assert "fathom.interfaces.s3" in graph["fathom.interfaces"]  # and the plugin tables' modules
    assert [c for c in circles(graph) if c not in KNOWN] == []


def test_packages_import_only_what_stands_below_them() -> None:
    known = modules()
    assert upward({m: imports(m, p, known) for m, p in known.items()}) == []


def test_the_order_check_finds_an_import_that_runs_up() -> None:
    assert upward({"fathom.results.store": {"fathom.run.point"}, "fathom.run.point": set()}) == \
        ["fathom.results.store -> fathom.run.point"]
    assert upward({"fathom.live.state": {"fathom.servers.group"}, "fathom.servers.group": set()}) == \
        ["fathom.live.state -> fathom.servers.group"]
    assert upward({"fathom.run.point": {"fathom.results.store", "fathom.run.faults"}}) == []


def test_few_modules_at_the_top() -> None:
    top = sorted(p.name for p in (SRC / "fathom").glob("*.py"))
    assert len(top) <= TOP_LEVEL_MAX, top


def test_nothing_below_the_command_line_imports_it() -> None:
    """The CLI resolves options (client hosts, the attached cluster) into the runner's; nothing imports it back."""
    known = modules()
    below = {m: imports(m, p, known) for m, p in known.items()
             if not m.startswith("fathom.cli") and m != "fathom.__main__"}
    assert any(m.startswith("fathom.cli") for m in imports("fathom.__main__", known["fathom.__main__"], known))
    assert {m: sorted(i for i in imps if i.startswith("fathom.cli")) for m, imps in below.items()
            if any(i.startswith("fathom.cli") for i in imps)} == {}


def test_no_function_over_100_lines_and_no_module_over_700() -> None:
    long_files = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > 700}
    long_functions = {}
    for m, p in modules().items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None \
                    and node.end_lineno - node.lineno + 1 > 100:
                long_functions[f"{m}.{node.name}"] = node.end_lineno - node.lineno + 1
    assert long_files == {} and long_functions == {}
