"""The ``dpsql`` command line.

::

    dpsql query --data adult.csv --schema adult.yaml --epsilon 0.5 "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
    dpsql query ... --ledger adult.ledger --budget-epsilon 2 --delta 1e-6    # spend from a persistent budget
    dpsql demo [--persons 20000] [--seed 0]
    dpsql ldp design --schema adult.yaml --epsilon 1 --output survey.json "SELECT ..."   # see dpsql.local_cli

The table is named after the data file (``adult.csv`` → ``adult``) unless ``--table`` says
otherwise. Without ``--ledger`` the budget is just this statement's cost. Errors print one line to
stderr and exit with status 2 (bad input) or 3 (budget exceeded).
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
from dpsql import local_cli

EXIT_BAD_INPUT = 2
EXIT_BUDGET = 3


def _table_name(data: str) -> str:
    name = re.sub(r"\W", "_", Path(data).stem)
    return name if name.isidentifier() else f"t_{name}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsql", description="Differentially private SQL over DuckDB.")
    commands = parser.add_subparsers(dest="command", required=True)
    query = commands.add_parser("query", help="answer one SELECT ... COUNT(*) ... GROUP BY statement privately")
    query.add_argument("sql", help="the statement (see grammar/dpsql.ebnf)")
    query.add_argument("--data", required=True, help="a .csv, .tsv, .json or .parquet file")
    query.add_argument("--schema", required=True, help="the table's schema, YAML or JSON")
    query.add_argument("--table", help="name of the table in the SQL (default: the data file's stem)")
    query.add_argument("--epsilon", type=float, help="this statement's cost (pure ε, or ρ = ε²/2 with Gaussian noise)")
    query.add_argument("--rho", type=float, help="this statement's zCDP cost (with --noise gaussian)")
    query.add_argument("--noise", choices=["laplace", "gaussian"], default="laplace")
    query.add_argument("--ledger", help="budget ledger file; reused across calls")
    query.add_argument("--budget-epsilon", type=float, help="total ε of a new ledger (default: this statement's cost)")
    query.add_argument("--delta", type=float, default=0.0, help="total δ of the budget (Gaussian noise needs δ > 0)")
    query.add_argument("--format", choices=["table", "csv", "json"], default="table")
    query.add_argument("--explain", action="store_true", help="also print how the statement was answered")
    tour = commands.add_parser("demo", help="generate a census-like table and run a tour of private queries")
    tour.add_argument("--persons", type=int, default=20_000, help="people in the generated table (≈2.5 rows each)")
    tour.add_argument("--seed", type=int, default=0)
    local_cli.add_commands(commands)
    return parser


def _budget(arguments: argparse.Namespace) -> dpsql.Budget | None:
    if arguments.budget_epsilon is not None:
        return dpsql.Budget(arguments.budget_epsilon, arguments.delta)
    if arguments.ledger and Path(arguments.ledger).exists():
        return None  # the ledger holds its budget
    if arguments.epsilon is None:
        raise dpsql.ProgrammingError("give --budget-epsilon (the total budget) when spending with --rho")
    return dpsql.Budget(arguments.epsilon, arguments.delta)


def _print_rows(cursor: dpsql.Cursor, output_format: str) -> None:
    names = [d[0] for d in cursor.description]
    rows = cursor.fetchall()
    errors = cursor.errors
    error_names = [f"{n}_stderr" for n, e in zip(names, errors[0] if errors else ()) if e is not None]
    records = [
        list(row) + [e for e in error if e is not None]
        for row, error in zip(rows, errors)
    ]
    header = names + error_names
    if output_format == "json":
        print(json.dumps([dict(zip(header, record)) for record in records], indent=2))
    elif output_format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(header)
        writer.writerows(records)
    else:
        cells = [[_cell(v) for v in record] for record in records]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for record in cells:
            print("  ".join(v.rjust(w) for v, w in zip(record, widths)))


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _query(arguments: argparse.Namespace) -> None:
    connection = dpsql.connect(budget=_budget(arguments), ledger=arguments.ledger, noise=arguments.noise)
    with connection:
        connection.register(arguments.table or _table_name(arguments.data), arguments.data, schema=arguments.schema)
        cursor = connection.cursor()
        cursor.execute(arguments.sql, epsilon=arguments.epsilon, rho=arguments.rho)
        _print_rows(cursor, arguments.format)
        remaining = connection.budget_remaining()
        print(f"budget left: epsilon = {remaining.epsilon:.6g}", file=sys.stderr)
        if arguments.explain:
            print(cursor.explanation)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        if arguments.command == "demo":
            from dpsql import demo  # each subcommand imports what it runs: `dpsql --help` stays fast

            demo.tour(arguments.persons, arguments.seed)
        elif arguments.command == "ldp":
            local_cli.run(arguments, _print_rows)
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
