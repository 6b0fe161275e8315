"""The ``dpsql`` command line.

::

    dpsql query --data adult.csv --schema adult.yaml --epsilon 0.5 "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
    dpsql query ... --budget-epsilon 2 --delta 1e-6      # the first call on a data set sets its total budget
    dpsql query ... --ledger adult.ledger                # spend from a ledger file of your choice
    dpsql shell --data adult.csv --schema adult.yaml --epsilon 0.25   # an interactive prompt (dpsql.shell)
    dpsql demo [--persons 20000] [--seed 0] [--write DIR]
    dpsql ldp design --schema adult.yaml --epsilon 1 --output survey.json "SELECT ..."   # see dpsql.local_cli
    dpsql --version
    dpsql serve --config server.yaml [--host 127.0.0.1] [--port 5433]    # a PostgreSQL-wire service (docs/serve.md)
    dpsql serve --demo [--port 5433]                                       # the demo table for one analyst
    dpsql hash-password [--iterations 4096]                                # a password verifier for server.yaml

The table is named after the data file (``adult.csv`` → ``adult``) unless ``--table`` says
otherwise. Without ``--ledger``, ``query`` and ``shell`` spend from the user's ledger of that data
file and schema (:mod:`dpsql.userdata`: under ``$XDG_DATA_HOME/dpsql/ledgers``), so the budget
carries over between calls; the first call on a data set gives its total with ``--budget-epsilon``.
Errors print one line to stderr and exit with status 2 (bad input) or 3 (budget exceeded).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import dpsql
from dpsql.frame_source import ERROR_SUFFIX, error_layout
from dpsql import local_cli

EXIT_BAD_INPUT = 2
EXIT_BUDGET = 3


def _table_name(data: str) -> str:
    name = re.sub(r"\W", "_", Path(data).stem)
    return name if name.isidentifier() else f"t_{name}"


class _Version(argparse.Action):
    """``--version``: read from the package metadata only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print dpsql's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from dpsql.version import package_version

        print(f"dpsql {package_version()}")
        parser.exit()


def _add_source_arguments(command: argparse.ArgumentParser) -> None:
    """The data, its schema and the budget, shared by ``query`` and ``shell``."""
    command.add_argument("--data", required=True, help="a .csv, .tsv, .json or .parquet file")
    command.add_argument("--schema", required=True, help="the table's schema, YAML or JSON")
    command.add_argument("--table", help="name of the table in the SQL (default: the data file's stem)")
    command.add_argument("--noise", choices=["laplace", "gaussian"], default="laplace")
    command.add_argument("--ledger", help="budget ledger file (default: the user's ledger of this data file and schema)")
    command.add_argument("--budget-epsilon", type=float, help="total ε of a new ledger (needed on the first call)")
    command.add_argument("--delta", type=float, default=0.0, help="total δ of a new ledger (Gaussian noise needs δ > 0)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsql", description="Differentially private SQL over DuckDB.")
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True)
    query = commands.add_parser("query", help="answer one SQL statement privately (COUNT, SUM, AVG, quantiles, GROUP BY, CUBE, …)")
    query.add_argument("sql", help="the statement (the SQL reference: docs/sql.md)")
    _add_source_arguments(query)
    query.add_argument("--epsilon", type=float, help="this statement's cost (pure ε, or ρ = ε²/2 with Gaussian noise)")
    query.add_argument("--rho", type=float, help="this statement's zCDP cost (with --noise gaussian)")
    query.add_argument("--format", choices=["table", "csv", "json"], default="table")
    query.add_argument("--explain", action="store_true", help="also print how the statement was answered")
    shell = commands.add_parser("shell", help="an interactive SQL prompt over one table (history, EXPLAIN, budget after each statement)")
    _add_source_arguments(shell)
    shell.add_argument("--epsilon", type=float, help="the cost of each statement (change it with .epsilon X)")
    tour = commands.add_parser("demo", help="generate a census-like table and run a tour of private queries")
    tour.add_argument("--persons", type=int, default=20_000, help="people in the generated table (≈2.5 rows each)")
    tour.add_argument("--seed", type=int, default=0)
    tour.add_argument("--write", metavar="DIR", help="write the README tour's demo files (adult.csv, adult.yaml) into DIR instead")
    local_cli.add_commands(commands)
    serve = commands.add_parser("serve", help="serve tables to analysts over the PostgreSQL protocol (docs/serve.md)")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="the server's YAML configuration (tables, analysts, budgets, TLS)")
    source.add_argument("--demo", action="store_true", help="serve the generated census table to one analyst 'demo'")
    serve.add_argument("--host", help="address to listen on (default: the configuration's, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: the configuration's, else 5433; 0: any free port)")
    hashing = commands.add_parser("hash-password", help="print the SCRAM-SHA-256 verifier of a password, for server.yaml")
    hashing.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations (default 4096, as PostgreSQL)")
    return parser


