"""The grammar corpus: every accepted statement parses and compiles; every rejected one raises the
expected class with a message naming the clause at fault and saying what is supported — and
charges nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dpsql
from dpsql.sql.parse import And, Between, Comparison, Count, GroupKey, InList, IsNull, Not, Or, Query
from dpsql.sql.statement import OrderKey, parse_statement

GRAMMAR = Path(__file__).resolve().parents[2] / "grammar"

ACCEPTED = sorted((GRAMMAR / "accepted").glob("*.sql"))
REJECTED = sorted((GRAMMAR / "rejected").glob("*.sql"))
EXPECT = re.compile(r"^-- expect: (\w+) (.+)$")


def parse(sql: object, parameters: object = None) -> Query:
    """The query of a plain statement's one grouping set."""
    return parse_statement(sql, parameters).branches[0].query  # type: ignore[arg-type]


def test_corpus_is_not_empty() -> None:
    assert len(ACCEPTED) >= 20 and len(REJECTED) >= 30
    assert (GRAMMAR / "dpsql.ebnf").read_text().count("=") > 10


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: p.stem)
def test_accepted_statement_compiles(path: Path, adult_connection: dpsql.Connection) -> None:
    from dpsql.sql.compile import compile_query

    table = adult_connection._session.table("adult")
    for branch in parse_statement(path.read_text()).branches:
        compiled = compile_query(branch.query, table.schema, tuple(table.column_types))
        assert compiled.group_cells >= 1


SUGGESTIONS = ("declare", "use ", "instead", "pass ", "write ", "check ", "add ", "rename", "drop ", "aggregate ", "list ",
               "ask ", "read ", "send ", "put ", "give ", "group by ", "join ")  # what to write instead


@pytest.mark.parametrize("path", REJECTED, ids=lambda p: p.stem)
def test_rejected_statement_names_the_clause(path: Path, adult_connection: dpsql.Connection) -> None:
    assert_refused(path, adult_connection)


def assert_refused(path: Path, connection: dpsql.Connection) -> None:
    """A rejected corpus statement raises its ``-- expect:`` class, with the fragment and a suggestion, and charges nothing."""
    header, sql = path.read_text().split("\n", 1)
    match = EXPECT.match(header)
    assert match, f"{path.name} must start with '-- expect: <ErrorClass> <clause>'"
    expected_class = getattr(dpsql, match.group(1))
    assert expected_class in (dpsql.NotSupportedError, dpsql.ProgrammingError)
    before = connection.budget_remaining()
    with pytest.raises(expected_class) as raised:
        connection.cursor().execute(sql, epsilon=0.5)
    assert type(raised.value) is expected_class
    message = str(raised.value)
    assert match.group(2).lower() in message.lower(), message
    assert any(s in message.lower() for s in SUGGESTIONS), f"no suggestion in: {message}"
    assert connection.budget_remaining() == before


def test_parse_builds_the_query_ir() -> None:
    statement = parse_statement(
        "SELECT sex AS s, COUNT(*) AS n, COUNT(job) FROM adult WHERE NOT (age BETWEEN 20 AND 30) "
        "AND (race IN (1, 2) OR job IS NULL) AND 5 < age GROUP BY sex ORDER BY n DESC, s LIMIT 3 OFFSET 1"
    )
    query = statement.branches[0].query
    assert query.table == "adult"
    assert query.select == (GroupKey("s", "sex"), Count("n", None), Count("COUNT(job)", "job"))
    assert query.group_by == ("sex",)
    assert query.where == And(
        (
            Not(Between("age", 20, 30)),
            Or((InList("race", (1, 2)), IsNull("job"))),
            Comparison("age", ">", 5),
        )
    )
    assert statement.order_by == (OrderKey(1, True), OrderKey(0, False))
    assert (statement.limit, statement.offset) == (3, 1)
    assert query.columns() == ("sex", "job", "age", "race")


def test_parameters_bind_in_order() -> None:
    query = parse("SELECT COUNT(*) FROM t WHERE age > ? AND sex = ? AND x = ?", (-3, "F", 2.5))
    assert query.where == And((Comparison("age", ">", -3), Comparison("sex", "=", "F"), Comparison("x", "=", 2.5)))
    with pytest.raises(dpsql.ProgrammingError, match="1 '\\?' placeholder.*2 parameter"):
        parse("SELECT COUNT(*) FROM t WHERE age > ?", (1, 2))
    with pytest.raises(dpsql.ProgrammingError, match="sequence"):
        parse("SELECT COUNT(*) FROM t WHERE age > ?", "1")
    with pytest.raises(dpsql.ProgrammingError, match="unsupported parameter type"):
        parse("SELECT COUNT(*) FROM t WHERE age > ?", (object(),))


def test_non_string_operation_is_a_programming_error() -> None:
    with pytest.raises(dpsql.ProgrammingError, match="SQL string"):
        parse(42)  # type: ignore[arg-type]
