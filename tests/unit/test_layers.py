"""The package's layers read one way: no module imports a layer above its own, and no import
cycle exists between modules. Every import statement counts, the ones inside functions too
(a lazy import is still a dependency; only plug-ins found by import path are not:
surge/config/algorithms.py, surge/workers/graph.py `WORKER_KINDS`)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SURGE = Path(__file__).resolve().parents[2] / "surge"

LAYERS = [
    # the package root and its small helpers
    ("", "errors", "seeds", "threads", "imports", "cache", "devices"),
    ("config",),  # the typed config, presets, validation, the algorithm registry
    ("tracking",),  # run directories, metrics, checkpoints, progress
    ("envs",),  # env adapters, groups, spaces
    ("models",),  # networks, acting policies, weights, normalisation
    ("rewards",),  # rewards computed by models: reward maths, scorers
    ("algos",),  # the maths of learning: losses, advantages, optimisers, replay maths
    ("streams",),  # transport, blocks and the streams between workers
    ("llm",),  # language models, generation, tasks
    ("evaluation",),  # what an evaluation plays
    ("workers",),  # worker kinds, the graph as data, the trainer chassis
    ("learners",),  # each algorithm's learner inside the chassis
    ("recipes",),  # each algorithm as a plug-in, and its graph
    ("runtime",),  # the controller and the runtimes that launch graphs
    ("population",),  # population-based training: members as runs, PBT's decisions
    ("cli", "__main__", "api"),  # the command, and the Python API (surge/api.py)
]
"""Bottom to top: a module may import its own layer and the ones below."""

FACADE = ("surge", "surge.api")
"""The one edge the walk leaves out: the package root re-exports the Python API
(`surge.train`, `surge.load`), the top layer. `import surge` still loads nothing above the
bottom layer, because surge/api.py imports all else inside its functions (checked below)."""


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    raise AssertionError(f"{module}: no layer holds `surge.{part}`; add it to LAYERS")


def _modules() -> dict[str, Path]:
    found = {}
    for path in SURGE.rglob("*.py"):
        parts = path.relative_to(SURGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the surge modules it imports (any import statement, anywhere in it)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]  # `from m import name` names m
                internal = target in modules and target.startswith("surge")
                if internal and target != name and (name, target) != FACADE:
                    edges[name].add(target)
    return edges


def test_no_module_imports_a_layer_above_its_own() -> None:
    edges = _imports(_modules())
    upward = sorted(
        f"{a} -> {b}" for a, targets in edges.items() for b in targets if _layer(b) > _layer(a)
    )
    assert not upward, "imports back up a layer:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    edges = _imports(_modules())
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(_modules()):
        if module not in index:
            visit(module)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_api_imports_only_the_bottom_layer_at_its_top_level() -> None:
    """What makes the FACADE edge harmless: the module-level imports of surge/api.py, which
    `import surge` runs, stay in the bottom layer (and `surge.config`, the subpackage that
    `surge.config(...)` calls)."""
    tree = ast.parse((SURGE / "api.py").read_text())
    top: list[str] = []
    for node in tree.body:  # not ast.walk: imports inside functions run when they are called
        if isinstance(node, ast.Import):
            top += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("surge"):
            top += [f"{node.module}.{a.name}" for a in node.names]
    modules = _modules()
    for target in top:
        while target not in modules and "." in target:
            target = target.rpartition(".")[0]
        if target.startswith("surge"):
            assert _layer(target) == 0 or target == "surge.config", target


def test_the_walker_sees_lazy_imports() -> None:
    """The check above is only as good as the walk: a function-level import is found."""
    edges = _imports(_modules())
    # surge/cli.py imports the controller inside its command handlers only
    assert "surge.runtime.controller" in edges["surge.cli"]
