"""The README's code blocks, and a runner for its Python and IPython blocks (standard library only).

``tests/end_to_end/test_readme.py`` runs every block; ``.ci/quickstart.sh`` runs the quick start's
commands on a fresh clone and then this file's runner with the interpreter they installed::

    python tests/end_to_end/readme_blocks.py --quick-start README.md      # prints the quick start's commands
    python tests/end_to_end/readme_blocks.py README.md [--only DISTRIBUTIONS_JSON]

The runner executes the Python and IPython blocks in document order in one IPython shell, like the
cells of a notebook, in the current directory, and prints one JSON report: per block its name and
error (or null), then the ε the tour's connection ``conn`` spent. With ``--only`` it first hides every
installed module whose distribution is not in the given list, so the blocks run with exactly the
packages an install of those distributions provides. It exits 1 when a block fails. The one mark,
``<!-- readme: skip REASON -->``, must give its reason; a comment without one is no mark, so its block runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

BLOCK = re.compile(r"(?:<!-- readme: (?P<mark>\w+) (?P<reason>[^\n]*?\S) -->\n)?^```(?P<language>\w*)\n(?P<code>.*?)^```$", re.S | re.M)
QUICK_START = re.compile(r"^## Quick start\n(?P<section>.*?)^## ", re.S | re.M)


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int
    mark: str | None
    reason: str | None

    @property
    def name(self) -> str:
        return f"README.md:{self.line} ({self.language})"


def blocks(readme: Path, language: str | None = None) -> list[Block]:
    text = readme.read_text(encoding="utf-8")
    found = [
        Block(m["language"], m["code"], text.count("\n", 0, m.start("code")) + 1, m["mark"], m["reason"])
        for m in BLOCK.finditer(text)
    ]
    return [b for b in found if language is None or b.language == language]


def quick_start(readme: Path) -> list[Block]:
    """The quick start's shell blocks, in order, but the one that runs the test suite: the install and the demo."""
    text = readme.read_text(encoding="utf-8")
    section = QUICK_START.search(text)
    if section is None:
        raise SystemExit(f"{readme}: no '## Quick start' section")
    inside = {text.count("\n", 0, m.start("code")) + 1 for m in BLOCK.finditer(text) if section.start() <= m.start() < section.end("section")}
    return [b for b in blocks(readme, "bash") if b.line in inside and "pytest" not in b.code]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class Hidden(importlib.abc.MetaPathFinder):
    """Refuses to import a module whose installed distribution is not among ``allowed``."""

    def __init__(self, allowed: set[str]) -> None:
        self.owners = importlib.metadata.packages_distributions()
        self.allowed = allowed

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        owners = self.owners.get(name.partition(".")[0])
        if owners and not any(normalized(o) in self.allowed for o in owners):
            raise ModuleNotFoundError(f"No module named {name!r} (not installed by the quick start)", name=name)
        return None


def run(readme: Path) -> list[dict[str, object]]:
    """Every Python and IPython block not marked skip, in order, in one IPython shell."""
    from IPython.core.interactiveshell import InteractiveShell

    if not any(e.name == "dpsql" for e in importlib.metadata.entry_points(group="sqlalchemy.dialects")):
        from sqlalchemy.dialects import registry  # a source tree run against an older install

        registry.register("dpsql", "dpsql.sqlalchemy", "DpsqlDialect")
    shell = InteractiveShell.instance()
    report: list[dict[str, object]] = []
    for block in blocks(readme):
        if block.language not in ("python", "ipython") or block.mark == "skip":
            continue
        result = shell.run_cell(block.code, silent=True)
        error = result.error_before_exec or result.error_in_exec
        report.append({"name": block.name, "error": None if error is None else repr(error)})
    connection = shell.user_ns.get("conn")
    spent = connection.budget_spent().epsilon if connection is not None else None
    report.append({"spent": spent})
    return report


def main(arguments: list[str]) -> int:
    if arguments[:1] == ["--quick-start"]:
        print("\n".join(b.code for b in quick_start(Path(arguments[1]))))
        return 0
    readme = Path(arguments[0])
    if arguments[1:2] == ["--only"]:
        sys.meta_path.insert(0, Hidden({normalized(n) for n in json.loads(Path(arguments[2]).read_text(encoding="utf-8"))}))
    report = run(readme)
    print(json.dumps(report))
    failed = [r for r in report[:-1] if r["error"] is not None]
    for r in failed:
        print(f"{r['name']}: failed: {r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
