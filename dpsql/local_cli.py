"""``dpsql ldp``: local differential privacy surveys from the command line (see :mod:`dpsql.local`).

::

    dpsql ldp design --schema people.yaml --epsilon 1 --output survey.json "SELECT sex, COUNT(*) FROM people GROUP BY sex"
    dpsql ldp simulate --survey survey.json --data people.csv --output reports.json     # evaluation only
    dpsql ldp answer --survey survey.json --reports reports.json "SELECT sex, COUNT(*) FROM people GROUP BY sex"

``design`` writes the survey JSON (the mechanism under ``"mechanism"``, with the statements and the
domain of the cells): what every client downloads. ``simulate`` writes a JSON list of reports, one per
unit of the table, randomized from OS entropy (it takes no seed: the data is real, and a seed would
let anyone undo the randomization); ``answer`` reads such a list and prints the rows with their
standard errors. ``--seed`` of ``design`` only seeds the optimizer, which never sees data.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dpsql.errors import DataError, ProgrammingError

if TYPE_CHECKING:
    from dpsql.connection import ResultCursor

RowPrinter = Callable[["ResultCursor", str], None]


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``ldp design|simulate|answer`` to the ``dpsql`` command line."""
    ldp = commands.add_parser("ldp", help="local differential privacy: design a survey, simulate it, answer SQL from reports")
    actions = ldp.add_subparsers(dest="ldp_command", required=True)
    design = actions.add_parser("design", help="optimize an ε-LDP survey for statements and write its JSON")
    design.add_argument("statements", nargs="+", help="SELECT ... COUNT(*) ... GROUP BY statements over one table")
    design.add_argument("--schema", required=True, help="the table's schema, YAML or JSON (max_rows_per_unit: 1)")
    design.add_argument("--epsilon", type=float, required=True, help="what each unit's report spends (ε-LDP)")
    design.add_argument("--output", help="file for the survey JSON (default: standard output)")
    design.add_argument("--seed", type=int, help="seed of the optimizer (default: random)")
    design.add_argument("--restarts", type=int, default=3, help="optimizer runs, the best kept (default 3)")
    design.add_argument("--iterations", type=int, default=400, help="gradient steps per run (default 400)")
    simulate = actions.add_parser("simulate", help="randomize every unit of a table through a survey (evaluation)")
    simulate.add_argument("--survey", required=True, help="the survey JSON written by 'dpsql ldp design'")
    simulate.add_argument("--data", required=True, help="a .csv, .tsv, .json or .parquet file")
    simulate.add_argument("--output", help="file for the JSON list of reports (default: standard output)")
    answer = actions.add_parser("answer", help="answer a statement from collected reports")
    answer.add_argument("sql", help="the statement, over the survey's columns")
    answer.add_argument("--survey", required=True, help="the survey JSON written by 'dpsql ldp design'")
    answer.add_argument("--reports", required=True, help="a JSON list of reports")
    answer.add_argument("--format", choices=["table", "csv", "json"], default="table")


def run(arguments: argparse.Namespace, print_rows: RowPrinter) -> None:
    """Run the ``ldp`` action named in ``arguments`` (``print_rows`` prints a cursor's rows)."""
    from dpsql import local  # the survey machinery (the planner's LDP optimizer, DuckDB) only when used

    if arguments.ldp_command == "design":
        survey = local.design(
            arguments.schema,
            arguments.statements,
            arguments.epsilon,
            seed=arguments.seed,
            restarts=arguments.restarts,
            iterations=arguments.iterations,
        )
        _write(arguments.output, survey.to_json())
    elif arguments.ldp_command == "simulate":
        survey = local.Survey.from_json(_read(arguments.survey))
        _write(arguments.output, json.dumps(survey.simulate(arguments.data)))
    else:
        survey = local.Survey.from_json(_read(arguments.survey))
        try:
            reports = json.loads(_read(arguments.reports))
        except json.JSONDecodeError as error:
            raise DataError(f"{arguments.reports!r} is not valid JSON: {error}") from None
        if not isinstance(reports, list):
            raise DataError(f"{arguments.reports!r} must hold a JSON list of reports")
        cursor = survey.cursor(reports)
        cursor.execute(arguments.sql)
        print_rows(cursor, arguments.format)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ProgrammingError(f"cannot read {path!r}: {error.strerror}") from None


def _write(path: str | None, text: str) -> None:
    if path is None:
        print(text)
        return
    try:
        Path(path).write_text(text + "\n", encoding="utf-8")
    except OSError as error:
        raise ProgrammingError(f"cannot write {path!r}: {error.strerror}") from None
