"""A private core inside any SELECT: everything around a statement's aggregations of a private table — its
public shell — is post-processing, run by DuckDB over the released rows. With noise disabled every shell of
``grammar/accepted/shells`` returns DuckDB's own answer to the same SQL; error bars follow through affine
functions of one released value; several cores are one batch and one charge; the shell never reads a private
table; and every accepted statement of the corpus runs inside the wrapper BI tools send."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import ADULT_SCHEMA, adult_corpus
from duckdb_answers import assert_refused_as_expected, assert_same_names, assert_same_rows, duckdb_rows

import dpsql
import dpsql.testing

GRAMMAR = Path(__file__).resolve().parents[2] / "grammar"
SHELLS = sorted((GRAMMAR / "accepted" / "shells").glob("*.sql"))
REJECTED = sorted((GRAMMAR / "rejected" / "shells").glob("*.sql"))
ACCEPTED = adult_corpus(GRAMMAR / "accepted")
REFERENCE = re.compile(r"^-- duckdb: (.+)$", re.MULTILINE)


def _statement(path: Path) -> tuple[str, str, bool]:
    """The statement, DuckDB's form of it (the same SQL unless a ``-- duckdb:`` line gives it) and whether its
    rows are ordered (``-- ordered``)."""
    text = path.read_text()
    sql = "\n".join(line for line in text.splitlines() if not line.startswith("-- "))
    reference = REFERENCE.search(text)
    return sql, reference.group(1) if reference else sql, "-- ordered" in text


@pytest.mark.parametrize("path", SHELLS, ids=lambda p: p.stem)
def test_shell_equals_duckdb_on_the_same_sql(path: Path, adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    sql, reference, ordered = _statement(path)
    with dpsql.testing.noise_disabled():
        cursor = adult_connection.cursor().execute(sql, epsilon=1.0)
    names, exact = duckdb_rows(reference, {"adult": adult_frame})
    assert_same_names([d[0] for d in cursor.description], names, sql)
    assert_same_rows(cursor.fetchall(), exact, ordered=ordered)
    assert len(cursor.errors) == cursor.rowcount
    assert adult_connection.budget_spent().statements <= 1  # every core of the statement: one batch, one charge


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_accepted_statement_runs_inside_the_bi_wrapper(path: Path, adult_connection: dpsql.Connection) -> None:
    """``SELECT * FROM (<statement>) AS virtual_table LIMIT 1000`` (Superset, Metabase, …) gives the statement's
    own rows, for at most the statement's own cost (often free: answered from the measurement just kept)."""
    sql, _, _ = _statement(path)
    sql = sql.strip().rstrip(";")
    if sql.upper().startswith("EXPLAIN"):
        sql = sql[len("EXPLAIN"):].strip()
    with dpsql.testing.noise_disabled():
        rows = adult_connection.cursor().execute(sql, epsilon=1.0).fetchall()
        spent = adult_connection.budget_spent().statements
        wrapped = adult_connection.cursor().execute(f"SELECT * FROM ({sql}) AS virtual_table LIMIT 1000", epsilon=1.0)
    assert adult_connection.budget_spent().statements <= spent + 1
    assert_same_rows(wrapped.fetchall(), rows[:1000], ordered=False)


@pytest.mark.parametrize("path", REJECTED, ids=lambda p: p.stem)
def test_shell_refusal_says_why_and_charges_nothing(path: Path, adult_connection: dpsql.Connection) -> None:
    assert_refused_as_expected(path, adult_connection)


