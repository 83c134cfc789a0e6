"""The layers of ``dflash_diag`` point one way (docs/diagnostics.md, "Layout"): ``read`` imports
neither ``analysis`` nor ``render``; ``analysis`` imports no ``render`` nor ``cli``; the reports
(``converge``, ``compare``, watch's state and view) are plain data and import no ``render``; and
no module imports itself through others. The graph is read from the sources with ``ast`` (lazy
imports inside functions included, ``if TYPE_CHECKING:`` ones left out), as the pipelines' own
layout test does."""

from __future__ import annotations

from pathlib import Path

import dflash_diag

from ..pipelines.test_import_graph import find_cycle, import_graph

ROOT = Path(dflash_diag.__file__).parent
#: layer -> the layers it must never import.
FORBIDDEN = {
    "read": {"analysis", "render", "cli", "converge", "compare", "watch"},
    "analysis": {"render", "cli", "converge", "compare", "watch"},
    "converge": {"render", "cli"},
    "compare": {"render", "cli"},
    "render": {"cli"},
}
#: watch's report modules (its live view ``watch.render`` is a renderer).
PLAIN_DATA = {"dflash_diag.watch.state", "dflash_diag.watch.view"}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (ROOT / parts[1]).is_dir()) else ""


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``"a -> b"`` for every import that points against the layers."""
    bad = []
    for module, imported in sorted(graph.items()):
        forbidden = FORBIDDEN.get(_layer(module), set())
        if module in PLAIN_DATA:
            forbidden = forbidden | {"render", "cli"}
        bad += [
            f"{module} -> {m}"
            for m in sorted(imported)
            if _layer(m) in forbidden or (module in PLAIN_DATA and m == "dflash_diag.watch.render")
        ]
    return bad


def test_layers_point_one_way():
    graph = import_graph(ROOT, "dflash_diag")
    assert "dflash_diag.read.jsonl" in graph
    assert "dflash_diag.render.json" in graph
    assert layer_violations(graph) == []


def test_no_import_cycle_in_dflash_diag():
    cycle = find_cycle(import_graph(ROOT, "dflash_diag"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_a_reader_that_imports_a_renderer():
    graph = {
        "dflash_diag.read.jsonl": {"dflash_diag.text", "dflash_diag.render.safe_text"},
        "dflash_diag.converge.report": {"dflash_diag.render.json"},
        "dflash_diag.watch.view": {"dflash_diag.watch.render"},
        "dflash_diag.render.json": {"dflash_diag.analysis.acceptance"},
    }
    assert layer_violations(graph) == [
        "dflash_diag.converge.report -> dflash_diag.render.json",
        "dflash_diag.read.jsonl -> dflash_diag.render.safe_text",
        "dflash_diag.watch.view -> dflash_diag.watch.render",
    ]
