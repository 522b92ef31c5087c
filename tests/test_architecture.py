"""Static checks of the package's structure (issue 33), read from the source with ``ast``, nothing imported.

- The import graph of ``lowbw`` has no cycle. An edge is every ``import``/``from ... import`` of a lowbw module,
  at module level or inside a function, and every ``importlib.import_module("lowbw....")`` with a literal
  name: an import deferred into a function still closes a cycle when it runs.
- No module uses another module's private name: no ``from lowbw.x import _y`` and no ``x._y`` on an imported
  lowbw module (dunders such as ``__version__`` are public). Within one package, names starting with ``_``
  belong to their module.
- A package imports only packages listed below it in the README's layout, which lists every package once.
- At most ``MAX_HISTORY`` lines of ``lowbw/`` narrate history (the issue's grep for "instead of", "was 3 ms", ...).
- Every import of a lowbw module or a heavy library inside a function says why with ``# lazy: <reason>``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lowbw"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(mod: str) -> bool:
    return MODULES[mod].name == "__init__.py"


def _resolve(mod: str, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in module ``mod``."""
    if level == 0:
        return name or ""
    base = mod.split(".")
    if not _is_package(mod):
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _owner(name: str) -> str | None:
    """The lowbw module that importing ``name`` loads (itself, or the nearest enclosing module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


@dataclass(frozen=True)
class Import:
    target: str  # the lowbw module imported
    line: int
    lazy: bool  # inside a function


def _imports(mod: str) -> list[Import]:
    tree = ast.parse(MODULES[mod].read_text(), filename=str(MODULES[mod]))
    out: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = _owner(alias.name)
                    if target:
                        out.append(Import(target, child.lineno, lazy))
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(mod, child.level, child.module)
                for alias in child.names:
                    target = _owner(f"{base}.{alias.name}") or _owner(base)
                    if target:
                        out.append(Import(target, child.lineno, lazy))
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, (ast.Attribute, ast.Name))
                and (child.func.attr if isinstance(child.func, ast.Attribute) else child.func.id) == "import_module"
                and child.args
                and isinstance(child.args[0], ast.Constant)
                and isinstance(child.args[0].value, str)
            ):
                target = _owner(child.args[0].value)
                if target:
                    out.append(Import(target, child.lineno, True))
            visit(child, inner)

    visit(tree, False)
    return [i for i in out if i.target != mod]


def import_graph() -> dict[str, dict[str, Import]]:
    """module -> {imported lowbw module: the first such import}."""
    graph: dict[str, dict[str, Import]] = {}
    for mod in MODULES:
        edges: dict[str, Import] = {}
        for imp in _imports(mod):
            edges.setdefault(imp.target, imp)
        graph[mod] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:  # recursion depth is bounded by the module count (a few hundred)
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _a_cycle(graph: dict[str, dict[str, Import]], comp: list[str]) -> list[str]:
    """One shortest cycle through the component's first module (breadth-first inside the component)."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{comp} is not strongly connected")


def _describe(graph: dict[str, dict[str, Import]], cycle: list[str]) -> str:
    hops = []
    for a, b in zip(cycle, cycle[1:]):
        imp = graph[a][b]
        where = f"{MODULES[a].relative_to(ROOT)}:{imp.line}{' (in a function)' if imp.lazy else ''}"
        hops.append(f"  {a} -> {b}   [{where}]")
    return "\n".join(hops)


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    comps = strongly_connected(graph)
    text = "\n\n".join(
        f"cycle among {len(c)} modules ({', '.join(c)}), e.g.:\n{_describe(graph, _a_cycle(graph, c))}" for c in comps
    )
    assert not comps, f"{len(comps)} import cycle(s) in lowbw:\n\n{text}"


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function():
    edge = Import("x", 1, False)
    graph = {
        "a": {"b": edge},
        "b": {"c": edge},
        "c": {"a": Import("a", 7, True)},
        "d": {"a": edge},
    }
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert _a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert strongly_connected({"a": {"b": edge}, "b": {}}) == []


def test_imports_inside_functions_and_relative_imports_are_edges(tmp_path, monkeypatch):
    pkg = tmp_path / "lowbw"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from lowbw.sub.b import g\n    return g\n")
    (pkg / "sub" / "b.py").write_text("from .a import f\nimport importlib\nimportlib.import_module('lowbw.c')\n")
    (pkg / "c.py").write_text("import lowbw.sub.a as a\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PKG", pkg)
    monkeypatch.setitem(globals(), "MODULES", _modules())
    graph = import_graph()
    assert set(graph["lowbw.sub.a"]) == {"lowbw.sub.b"} and graph["lowbw.sub.a"]["lowbw.sub.b"].lazy
    assert set(graph["lowbw.sub.b"]) == {"lowbw.sub.a", "lowbw.c"}
    assert set(graph["lowbw.sub"]) == {"lowbw.sub.b"}
    assert strongly_connected(graph) == [["lowbw.c", "lowbw.sub.a", "lowbw.sub.b"]]