def test_error_bars_follow_affine_functions_of_one_released_value(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    plain = cursor.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", epsilon=0.5)
    se = [error[1] for error in plain.errors]
    assert all(e > 0 for e in se)
    cursor.execute(
        "SELECT sex, COUNT(*) AS n, COUNT(*) * 2 AS twice, COUNT(*) + 1 AS plus, -COUNT(*) / 4 AS quarter, "
        "CAST(COUNT(*) AS DOUBLE) AS cast, COUNT(*) * COUNT(*) AS square, ROUND(COUNT(*)) AS rounded FROM adult GROUP BY sex",
        epsilon=0.5,
    )
    assert adult_connection.budget_spent().statements == 1  # the same counts: answered from the kept measurement
    for error, expected in zip(cursor.errors, se):
        assert error[0] is None and error[6] is None and error[7] is None  # a key, a product, a rounding: no error bar
        assert error[1:6] == pytest.approx((expected, 2 * expected, expected, expected / 4, expected))
    through = cursor.execute(
        "WITH c AS (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) "
        "SELECT * FROM (SELECT v.sex, v.n * 3 AS triple FROM c AS v ORDER BY sex) AS w "
        "UNION ALL SELECT 'both', SUM(n) FROM c",
        epsilon=0.5,
    )
    assert [e[1] for e in through.errors[:2]] == pytest.approx([3 * se[0], 3 * se[1]])
    assert through.errors[2][1] is None  # a sum of two released values: no error bar (it would need their covariance)


def test_several_cores_are_one_batch_and_one_charge(adult_frame: pd.DataFrame) -> None:
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=10.0), reuse=False)
    connection.register("adult", adult_frame, schema=ADULT_SCHEMA)
    cursor = connection.cursor().execute(
        "SELECT a.sex, a.n, b.mean_age, a.n / (SELECT COUNT(*) FROM adult) AS share FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) AS a "
        "JOIN (SELECT sex, AVG(age) AS mean_age FROM adult GROUP BY sex) AS b USING (sex)",
        epsilon=0.5,
    )
    history = connection.budget_history()
    assert len(history) == 1 and history[0].epsilon == pytest.approx(0.5)
    assert "post-processing" in cursor.explanation and "free" in cursor.explanation
    assert len(cursor.fetchall()) == 2
    connection.close()


def test_explain_says_post_processing_is_free(adult_connection: dpsql.Connection) -> None:
    rows = adult_connection.cursor().execute(
        "EXPLAIN SELECT sex, COUNT(*) * 2 AS twice FROM adult GROUP BY sex HAVING sex = 'F'", epsilon=0.5
    ).fetchall()
    post = {row[1]: row for row in rows if row[0] == "post-processing"}
    assert post["1"][2] == 0.0 and "free" in post["1"][3] and "never private rows" in post["1"][3]
    assert "HAVING" not in post["sql"][3] and "WHERE __dpsql_k0 = 'F'" in post["sql"][3]  # the HAVING, on released rows
    assert post["error bars"][3].startswith("on twice ")
    assert adult_connection.budget_spent().statements == 0


