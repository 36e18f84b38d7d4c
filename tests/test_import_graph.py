"""The package's import graph, read with ``ast`` (every import at any depth:
inside functions and ``TYPE_CHECKING`` blocks too), against DESIGN's rooms:

- no two files import each other, directly or around a circle;
- ``core/`` (the lease as data and rules) imports nothing from ``stores/``,
  ``keeper/``, ``lock``, the faces, the console, the CLI or the package's
  top module;
- ``stores/`` imports only ``core/`` (and other stores);
- ``keeper/`` (the lease's lifetime) imports no face, console or CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lease_integrations"
NAME = PACKAGE.name
FACES = ("airflow", "prefect", "console", "cli", "demo")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports."""
    here = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]

    def resolve(module: str) -> str | None:
        while module and module not in known:
            module = module.rsplit(".", 1)[0] if "." in module else ""
        return module or None

    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {resolve(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{package}.{node.module}" if node.module else package
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else resolve(base))
    return {m for m in found if m is not None and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def room(module: str) -> str:
    """The room a module lives in: core, stores, keeper, lock, a face, or top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "top"


def test_no_two_files_import_each_other_around_a_circle() -> None:
    assert cycles(graph()) == []


def test_each_room_imports_only_what_it_may() -> None:
    allowed = {
        "core": {"core"},
        "stores": {"core", "stores"},
        "keeper": {"core", "stores", "keeper"},
    }
    wrong = sorted(f"{module} imports {target}"
                   for module, targets in graph().items() if room(module) in allowed
                   for target in targets if room(target) not in allowed[room(module)])
    assert wrong == []


def test_the_graph_reader_sees_what_it_judges() -> None:
    """The reader itself: the lock imports the core and the keeper, the core
    imports none of them (a reader that found nothing would pass the rest)."""
    edges = graph()
    assert {f"{NAME}.core.lease", f"{NAME}.keeper.client"} <= edges[f"{NAME}.lock"]
    assert f"{NAME}.core.errors" in edges[f"{NAME}.core.record"]
    assert room(f"{NAME}.keeper.process") == "keeper" and room(NAME) == "top"
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