# --- layers: the README's layout --------------------------------------------------------------------------------

LAYOUT_LINE = re.compile(r"^lowbw/(\w+)\s", re.MULTILINE)


def readme_layers(readme: Path | None = None) -> list[str]:
    """The packages of the README's "## Layout" section in the order it lists them, top first: a package may
    import only those listed below it. The README is the one place the order is written."""
    text = (readme or ROOT / "README.md").read_text()
    _, found, rest = text.partition("\n## Layout\n")
    assert found, "README.md has no '## Layout' section"
    return LAYOUT_LINE.findall(rest.split("\n## ", 1)[0])


def package_of(mod: str) -> str | None:
    """The top-level package of lowbw that ``mod`` belongs to; None for the root's own modules (``lowbw``,
    ``lowbw.cli``, ``lowbw.__main__``: the front door above every package)."""
    path = MODULES[mod]
    return None if path.parent == PKG else path.relative_to(PKG).parts[0]


def upward_imports(graph: dict[str, dict[str, Import]], layers: list[str]) -> list[str]:
    """Every import of a package listed at or above the importer's own (another package), as 'path:line: ...'."""
    rank = {p: i for i, p in enumerate(layers)}
    out = []
    for mod, edges in sorted(graph.items()):
        a = package_of(mod)
        for target, imp in sorted(edges.items()):
            b = package_of(target)
            if a is None or b is None or a == b:
                continue
            if a not in rank or b not in rank or rank[b] <= rank[a]:
                where = f"{MODULES[mod].relative_to(ROOT)}:{imp.line}{' (in a function)' if imp.lazy else ''}"
                out.append(f"{where}: lowbw/{a} imports {target} (lowbw/{b}), not listed below it")
    return out


def test_every_package_imports_only_packages_listed_below_it_in_the_readme():
    found = upward_imports(import_graph(), readme_layers())
    assert not found, (f"{len(found)} import(s) against the README's layout (a package imports only those "
                       f"listed below it):\n" + "\n".join(found))


def test_the_readme_layout_lists_every_package_once():
    layers = readme_layers()
    packages = {p for p in map(package_of, MODULES) if p is not None}
    assert len(layers) == len(set(layers)), f"listed twice in README's layout: {layers}"
    assert set(layers) == packages, (f"README's layout lacks {sorted(packages - set(layers))}, "
                                     f"lists what is no package {sorted(set(layers) - packages)}")