def _ledger(arguments: argparse.Namespace) -> Path:
    if arguments.ledger:
        return Path(arguments.ledger)
    from dpsql import userdata

    return userdata.default_ledger(arguments.table or _table_name(arguments.data), arguments.data, arguments.schema)


def _budget(arguments: argparse.Namespace, ledger: Path) -> dpsql.Budget | None:
    if arguments.budget_epsilon is not None:
        return dpsql.Budget(arguments.budget_epsilon, arguments.delta)
    if ledger.exists():
        return None  # the ledger holds its budget
    raise dpsql.ProgrammingError(
        f"no budget yet for this data set: give its total with --budget-epsilon (and --delta), stored in {ledger}"
    )


def _connect(arguments: argparse.Namespace, ledger: Path) -> dpsql.Connection:
    """A connection spending from ``ledger``, with the data file registered."""
    connection = dpsql.connect(budget=_budget(arguments, ledger), ledger=ledger, noise=arguments.noise)
    try:
        connection.register(arguments.table or _table_name(arguments.data), arguments.data, schema=arguments.schema)
    except dpsql.Error:
        connection.close()
        raise
    return connection


def _print_rows(cursor: dpsql.Cursor, output_format: str) -> None:
    """The rows, each released column followed by its ``<column>_stderr`` (NULL where a row has none)."""
    names = [str(d[0]) for d in cursor.description]
    rows = cursor.fetchall()
    errors = cursor.errors
    layout = error_layout(cursor.description, errors)
    header = [names[i] + ERROR_SUFFIX if is_error else names[i] for i, is_error in layout]
    records = [[error[i] if is_error else row[i] for i, is_error in layout] for row, error in zip(rows, errors)]
    if output_format == "json":
        print(json.dumps([dict(zip(header, record)) for record in records], indent=2, default=str))  # dates as ISO text
    elif output_format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(header)
        writer.writerows(records)
    else:
        cells = [[_cell(v) for v in record] for record in records]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
        numeric = [all(isinstance(r[i], (int, float)) for r in records if r[i] is not None) for i in range(len(header))]

        def line(texts: list[str]) -> str:  # numbers right-aligned, text left-aligned, as psql does
            return "  ".join(t.rjust(w) if n else t.ljust(w) for t, w, n in zip(texts, widths, numeric)).rstrip()

        print(line(header))
        for record in cells:
            print(line(record))


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _query(arguments: argparse.Namespace) -> None:
    ledger = _ledger(arguments)
    with _connect(arguments, ledger) as connection:
        cursor = connection.cursor()
        cursor.execute(arguments.sql, epsilon=arguments.epsilon, rho=arguments.rho)
        _print_rows(cursor, arguments.format)
        remaining = connection.budget_remaining()
        print(f"budget left: epsilon = {remaining.epsilon:.6g} of {connection.budget.epsilon:g} (ledger {ledger})", file=sys.stderr)
        if arguments.explain:
            print(cursor.explanation)


def _shell(arguments: argparse.Namespace) -> None:
    from dpsql import shell, userdata

    with _connect(arguments, _ledger(arguments)) as connection:
        session = shell.Shell(connection, arguments.epsilon, _print_rows)
        if sys.stdin.isatty():
            session.say(f"dpsql {dpsql.__version__}: table {', '.join(connection.tables())}; .help for commands, Ctrl-D to leave")
            session.say(session.budget_line(None))
            shell.run_terminal(session, userdata.history_file())
        else:
            shell.run_lines(session, sys.stdin)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        if arguments.command == "demo":
            from dpsql import demo  # each subcommand imports what it runs: `dpsql --help` stays fast

            if arguments.write:
                for path in demo.write_files(arguments.write, arguments.seed):
                    print(path)
                return 0
            demo.tour(arguments.persons, arguments.seed)
        elif arguments.command == "shell":
            _shell(arguments)
        elif arguments.command == "ldp":
            local_cli.run(arguments, _print_rows)
        elif arguments.command in ("serve", "hash-password"):
            from dpsql.serve import cli as serve_cli  # imported here: pg-mimic is an optional dependency

            return serve_cli.run(arguments)
        else:
            _query(arguments)
    except dpsql.BudgetExceededError as error:
        print(f"dpsql: BudgetExceededError: {error}", file=sys.stderr)
        return EXIT_BUDGET
    except dpsql.Error as error:
        print(f"dpsql: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