def test_public_tables_join_released_rows(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    regions = pd.DataFrame({"race": [0, 1, 2, 3, 4], "region": ["north", "south", "south", "east", "west"]})
    adult_connection.register("regions", regions, public=True)
    sql = ("SELECT r.region, SUM(c.n) AS n FROM (SELECT race, COUNT(*) AS n FROM adult GROUP BY race) AS c "
           "JOIN public.regions AS r ON c.race = r.race GROUP BY r.region ORDER BY r.region")
    with dpsql.testing.noise_disabled():
        rows = adult_connection.cursor().execute(sql, epsilon=0.5).fetchall()
    _, exact = duckdb_rows(sql.replace("public.regions", "regions"), {"adult": adult_frame, "regions": regions})
    assert_same_rows(rows, exact, ordered=True)
    renamed = regions.rename(columns={"region": "area"})
    adult_connection.register("regions", renamed, public=True)  # the same name, other columns: shells are checked again
    with pytest.raises(dpsql.ProgrammingError, match="does not run"):
        adult_connection.cursor().execute(sql, epsilon=0.5)
    assert adult_connection.cursor().execute(sql.replace("region", "area").replace("areas", "regions"), epsilon=0.5).rowcount == 4
    with pytest.raises(dpsql.ProgrammingError, match="public table"):
        adult_connection.register("adult", regions, public=True)
    with pytest.raises(dpsql.ProgrammingError, match="takes no schema"):
        adult_connection.register("other", regions, schema=ADULT_SCHEMA, public=True)
    with pytest.raises(dpsql.NotSupportedError, match=r"a.race = r.race is not a declared key.*declare foreign_keys: \{race: regions.race\}"):
        adult_connection.cursor().execute("SELECT r.region, COUNT(*) FROM adult a JOIN regions r ON a.race = r.race GROUP BY r.region", epsilon=0.5)


def test_the_shell_engine_reads_no_files_and_no_private_table(adult_connection: dpsql.Connection) -> None:
    engine = adult_connection._session.public.connection
    with pytest.raises(Exception, match="(?i)permission|disabled"):
        engine.execute("SELECT * FROM read_csv('/etc/hostname')")
    assert engine.execute("SELECT COUNT(*) FROM duckdb_tables() WHERE table_name ILIKE '%adult%'").fetchone() == (0,)


def test_a_shell_that_fails_on_released_values_is_charged_and_free_to_correct(adult_connection: dpsql.Connection) -> None:
    failing = "SELECT CASE WHEN n > 1000 THEN CAST(CAST(n AS VARCHAR) || 'x' AS INTEGER) END AS v FROM (SELECT COUNT(*) AS n FROM adult) AS c"
    with dpsql.testing.noise_disabled(), pytest.raises(dpsql.DataError, match="charged.*free"):
        adult_connection.cursor().execute(failing, epsilon=0.5)
    assert adult_connection.budget_spent().statements == 1
    fixed = adult_connection.cursor().execute("SELECT CASE WHEN n > 1000 THEN 'many' END AS v FROM (SELECT COUNT(*) AS n FROM adult) AS c", epsilon=0.5)
    assert fixed.fetchall() == [("many",)] and adult_connection.budget_spent().statements == 1


def test_prepare_is_an_ordered_list_of_stages_a_prefix_of_which_runs(adult_connection: dpsql.Connection) -> None:
    from dpsql import pipeline

    assert [name for name, _ in pipeline.PREPARE_STAGES] == ["relation", "keys", "compile", "refusals", "cost", "selection", "plan", "shells"]
    session = adult_connection._session
    request = pipeline.execute_request(session, "SELECT sex, COUNT(*) * 2 AS twice FROM adult GROUP BY sex", None, 0.5, None, None)
    compiled = pipeline.draft(session, request, until="compile")
    assert compiled.batch is not None and compiled.prepared is None  # compiled, not yet planned
    ready = pipeline.draft(session, request)
    assert ready.prepared is not None and ready.prepared.plan is not None and ready.prepared.shells[0] is not None


def test_release_is_an_ordered_list_of_stages_that_stops_at_the_first_answer(
    adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpsql import pipeline

    assert [name for name, _ in pipeline.RELEASE_STAGES] == ["parts", "zero", "kept", "charge", "read", "count", "measure"]
    ran: list[str] = []

    def recorded(name: str, stage: pipeline.ReleaseStage) -> pipeline.ReleaseStage:
        return lambda session, known: ran.append(name) or stage(session, known)

    monkeypatch.setattr(pipeline, "RELEASE_STAGES", tuple((name, recorded(name, stage)) for name, stage in pipeline.RELEASE_STAGES))
    cursor = adult_connection.cursor()
    cursor.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.5)
    assert ran == ["parts", "zero", "kept", "charge", "read", "count", "measure"]
    ran.clear()
    cursor.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.5)  # the kept measurement answers: free
    assert ran == ["parts", "zero", "kept"] and adult_connection.budget_spent().statements == 1


def test_shell_outputs_carry_no_float_residue_and_keys_keep_their_type(adult_connection: dpsql.Connection) -> None:
    """A share computed in the shell read ``33.12245357574269`` (16 digits of a noisy value); released
    numbers show at most 10 significant digits, and an integer key 0 stays the integer 0."""
    sql = "SELECT race, COUNT(*) * 100.0 / SUM(COUNT(*)) OVER () AS pct FROM adult GROUP BY race ORDER BY race"
    rows = adult_connection.cursor().execute(sql, epsilon=1.0).fetchall()
    assert [type(race) for race, _ in rows] == [int] * len(rows) and rows[0][0] == 0
    assert all(len(repr(pct).split("e")[0].replace(".", "").replace("-", "").strip("0")) <= 10 for _, pct in rows)
    assert sum(pct for _, pct in rows) == pytest.approx(100.0, rel=1e-8)


@pytest.mark.parametrize("comment", ["\n-- ordered", " /* by sex */", "/* x */ "])
def test_a_statement_of_several_parts_reads_the_same_with_comments(adult_connection: dpsql.Connection, comment: str) -> None:
    """The parts of a statement over several data vectors are joined on their keys, found by text: a comment on
    ORDER BY's key made it another text, and the statement was refused as showing private rows."""
    plain = "SELECT sex, SUM(age) AS s, COUNT(DISTINCT person_id) AS d FROM adult GROUP BY sex ORDER BY sex"
    commented = {"\n-- ordered": plain + comment, " /* by sex */": plain.replace(" GROUP BY", comment + " GROUP BY"), "/* x */ ": comment + plain}[comment]
    with dpsql.testing.noise_disabled():
        expected = adult_connection.cursor().execute(plain, epsilon=1.0).fetchall()
        assert adult_connection.cursor().execute(commented, epsilon=1.0).fetchall() == expected
