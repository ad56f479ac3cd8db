"""The import architecture (docs/design.md, "Architecture"; issue 40), checked from the source alone: no import-linter,
nothing imported. Every module of the project's packages is parsed with `ast`, imports inside functions included.

    lab > analysis > gpumodel | model | ring > kernels > variants > counting

A module may import its own package and the packages below it, never one above or beside it (gpumodel, model and
ring are independent); the module graph has no cycle; bench/ (scripts, not a package) imports nothing from lab/.
pyproject.toml's [tool.importlinter] states the same layers for `lint-imports` (.ci/run).

Edges: `import a.b` is an edge to a.b, `from a import b` to a.b when a.b is a module, else to a (a name defined in
a's __init__). Relative imports are resolved. Importing a submodule is not counted as importing its package's
__init__ (as import-linter counts it), so a package may re-export what its own modules define.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# bottom to top; packages in one tuple share a layer and may not import each other
LAYERS = (("counting",), ("variants",), ("kernels",), ("gpumodel", "model", "ring"), ("analysis",), ("lab",))
PACKAGES = tuple(p for layer in LAYERS for p in layer)
RANK = {p: i for i, layer in enumerate(LAYERS) for p in layer}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """module name -> file, for every .py file of PACKAGES under root."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _target(name: str, mods: dict) -> str | None:
    """The project module `name` is, or the nearest enclosing one; None outside the project."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path, module: str, mods: dict) -> list[tuple[str, int]]:
    """(imported project module, line) of every import statement in the file, at any depth."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            names = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
        else:
            continue
        out += [(t, node.lineno) for t in map(lambda n: _target(n, mods), names) if t]
    return out


def graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported project module: first line importing it}."""
    mods = modules(root)
    g = {}
    for name, path in mods.items():
        edges = {}
        for target, line in imports(path, name, mods):
            edges[target] = min(line, edges.get(target, line))
        g[name] = edges
    return g


def strongly_connected(g: dict) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, or one that imports itself."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):  # iterative: no recursion limit on a long import chain
        work = [(v, iter(g[v]))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(g[w])))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1 or node in g[node]:
                        out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def a_cycle(g: dict, comp: list[str], root: Path = ROOT) -> str:
    """One import cycle through the component, as 'a (a.py:12) -> b (b.py:3) -> a'."""
    members, start = set(comp), comp[0]
    paths, todo = {start: [start]}, [start]  # breadth first, back to start
    while todo:
        v = todo.pop(0)
        for w in g[v]:
            if w == start:
                path = paths[v] + [start]
                mods = modules(root)
                return " -> ".join(f"{a} ({mods[a].relative_to(root)}:{g[a][b]})" for a, b in zip(path, path[1:])) \
                    + f" -> {start}"
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return " <-> ".join(comp)


def layer_violations(g: dict, root: Path = ROOT) -> list[str]:
    mods = modules(root)
    out = []
    for a, edges in g.items():
        pa = a.split(".")[0]
        for b, line in edges.items():
            pb = b.split(".")[0]
            if pa != pb and RANK[pb] >= RANK[pa]:
                out.append(f"{mods[a].relative_to(root)}:{line}: {a} imports {b} ({pb} is "
                           f"{'beside' if RANK[pb] == RANK[pa] else 'above'} {pa})")
    return out


def test_every_package_is_parsed():
    g = graph()
    assert {m.split(".")[0] for m in g} == set(PACKAGES)
    assert "gpumodel.gpu_model" in g and "analysis.cli" in g and "kernels.registry" in g
    assert "gpumodel.levels" in g["gpumodel.gpu_model"]  # an edge the rules below see
    assert "kernels.autograd" in g["kernels"]  # a function-level import (kernels.__getattr__) is an edge too


def test_imports_only_point_down_the_layers():
    bad = layer_violations(graph())
    assert not bad, "imports against the layers (lab > analysis > gpumodel | model | ring > kernels > variants > " \
                    "counting):\n" + "\n".join(bad)


def test_no_import_cycle():
    g = graph()
    cycles = [a_cycle(g, comp) for comp in strongly_connected(g)]
    assert not cycles, "import cycles (function-level imports included):\n" + "\n".join(cycles)


def test_bench_imports_nothing_from_lab():
    bad = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "lab"]
    assert not bad, "bench/ imports from lab/:\n" + "\n".join(bad)


def test_the_checks_can_fail(tmp_path):
    """The rules catch what they are for, on a copy of a small tree: a cycle (through a function-level import) and an
    import up the layers."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "counting" / "a.py").write_text("from counting import b\n")
    (tmp_path / "counting" / "b.py").write_text("def f():\n    from . import a\n")
    (tmp_path / "kernels" / "k.py").write_text("def g():\n    import lab.probe\n")
    (tmp_path / "lab" / "probe.py").write_text("")
    g = graph(tmp_path)
    comps = strongly_connected(g)
    assert comps == [["counting.a", "counting.b"]]
    assert a_cycle(g, comps[0], tmp_path) == \
        "counting.a (counting/a.py:1) -> counting.b (counting/b.py:2) -> counting.a"
    assert layer_violations(g, tmp_path) == ["kernels/k.py:2: kernels.k imports lab.probe (lab is above kernels)"]
