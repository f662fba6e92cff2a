"""The package's import graph has no circles, function-level imports included (they only hide one)."""

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
    """fathom modules `name` imports anywhere in its body, except under `if TYPE_CHECKING:`."""
    out: set[str] = set()
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for top in ast.parse(path.read_text()).body:
        if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test):
            continue
        for n in ast.walk(top):
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


def test_circles_are_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circles() -> None:
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    assert graph["fathom.point"] >= {"fathom.companion", "fathom.faults"}  # the walk sees imports
    assert "fathom.analysis.reconcile" in graph["fathom.interfaces.s3"]  # function-level ones too
    assert [c for c in circles(graph) if c not in KNOWN] == []


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