def test_the_layer_check_finds_an_upward_import_and_a_package_the_readme_lacks(tmp_path, monkeypatch):
    pkg = tmp_path / "lowbw"
    for sub in ("top", "low", "new"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("import lowbw.top\n")
    (pkg / "top" / "a.py").write_text("import lowbw.low\n")
    (pkg / "low" / "b.py").write_text("def f():\n    from lowbw.top.a import x\n    return x\n")
    (pkg / "new" / "c.py").write_text("from lowbw.low import b\n")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n## Layout\n\n```\nlowbw/top   the top\nlowbw/low   the bottom\n```\n## Next\nlowbw/new x\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PKG", pkg)
    monkeypatch.setitem(globals(), "MODULES", _modules())
    layers = readme_layers(readme)
    assert layers == ["top", "low"]
    found = upward_imports(import_graph(), layers)
    assert found == ["lowbw/low/b.py:2 (in a function): lowbw/low imports lowbw.top.a (lowbw/top), not listed below it",
                     "lowbw/new/c.py:1: lowbw/new imports lowbw.low.b (lowbw/low), not listed below it"]


# --- private names -------------------------------------------------------------------------------------------


def private_uses(mod: str) -> list[str]:
    """Every use in ``mod`` of another lowbw module's private name, as 'path:line: what'."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    bound: dict[str, str] = {}  # local name -> lowbw module it is bound to

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _owner(alias.name)
                if target and alias.name in MODULES:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    for part in alias.name.split(".")[1:]:
                        if private(part):
                            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, node.level, node.module)
            if not _owner(base):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    bound[alias.asname or alias.name] = full
                if private(alias.name) and _owner(full) != mod:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {base} import {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and private(node.attr)
            and bound[node.value.id] != mod
        ):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr} ({bound[node.value.id]})")
    return out


def _private_defined(mod: str) -> set[str]:
    """Private names ``mod`` defines: functions, classes, methods, assigned names and attributes, arguments."""
    names = set()
    for node in ast.walk(ast.parse(MODULES[mod].read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def private_member_uses(mod: str, defined: dict[str, set[str]]) -> list[str]:
    """``obj._name`` in ``mod`` (obj not ``self``/``cls``) where ``_name`` is private to other lowbw modules:
    defined there and nowhere in ``mod`` (a method or attribute of another module's class)."""
    path = MODULES[mod]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr in defined[mod]:
            continue
        owners = sorted(m for m, names in defined.items() if node.attr in names)
        if owners:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr} (private to {', '.join(owners)})")
    return out


def test_no_module_uses_another_modules_private_names():
    defined = {mod: _private_defined(mod) for mod in MODULES}
    found = [use for mod in MODULES for use in private_uses(mod) + private_member_uses(mod, defined)]
    assert not found, f"{len(found)} use(s) of another module's private name:\n" + "\n".join(found)


def test_the_private_name_check_finds_both_forms(tmp_path, monkeypatch):
    pkg = tmp_path / "lowbw"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _hidden(): pass\n_x = 1\n__version__ = '1'\n")
    (pkg / "b.py").write_text(
        "from lowbw.a import _hidden\nfrom lowbw import a\nimport lowbw.a as aa\n"
        "def f():\n    return a._x, aa._x, a.__version__\n"
    )
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PKG", pkg)
    monkeypatch.setitem(globals(), "MODULES", _modules())
    uses = private_uses("lowbw.b")
    assert len(uses) == 3, uses
    assert private_uses("lowbw.a") == []


def test_the_private_name_check_finds_another_modules_private_method(tmp_path, monkeypatch):
    pkg = tmp_path / "lowbw"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("class C:\n    def _decode(self):\n        return self._state\n")
    (pkg / "b.py").write_text("def f(c):\n    return c._decode()\n")
    (pkg / "c.py").write_text("class D:\n    def _decode(self):\n        pass\n\ndef g(d):\n    return d._decode()\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PKG", pkg)
    monkeypatch.setitem(globals(), "MODULES", _modules())
    defined = {mod: _private_defined(mod) for mod in MODULES}
    assert private_member_uses("lowbw.b", defined) == ["lowbw/b.py:2: ._decode (private to lowbw.a, lowbw.c)"]
    assert private_member_uses("lowbw.c", defined) == []  # its own class's private method
    assert private_member_uses("lowbw.a", defined) == []


# --- the compressor registry --------------------------------------------------------------------------------


def test_every_compressor_module_is_registered_by_the_package_and_only_there():
    """A compressor module (one calling ``register``) is listed in ``lowbw/compress/__init__.py``, the one
    route by which compressors are registered; no other module imports one just to register it."""
    registering = set()
    for mod, path in MODULES.items():
        if not mod.startswith("lowbw.compress.") or mod == "lowbw.compress.registry":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "register":
                registering.add(mod)
    assert {"lowbw.compress.quantize", "lowbw.compress.demo"} <= registering
    listed = {i.target for i in _imports("lowbw.compress")}
    missing = registering - listed
    assert not missing, f"compressor modules not imported by lowbw/compress/__init__.py: {missing}"
    graph = import_graph()
    for mod in registering:
        assert "lowbw.compress.registry" in graph[mod], f"{mod} registers, but not through lowbw.compress.registry"
    assert not set(graph["lowbw.compress.registry"]) & registering, "the registry imports compressor modules"
    assert not set(graph["lowbw.compress.base"]) & registering, "the interface imports compressor modules"


# --- history comments ----------------------------------------------------------------------------------------

# Phrases that narrate a measurement or a past version rather than state an invariant, a unit or a reason
# (issue 33: `grep -rniE "<HISTORY>" lowbw` finds at most MAX_HISTORY lines).
HISTORY = re.compile(r"(instead of|was [0-9.]+ ?(ms|s)\b|an earlier version|took [0-9.]+)", re.IGNORECASE)
MAX_HISTORY = 5


def history_lines(root: Path) -> list[str]:
    """Every line of every file under ``root`` (as ``grep -r`` reads them) that matches ``HISTORY``."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                out.append(f"{path.relative_to(root.parent)}:{n}: {line.strip()}")
    return out


def test_at_most_five_comments_narrate_history():
    found = history_lines(PKG)
    assert len(found) <= MAX_HISTORY, (
        f"{len(found)} lines narrate history or compare with the past (at most {MAX_HISTORY}); state the "
        "invariant, unit or reason instead:\n" + "\n".join(found)
    )


def test_the_history_check_finds_each_phrase(tmp_path):
    pkg = tmp_path / "lowbw"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "# uses a ring instead of a tree\nx = 1  # was 3 ms\n# was 2s\n# An earlier version sorted\n"
        "# took 1.7 s\n# was 3 messages\n# rather than a tree\n"
    )
    assert [line.split(":")[1] for line in history_lines(pkg)] == ["1", "2", "3", "4", "5"]


# --- lazy imports --------------------------------------------------------------------------------------------

# Libraries whose import costs a CLI noticeable time (hundreds of ms to seconds).
HEAVY = {"torch", "pandas", "matplotlib", "seaborn", "scipy", "snakemake", "papermill"}
# Files whose in-function imports are not yet annotated, each with why (remove an entry once annotated).
LAZY_PENDING: dict[str, str] = {}  # files whose lazy imports are still to be given reasons (none)
LAZY_MARK = re.compile(r"#\s*lazy:\s*\S.{8,}")  # "# lazy: <a reason of a few words>"


def unexplained_lazy_imports(path: Path, mod: str) -> list[str]:
    """Imports of a lowbw module or a HEAVY library inside a function of ``path`` without a ``# lazy:`` reason.

    The reason sits on one of the statement's lines, or on a comment line above it; a comment line above a run of
    consecutive import lines covers the whole run (so one reason can serve a block)."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines), filename=str(path))
    out = []

    def loads(node: ast.Import | ast.ImportFrom) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name.split(".")[0] in HEAVY or _owner(a.name) for a in node.names)
        base = _resolve(mod, node.level, node.module)
        return base.split(".")[0] in HEAVY or _owner(base) is not None

    def explained(node: ast.stmt) -> bool:
        if any(LAZY_MARK.search(lines[i]) for i in range(node.lineno - 1, node.end_lineno)):
            return True
        i = node.lineno - 2
        while i >= 0:
            text = lines[i].strip()
            if text.startswith("#"):
                if LAZY_MARK.search(text):
                    return True
            elif not text.startswith(("import ", "from ")) and not (text.endswith(",") or text in (")",)):
                return False
            elif LAZY_MARK.search(text):
                return True
            i -= 1
        return False

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            is_import = isinstance(child, (ast.Import, ast.ImportFrom))
            if in_function and is_import and loads(child) and not explained(child):
                out.append(f"{path.relative_to(ROOT)}:{child.lineno}: {lines[child.lineno - 1].strip()}")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def test_every_import_inside_a_function_says_why_it_is_lazy():
    """An import deferred into a function costs a reader a look for why; keep one only where it saves a CLI's
    import time (``lowbw --help``, ``lowbw advise``, ``lowbw doctor``, the Snakefile's planning) or an optional
    dependency, and say so with ``# lazy: <reason>``; otherwise import at the top of the module."""
    found = [
        line
        for mod, path in MODULES.items()
        if str(path.relative_to(ROOT)) not in LAZY_PENDING
        for line in unexplained_lazy_imports(path, mod)
    ]
    assert not found, f"{len(found)} import(s) inside functions without a '# lazy: <reason>':\n" + "\n".join(found)
    stale = sorted(set(LAZY_PENDING) - {str(p.relative_to(ROOT)) for p in MODULES.values()})
    assert not stale, f"LAZY_PENDING lists files that do not exist: {stale}"


def test_the_lazy_import_check_reads_reasons_on_the_line_or_above_a_block(tmp_path, monkeypatch):
    pkg = tmp_path / "lowbw"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "b.py").write_text("X = 1\n")
    (pkg / "a.py").write_text(
        "import json\n\n"
        "def f():\n    import torch  # lazy: keeps the CLI free of torch\n    import json\n    return torch, json\n\n"
        "def g():\n    # lazy: keeps the CLI free of pandas\n    import pandas\n    from lowbw.b import (\n"
        "        X,\n    )\n    from lowbw import b\n    return pandas, X, b\n\n"
        "def h():\n    import scipy  # lazy:\n    x = 1\n    from lowbw.b import X\n    return scipy, x, X\n"
    )
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PKG", pkg)
    monkeypatch.setitem(globals(), "MODULES", _modules())
    found = unexplained_lazy_imports(pkg / "a.py", "lowbw.a")
    assert [line.split(":")[1] for line in found] == ["18", "20"], found
