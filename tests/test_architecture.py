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


# -- One module per aggregate kind: no type tests of aggregate items outside dpsql/sql/kinds -------------------


def _item_classes() -> dict[str, set[str]]:
    """Defining module → names of the SELECT item classes the aggregate kinds register (``dpsql.sql.kinds.KINDS``)."""
    from dpsql.sql import kinds

    found: dict[str, set[str]] = {}
    for kind in kinds.KINDS:
        for item_type in kind.ITEMS:
            found.setdefault(item_type.__module__, set()).add(item_type.__name__)
    return {module: names | _tuples_of(_modules()[module].read_text(), names) for module, names in found.items()}


def _tuples_of(source: str, names: set[str]) -> set[str]:
    """Module-level names bound to a tuple, list or set naming some of ``names`` (``MEASURED = (Count, …)``)."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
            if any(isinstance(e, ast.Name) and e.id in names for e in node.value.elts):
                found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found


def _item_type_tests(source: str, module: str, classes: dict[str, set[str]]) -> list[int]:
    """Lines of ``source`` (module ``module``) that test a value against an aggregate item class: ``isinstance`` /
    ``issubclass``, ``type(x) is / == / in``, or a ``case`` class pattern — naming the class directly, through an
    import alias, as an attribute of its module, or through a module-level tuple of them."""
    tree = ast.parse(source)
    names = set(classes.get(module, ()))  # the defining module's own names
    modules: set[str] = set()  # local names bound to a defining module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if alias.name in classes.get(node.module, ()):
                    names.add(alias.asname or alias.name)
                if f"{node.module}.{alias.name}" in classes:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(alias.asname or alias.name for alias in node.names if alias.name in classes)

    def names_a_class(expression: ast.AST) -> bool:
        for inner in ast.walk(expression):
            if isinstance(inner, ast.Name) and inner.id in names:
                return True
            if isinstance(inner, ast.Attribute) and ast.unparse(inner.value) in modules and inner.attr in classes.get(_module_of(inner.value), ()):
                return True
        return False

    def _module_of(value: ast.AST) -> str:
        written = ast.unparse(value)
        return next((m for m in classes if m == written or m.rpartition(".")[2] == written), written)

    names |= _tuples_of(source, names)  # this module's own tuples of them
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            tested = names_a_class(node.args[1])
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and ast.unparse(node.left.func) == "type":
            tested = any(names_a_class(c) for c in node.comparators)
        elif isinstance(node, ast.MatchClass):
            tested = names_a_class(node.cls)
        else:
            continue
        if tested:
            lines.append(node.lineno)
    return lines


def test_no_module_outside_the_kinds_tests_aggregate_item_types() -> None:
    """A new aggregate kind is one module of dpsql/sql/kinds: every other module asks the kind
    (``kinds.item_kind(item)``, ``kinds.measured(item)``) instead of testing the item's class."""
    classes = _item_classes()
    assert {"Count", "Aggregate", "Quantile"} <= set().union(*classes.values())
    kinds_package = ROOT / "dpsql" / "sql" / "kinds"
    found = {}
    for module, path in _modules().items():
        if module.startswith("dpsql.") and kinds_package not in path.parents:
            lines = _item_type_tests(path.read_text(), module, classes)
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}


def test_the_item_type_check_sees_every_spelling() -> None:
    """The check itself can fail: each way of testing an item's class is found, a sqlglot ``exp.Count`` is not."""
    classes = _item_classes()
    broken = '''
from sqlglot import exp
from dpsql.sql import parse
from dpsql.sql.parse import Aggregate as A, Count, GroupKey
import dpsql.sql.parse
from dpsql.sql.parse import MEASURED
BOTH = (Count, A)

def f(item, node):
    isinstance(node, exp.Count)
    isinstance(item, GroupKey)
    isinstance(item, Count)
    isinstance(item, (int, A))
    isinstance(item, parse.Quantile)
    isinstance(item, dpsql.sql.parse.Quantile)
    isinstance(item, BOTH)
    type(item) is Count
    isinstance(item, MEASURED)
    match item:
        case A(function="SUM"):
            pass
'''
    assert _item_type_tests(broken, "dpsql.somewhere", classes) == [12, 13, 14, 15, 16, 17, 20]
    assert _item_type_tests("isinstance(item, Count)\n", "dpsql.sql.parse", classes) == [1]
    with_measured = {"dpsql.sql.parse": classes["dpsql.sql.parse"] | {"MEASURED"}}  # main's tuple of them, now gone
    assert _item_type_tests(broken, "dpsql.somewhere", with_measured) == [12, 13, 14, 15, 16, 17, 18, 20]


def test_every_registered_kind_implements_the_whole_protocol() -> None:
    """A kind module missing a stage's function would fail only when a statement of that kind reaches the stage."""
    from dpsql.sql import kinds
    from dpsql.sql.kinds.protocol import Kind

    constants = set(Kind.__annotations__)
    functions = {name for name, value in vars(Kind).items() if callable(value) and not name.startswith("_")}
    assert {"ITEMS", "VALUES"} <= constants and {"parse", "block", "moment_need", "release", "explain"} <= functions
    missing = {
        kind.__name__: sorted(n for n in constants | functions if not hasattr(kind, n) or (n in functions and not callable(getattr(kind, n))))
        for kind in kinds.KINDS  # type: ignore[attr-defined]  # modules
    }
    assert missing == {name: [] for name in missing}
