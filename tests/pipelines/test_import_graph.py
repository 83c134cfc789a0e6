"""The layout of ``pipelines``: no import cycle among its modules, each one imports on its own, and
the docs list them all.

The graph is read from the sources with ``ast``, so it holds every import a module can run: the
top-level ones and those inside functions (a lazy import hides a cycle until the function runs;
``distributed`` <-> ``training`` was such a cycle). Imports under ``if TYPE_CHECKING:`` never run
and are left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pipelines

PACKAGE = "pipelines"
ROOT = Path(pipelines.__file__).parent


def module_names(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """Every module of the package (subpackages included), as dotted names."""
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join((package, *parts)))
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST):
    """The import statements under ``node``, skipping ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            children = child.orelse
        else:
            children = [child]
        for c in children:
            if isinstance(c, (ast.Import, ast.ImportFrom)):
                yield c
            else:
                yield from _imports(c)


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module``'s source imports (relative imports resolved)."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in _imports(ast.parse(source)):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            if node.level:
                prefix = base[: len(base) - (node.level - 1)]
                target = ".".join(prefix + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` imports mod.
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        for name in candidates:
            # ``import pipelines.a.b`` runs pipelines.a too; count the deepest known module.
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports."""
    known = set(module_names(root, package))
    graph = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join((package, *(parts[:-1] if is_package else parts)))
        graph[name] = imported_modules(path.read_text(encoding="utf-8"), name, is_package, known)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_among_pipelines_modules():
    graph = import_graph()
    assert len(graph) > 20
    assert "pipelines.distributed" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_lazy_relative_and_absolute_imports(tmp_path):
    """The checker would catch the old cycle: a lazy relative import inside a function."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "distributed.py").write_text(
        "from .errors import E\n\ndef launch():\n    from .training import check\n    check()\n"
    )
    (pkg / "training.py").write_text("from .distributed import launch\n")
    (pkg / "errors.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.training import launch\n"
    )
    (pkg / "cli.py").write_text("import pkg.errors\nfrom pkg import training\n")
    graph = import_graph(pkg, "pkg")
    assert graph == {
        "pkg": set(),
        "pkg.cli": {"pkg", "pkg.errors", "pkg.training"},
        "pkg.distributed": {"pkg.errors", "pkg.training"},
        "pkg.errors": set(),
        "pkg.training": {"pkg.distributed"},
    }
    cycle = find_cycle(graph)
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"pkg.distributed", "pkg.training"}
    (pkg / "distributed.py").write_text("from .errors import E\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None


def test_every_pipelines_module_imports_first_in_a_fresh_interpreter():
    """Each module imported as the first of its package (the others dropped from sys.modules in
    between), in one fresh interpreter: an import cycle that broke a module's own import, or a
    module that only imported because another one had run first, would raise here."""
    script = (
        "import importlib, sys\n"
        f"for name in {module_names()!r}:\n"
        "    for loaded in [m for m in sys.modules if m == 'pipelines' or m.startswith('pipelines.')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_docs_layout_names_every_module():
    """docs/pipelines.md, "Layout", lists every module, so the map cannot fall behind a split."""
    doc = (ROOT.parent / "docs" / "pipelines.md").read_text(encoding="utf-8")
    layout = doc.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    missing = [
        p.name
        for p in sorted(ROOT.glob("*.py"))
        if p.name != "__init__.py" and f"`{p.name}`" not in layout
    ]
    assert not missing, f"docs/pipelines.md, Layout, does not name {missing}"
