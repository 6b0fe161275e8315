"""``dpsql shell``: an interactive SQL prompt over one registered table.

::

    $ dpsql shell --data adult.csv --schema adult.yaml --budget-epsilon 2 --epsilon 0.25
    dpsql> SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex;
    sex        n  n_stderr
    F    1234.00      5.66
    ...
    -- spent epsilon = 0.25; budget left: epsilon = 1.75 of 2

A statement ends with ``;`` (it may span lines). After each one the rows are printed with their
standard errors, then the budget line. ``EXPLAIN <statement>;`` shows the plan and spends nothing.
Dot commands: ``.epsilon X`` (the cost of the next statements), ``.budget``, ``.tables``,
``.schema``, ``.help``, ``.quit``. Errors print one line and the prompt continues. On a terminal the
input has readline editing and a history kept in the user data directory (:mod:`dpsql.userdata`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

import dpsql
from dpsql.accountant import Spent

RowPrinter = Callable[[dpsql.Cursor, str], None]
PROMPT, CONTINUATION = "dpsql> ", "   ...> "
HELP = """Statements end with ';'. EXPLAIN <statement>; shows the plan without spending.
  .epsilon X   the privacy cost of each following statement (now {epsilon})
  .budget      the budget spent and left
  .tables      the registered table and its columns' domains
  .help        this text
  .quit        leave (also Ctrl-D)"""


class Shell:
    """Reads statements from ``lines``, runs them on ``connection`` at ``epsilon`` each, and writes
    rows, budget lines and one-line errors to ``out``."""

    def __init__(self, connection: dpsql.Connection, epsilon: float | None, print_rows: RowPrinter, out: TextIO = sys.stdout) -> None:
        self.connection = connection
        self.epsilon = epsilon
        self.print_rows = print_rows
        self.out = out
        self.pending: list[str] = []  # lines of a statement not ended by ';' yet

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def feed(self, line: str) -> bool:
        """Take one input line: run a dot command or, once a statement ends with ';', the statement.
        False when the shell should stop."""
        stripped = line.strip()
        if not self.pending and stripped.startswith("."):
            return self.command(stripped)
        if stripped:
            self.pending.append(line.rstrip())
        if self.pending and stripped.endswith(";"):
            sql = "\n".join(self.pending).rstrip().rstrip(";")
            self.pending = []
            self.statement(sql)
        return True

    def prompt(self) -> str:
        return CONTINUATION if self.pending else PROMPT

    def command(self, text: str) -> bool:
        """Run a dot command; False when the shell should stop."""
        name, _, argument = text.partition(" ")
        if name in (".quit", ".exit"):
            return False
        if name == ".epsilon":
            try:
                dpsql.accountant.Cost.pure(float(argument))
            except (ValueError, dpsql.Error):
                self.say(f"dpsql: .epsilon needs a positive number, got {argument.strip()!r}")
                return True
            self.epsilon = float(argument)
            self.say(f"-- each statement now costs epsilon = {self.epsilon:g}")
        elif name == ".budget":
            self.say(self.budget_line(None))
        elif name in (".tables", ".schema"):
            for table in self.connection.tables().values():
                self.say(f"{table.name}: privacy unit {table.schema.privacy_unit or '(one row)'}, "
                         f"{table.schema.max_rows_per_unit} row(s) per unit")
                for column in table.column_types:
                    self.say(f"  {column}: {table.schema.column(column).describe()}")
        elif name == ".help":
            self.say(HELP.format(epsilon="not set" if self.epsilon is None else f"{self.epsilon:g}"))
        else:
            self.say(f"dpsql: unknown command {name!r}; .help lists the commands")
        return True

    def statement(self, sql: str) -> None:
        before = self.connection.budget_spent()
        cursor = self.connection.cursor()
        try:
            cursor.execute(sql, epsilon=self.epsilon)
            if _is_explain(cursor):
                self.say(cursor.explanation)  # one line per row: section: name = value (detail)
            else:
                self.print_rows(cursor, "table")
        except dpsql.Error as error:
            self.say(f"dpsql: {type(error).__name__}: {error}")
        self.say(self.budget_line(before))

    def budget_line(self, before: Spent | None) -> str:
        spent = self.connection.budget_spent()
        left = self.connection.budget_remaining()
        total = self.connection.budget.epsilon
        head = "" if before is None else f"spent epsilon = {spent.epsilon - before.epsilon:.6g}; "
        return f"-- {head}budget left: epsilon = {left.epsilon:.6g} of {total:g} ({spent.statements} charge(s))"


def _is_explain(cursor: dpsql.Cursor) -> bool:
    from dpsql.explain import DESCRIPTION  # loaded with the engine by the statement that just ran

    return tuple(cursor.description or ()) == DESCRIPTION


def run_lines(shell: Shell, lines: Iterable[str]) -> None:
    """Feed lines that do not come from a terminal (a pipe, a file): no prompt, no history."""
    for line in lines:
        if not shell.feed(line):
            return


def run_terminal(shell: Shell, history: Path | None) -> None:
    """Prompt at a terminal with readline editing and history; Ctrl-C drops the pending statement,
    Ctrl-D leaves."""
    try:
        import readline
    except ImportError:  # no readline on this platform: plain input()
        readline = None  # type: ignore[assignment]
    if readline is not None and history is not None and history.exists():
        readline.read_history_file(history)
    try:
        while True:
            try:
                line = input(shell.prompt())
            except KeyboardInterrupt:
                shell.say("")
                shell.pending = []
                continue
            except EOFError:
                shell.say("")
                return
            if not shell.feed(line):
                return
    finally:
        if readline is not None and history is not None:
            readline.write_history_file(history)
