"""The layering the architecture promises (docs/architecture.md): ``planner`` never imports ``dpsql``,
``dpsql`` uses the planner's public API only (``planner`` and its ``planner.ldp`` subpackage), and no module of either package imports, directly or through others, a module that imports it back —
counting imports inside functions too (a lazy import is still a dependency), but not imports made only
for type checkers (``if TYPE_CHECKING:``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dpsql", "planner")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:``."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return hidden


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports (a ``from package import submodule`` names the submodule)."""
    tree = ast.parse(path.read_text())
    hidden = _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            names = submodules if all(name in modules for name in submodules) else [base]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {module: _imported(module, path, modules) for module, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), a package's ``__init__``
    re-exporting its own submodules excepted (importing a submodule runs its package first)."""
    edges = {m: {t for t in targets if not (m.startswith(t + ".") and "." not in m[len(t) + 1 :])} for m, targets in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_planner_never_imports_dpsql() -> None:
    offending = {m: sorted(t for t in targets if t.split(".")[0] == "dpsql") for m, targets in _graph().items() if m.split(".")[0] == "planner"}
    assert {m: t for m, t in offending.items() if t} == {}


PLANNER_PUBLIC = {"planner", "planner.ldp"}


def test_dpsql_uses_the_planner_public_api_only() -> None:
    graph = _graph()
    offending = {m: sorted(t for t in targets if t.startswith("planner") and t not in PLANNER_PUBLIC) for m, targets in graph.items() if m.startswith("dpsql")}
    assert {m: t for m, t in offending.items() if t} == {}
    broken = {m: set(t) for m, t in graph.items()}
    broken["dpsql.explain"].add("planner.strategies.direct")  # the import this check removed
    assert any(t == "planner.strategies.direct" for t in broken["dpsql.explain"] if t not in PLANNER_PUBLIC)


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_sees_a_cycle_and_a_lazy_import() -> None:
    """The check itself can fail: a function-level import back into an importer is a cycle."""
    graph = _graph()
    assert "dpsql.demo" in graph["dpsql.cli"]  # imported inside a function
    assert "dpsql.serve.server" not in graph["dpsql.serve.session"]  # imported for type checkers only
    broken = {m: set(t) for m, t in graph.items()}
    broken["planner.strategies.composite"].add("planner.select")  # the lazy import this layering removed
    assert ["planner.select", "planner.strategies.composite"] in _cycles(broken)
