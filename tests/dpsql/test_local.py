"""``dpsql.local``: LDP surveys behind the same SQL (design, client randomizer, simulation, answers)."""

from __future__ import annotations

import datetime
import json
import math
import random

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from dpsql import local
from dpsql.sql.compile import compile_query
from dpsql.sql.statement import parse_statement
from planner.ldp import Aggregator, TableMechanism

SCHEMA = {"privacy_unit": None, "columns": {"sex": {"categories": ["F", "M"]}, "age": {"range": [1, 4]}, "zip": "unknown"}}
BY_SEX = "SELECT sex, COUNT(*) AS n FROM t GROUP BY sex"
AGE_OF_WOMEN = "SELECT age, COUNT(*) AS n FROM t WHERE sex = 'F' GROUP BY age"
STATEMENTS = [BY_SEX, AGE_OF_WOMEN]
FAST = {"restarts": 1, "iterations": 100}

# Units per (sex, age) cell, in the survey's cell order (sex slowest): a fixed small population.
CELL_COUNTS = np.array([40, 10, 70, 30, 20, 90, 0, 50])


def population() -> pd.DataFrame:
    cells = np.repeat(np.arange(8), CELL_COUNTS)
    return pd.DataFrame({"sex": np.array(["F", "M"])[cells // 4], "age": cells % 4 + 1, "zip": "x"})


def simulated(survey: local.Survey, table: object, seed: int) -> list:
    """``survey.simulate(table)``, reproducibly (the test hook; real data never gets a seed)."""
    with dpsql.testing.seeded(seed):
        return survey.simulate(table)


@pytest.fixture(scope="module")
def survey() -> local.Survey:
    return local.design(SCHEMA, STATEMENTS, 1.0, seed=0, **FAST)


# -- (a) the designed workload is the statements' compiled workload -----------------------------------


def test_survey_domain_is_the_columns_the_statements_read(survey: local.Survey) -> None:
    assert survey.columns == ("sex", "age") and survey.domain.size == 8 and survey.table == "t"
    assert survey.mechanism.num_types == 8 and survey.epsilon == 1.0


def test_designed_workload_equals_the_compiled_statements(survey: local.Survey) -> None:
    by_sex = np.kron(np.eye(2), np.ones((1, 4)))
    age_of_women = np.kron([[1.0, 0.0]], np.eye(4))
    np.testing.assert_array_equal(survey.workload_matrix, np.vstack([by_sex, age_of_women]))
    # the central compiler's statement workload (domain order age, sex) is the same matrix
    central = compile_query(parse_statement(AGE_OF_WOMEN).branches[0].query, dpsql.Schema.load(SCHEMA), ("sex", "age", "zip")).statement_workload
    assert central is not None and central.domain.attributes == ("age", "sex")
    reordered = central.dense().reshape(4, 4, 2).transpose(0, 2, 1).reshape(4, 8)
    np.testing.assert_array_equal(survey.statement_matrix(AGE_OF_WOMEN), reordered)


def test_rows_follow_the_statements_column_order_not_the_surveys(survey: local.Survey) -> None:
    """GROUP BY age, sex: row (age a, sex s) counts survey cell 4·s + a (the survey's order is sex, age)."""
    matrix = survey.statement_matrix("SELECT age, sex, COUNT(*) FROM t GROUP BY age, sex")
    expected = np.zeros((8, 8))
    for age in range(4):
        for sex in range(2):
            expected[2 * age + sex, 4 * sex + age] = 1.0
    np.testing.assert_array_equal(matrix, expected)
    rollup = survey.statement_matrix("SELECT age, sex, COUNT(*) FROM t GROUP BY ROLLUP (age, sex)")
    np.testing.assert_array_equal(rollup, np.vstack([expected, np.kron(np.ones((1, 2)), np.eye(4)), np.ones((1, 8))]))


# -- (b) unbiased answers, variances as predicted --------------------------------------------------------


def test_answers_are_unbiased_with_the_predicted_variance(survey: local.Survey) -> None:
    """400 seeded surveys of the same 310 units (each randomizing its record on the client): the mean
    is within 4.5 standard errors of the exact counts, the empirical variance within 30% of the exact
    one (≈4 sd of a 400-sample variance), and the released error bars are the worst-case bound, never
    below the exact variance."""
    records = population()[["sex", "age"]].to_dict("records")
    exact_counts = np.array([150, 160, 40, 10, 70, 30])  # F, M; then ages 1-4 of women
    factorization = Aggregator(survey.mechanism, survey.workload_matrix).factorization
    exact_variance = factorization.query_variances(CELL_COUNTS)
    worst_case = CELL_COUNTS.sum() * factorization.per_query_type_variance.max(axis=1)
    answers = []
    for seed in range(400):
        with dpsql.testing.seeded(seed):
            connection = survey.connect([survey.randomize(record) for record in records])
        by_sex, women = connection.answer(BY_SEX), connection.answer(AGE_OF_WOMEN)
        answers.append([row[1] for row in by_sex.rows + women.rows])
        released = np.array([error[1] for error in by_sex.errors + women.errors])
        np.testing.assert_allclose(released, np.sqrt(worst_case), rtol=1e-9)  # released numbers: 10 significant digits
    answers = np.array(answers)
    assert np.all(np.abs(answers.mean(axis=0) - exact_counts) <= 4.5 * np.sqrt(exact_variance / len(answers)))
    np.testing.assert_allclose(answers.var(axis=0, ddof=1) / exact_variance, 1.0, atol=0.3)
    assert np.all(worst_case >= exact_variance) and np.all(worst_case <= 3 * exact_variance)


def test_rows_look_like_the_central_engines(survey: local.Survey) -> None:
    """Same description, keys and row order as the central engine (noise off), counts within 5 SE."""
    table = population()
    cursor = survey.cursor(simulated(survey, table, 1))
    central = dpsql.connect(budget=dpsql.Budget(epsilon=100.0))
    central.register("t", table, schema=SCHEMA)
    central_cursor = central.cursor()
    statements = STATEMENTS + [
        "SELECT age, COUNT(*) AS n FROM t WHERE sex = 'F' AND age >= 3 GROUP BY age ORDER BY n DESC LIMIT 3",
        "SELECT sex, age, GROUPING(age) AS g, COUNT(*) FROM t GROUP BY ROLLUP (sex, age) ORDER BY sex, age",
        "SELECT age, sex, COUNT(*) AS n FROM t GROUP BY age, sex",
    ]
    for sql in statements:
        cursor.execute(sql)
        with dpsql.testing.noise_disabled():
            central_cursor.execute(sql, epsilon=1.0)
        assert cursor.description == central_cursor.description
        rows, exact = cursor.fetchall(), central_cursor.fetchall()
        assert [row[:-1] for row in rows] == [row[:-1] for row in exact] or "ORDER BY n" in sql
        errors = cursor.errors
        for row, error in zip(rows, errors):
            assert error[:-1] == (None,) * (len(row) - 1)
            counterpart = next(e for e in exact if e[:-1] == row[:-1])
            if counterpart[-1] == 0 and row[-1] == 0:  # excluded by the WHERE clause: an exact zero
                assert error[-1] == 0.0
            else:
                assert abs(row[-1] - counterpart[-1]) <= 5 * error[-1] + 1e-6  # the total is exact: N reports
    cursor.execute(statements[2])  # ages 1 and 2 are excluded by the WHERE clause (age >= 3): not rows
    rows = dict(cursor.fetchall())
    assert cursor.rowcount == 2 and set(rows) == {3, 4}
    cursor.execute(BY_SEX)
    intervals = cursor.confidence_interval(0.95)
    assert intervals[0][0] is None and intervals[0][1][1] - intervals[0][1][0] == pytest.approx(2 * 1.959964 * cursor.errors[0][1])


# -- (c) JSON ---------------------------------------------------------------------------------------------


def test_json_round_trip(survey: local.Survey) -> None:
    text = survey.to_json()
    document = json.loads(text)
    assert document["format"] == "dpsql-ldp-survey" and document["statements"] == STATEMENTS
    assert document["schema"]["columns"] == {"sex": {"categories": ["F", "M"]}, "age": {"range": [1, 4]}}
    assert document["mechanism"]["format"] == "dpsql-ldp-mechanism"
    shipped = local.Survey.from_json(text)
    assert shipped == survey
    reports = simulated(survey, population(), 3)
    assert shipped.connect(reports).answer(BY_SEX) == survey.connect(reports).answer(BY_SEX)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: {**d, "format": "other"}, "not a survey"),
        (lambda d: {**d, "version": 7}, "version"),
        (lambda d: {**d, "statements": []}, "statements"),
        (lambda d: {**d, "schema": {"columns": {"sex": {"categories": []}}}}, "schema"),
        (lambda d: {**d, "mechanism": {"format": "nope"}}, "mechanism"),
        (lambda d: {**d, "schema": {"columns": {"sex": {"categories": ["F", "M"]}}}}, "8 user types"),
        (lambda d: {**d, "schema": {"columns": {"sex": "unknown", "age": {"range": [1, 4]}}}}, "declared domain"),
        (lambda d: {**d, "schema": {"privacy_unit": "p", "max_rows_per_unit": 2, "columns": d["schema"]["columns"]}}, "max_rows"),
        (lambda d: {**d, "statements": ["SELECT job, COUNT(*) FROM t GROUP BY job"]}, "unknown column"),
    ],
)
def test_malformed_survey_json_is_a_data_error(survey: local.Survey, change, message: str) -> None:
    changed = change(json.loads(survey.to_json()))
    with pytest.raises(dpsql.DataError, match=message):
        local.Survey.from_json(changed if isinstance(changed, str) else json.dumps(changed))


# -- (d) the client side ------------------------------------------------------------------------------------


def test_records_map_to_cells_and_randomize_through_the_mechanism(survey: local.Survey) -> None:
    """A record's cell is its C-order index; randomize() draws exactly what the mechanism draws for
    that cell (same seeded stream), so planner.ldp's frequency tests cover the client."""
    assert [survey.cell({"sex": s, "age": a}) for s in ("F", "M") for a in (1, 2, 3, 4)] == list(range(8))
    assert survey.cell({"sex": "M", "age": np.int64(2), "other": 5}) == 5 and survey.cell({"sex": "F", "age": 3.0}) == 2
    records, theirs = ({"sex": "M", "age": 4}, {"sex": "F", "age": 1}) * 50, random.Random(11)
    with dpsql.testing.seeded(11):
        ours = [survey.randomize(record) for record in records]
    assert ours == [survey.mechanism.randomize(survey.cell(record), theirs) for record in records]


def test_nullable_columns_and_bins_have_their_cells() -> None:
    schema = {"columns": {"job": {"categories": ["a", "b"], "nullable": True}, "income": {"bins": [0, 10, 50]}}}
    survey = local.design(schema, ["SELECT job, COUNT(income) FROM t WHERE income >= 10 GROUP BY job"], 1.0, seed=0, **FAST)
    assert survey.columns == ("job", "income") and survey.domain.size == 6
    assert [survey.cell({"job": j, "income": i}) for j in ("a", "b", None) for i in (0, 49.5)] == [0, 1, 2, 3, 4, 5]
    assert survey.cell({"job": math.nan, "income": 10}) == 5
    with pytest.raises(dpsql.DataError, match="not nullable"):
        survey.cell({"job": "a", "income": math.nan})
    np.testing.assert_array_equal(survey.workload_matrix, np.kron(np.eye(3), [[0.0, 1.0]]))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"sex": "X", "age": 1}, "outside its declared domain"),
        ({"sex": "F", "age": 7}, "outside its declared domain"),
        ({"sex": "F", "age": 2.5}, "outside its declared domain"),
        ({"sex": "F", "age": True}, "outside its declared domain"),
        ({"sex": None, "age": 1}, "not nullable"),
        ({"sex": "F"}, "no value for column 'age'"),
        (["F", 1], "mapping"),
    ],
)
def test_records_without_a_cell_are_data_errors_for_the_strict_mapping(survey: local.Survey, record: object, message: str) -> None:
    with pytest.raises(dpsql.DataError, match=message):
        survey.cell(record)  # type: ignore[arg-type]


# -- simulation -----------------------------------------------------------------------------------------------


def test_simulation_sends_one_report_per_unit_from_any_source(tmp_path) -> None:
    schema = {"privacy_unit": "pid", "columns": {"sex": {"categories": ["F", "M"]}}}
    survey = local.design(schema, ["SELECT sex, COUNT(*) FROM t GROUP BY sex"], 2.0, seed=0, **FAST)
    rows = pd.DataFrame({"pid": [1, 1, 1, 2, 3, 4, 4, 5, None], "sex": ["F", "M", "F", "M", "X", "X", "F", None, "F"]})
    path = tmp_path / "t.csv"
    rows.to_csv(path, index=False)
    # five units, each sends one report, whatever its values (units 3 and 5 have no cell: the fallback);
    # the row with no unit belongs to nobody
    for source in (rows, str(path), duckdb.sql(f"SELECT * FROM read_csv('{path}')")):
        reports = survey.simulate(source)
        assert len(reports) == 5 and all(0 <= r < 8 for r in reports)
    assert simulated(survey, rows, 4) == simulated(survey, rows, 4)
    with pytest.raises(dpsql.ProgrammingError, match="no column"):
        survey.simulate(rows.drop(columns="pid"))


def test_simulation_keeps_each_unit_in_its_cell() -> None:
    """With a randomizer that tells the truth with probability ≥ e/(e+1) (ε = 1 randomized response on
    one column), the counts of truthful reports are binomial: checked within 5 sd."""
    schema = {"columns": {"sex": {"categories": ["F", "M"]}}}
    truthful = math.e / (math.e + 1)
    mechanism = TableMechanism(1.0, ((truthful, 1 - truthful), (1 - truthful, truthful)))
    survey = local.Survey("t", dpsql.Schema.load(schema), ("SELECT sex, COUNT(*) FROM t GROUP BY sex",), mechanism)
    reports = simulated(survey, pd.DataFrame({"sex": ["F"] * 3000 + ["M"] * 1000}), 5)
    expected = 3000 * truthful + 1000 * (1 - truthful)
    assert abs(reports.count(0) - expected) <= 5 * math.sqrt(4000 * truthful * (1 - truthful))


# -- (e) bad inputs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.inf, math.nan])
def test_bad_epsilon_is_a_programming_error(epsilon: float) -> None:
    with pytest.raises(dpsql.ProgrammingError, match="epsilon"):
        local.design(SCHEMA, [BY_SEX], epsilon, **FAST)


@pytest.mark.parametrize(
    ("schema", "statements", "error", "message"),
    [
        ({**SCHEMA, "privacy_unit": "pid", "max_rows_per_unit": 2}, [BY_SEX], dpsql.ProgrammingError, "ONE record per privacy unit"),
        (SCHEMA, ["SELECT zip, COUNT(*) FROM t GROUP BY zip"], dpsql.NotSupportedError, "no declared domain"),
        (SCHEMA, ["SELECT job, COUNT(*) FROM t GROUP BY job"], dpsql.ProgrammingError, "unknown column"),
        (SCHEMA, [BY_SEX, "SELECT COUNT(*) FROM u"], dpsql.NotSupportedError, "one table"),
        (SCHEMA, [], dpsql.ProgrammingError, "at least one"),
        (SCHEMA, ["SELECT COUNT(*) FROM t WHERE age > 9"], dpsql.ProgrammingError, "zero by construction"),
        ({"columns": {"a": {"range": [1, 40]}, "b": {"range": [1, 40]}}}, ["SELECT a, b, COUNT(*) FROM t GROUP BY a, b"],
         dpsql.NotSupportedError, "1600 cells"),
    ],
)
def test_bad_designs_are_refused_clearly(schema: dict, statements: list[str], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        local.design(schema, statements, 1.0, **FAST)


def test_statements_outside_the_survey_are_refused(survey: local.Survey) -> None:
    cursor = survey.cursor(simulated(survey, population(), 6))
    with pytest.raises(dpsql.ProgrammingError, match="unknown column"):
        cursor.execute("SELECT zip, COUNT(*) FROM t GROUP BY zip")
    with pytest.raises(dpsql.ProgrammingError, match="collects table 't'"):
        cursor.execute("SELECT sex, COUNT(*) FROM other GROUP BY sex")
    with pytest.raises(dpsql.ProgrammingError, match="costs nothing"):
        cursor.execute(BY_SEX, epsilon=1.0)
    with pytest.raises(dpsql.NotSupportedError, match="EXPLAIN"):
        cursor.execute(f"EXPLAIN {BY_SEX}")
    with pytest.raises(dpsql.InterfaceError):
        survey.cursor([]).fetchall()


def test_a_statement_outside_the_row_space_asks_for_a_new_design(survey: local.Survey) -> None:
    """A randomizer that reveals only (noisy) sex cannot estimate ages: refused, not answered biased."""
    truthful = 0.75  # randomized response on sex, ε = ln 3, whatever the age
    by_sex = tuple((truthful, 1 - truthful) if cell < 4 else (1 - truthful, truthful) for cell in range(8))
    survey = local.Survey("t", survey.schema, (BY_SEX,), TableMechanism(math.log(3), by_sex))
    cursor = survey.cursor([0, 1, 1])
    assert cursor.execute(BY_SEX).rowcount == 2
    with pytest.raises(dpsql.ProgrammingError, match="design a survey that includes it"):
        cursor.execute(AGE_OF_WOMEN)


@pytest.mark.parametrize("reports", [[0, 99], ["1"], [True]])
def test_reports_not_from_the_mechanism_are_data_errors(survey: local.Survey, reports: list) -> None:
    with pytest.raises(dpsql.DataError, match="reports"):
        survey.connect(reports)


def test_parameters_executemany_and_closing(survey: local.Survey) -> None:
    connection = survey.connect(simulated(survey, population(), 7))
    cursor = connection.cursor()
    cursor.executemany("SELECT age, COUNT(*) FROM t WHERE sex = ? GROUP BY age", [["F"], ["M"]])
    assert [row[0] for row in cursor.fetchall()] == [1, 2, 3, 4] * 2
    single = connection.cursor().execute("SELECT age, COUNT(*) FROM t WHERE sex = ? GROUP BY age", ["F"]).fetchall()
    assert single == connection.cursor().execute(AGE_OF_WOMEN).fetchall()
    connection.close()
    with pytest.raises(dpsql.InterfaceError, match="closed"):
        cursor.execute(BY_SEX)


def test_item_set_surveys_report_lists() -> None:
    """On a plain histogram of 32 cells subset selection beats the optimized table (planner.ldp ships
    it): reports are lists of items, they survive JSON, answers stay within 5 worst-case SE."""
    schema = {"columns": {"a": {"range": [1, 32]}}}
    histogram = "SELECT a, COUNT(*) FROM t GROUP BY a"
    survey = local.design(schema, [histogram], 1.0, seed=0, restarts=1, iterations=30)
    assert survey.mechanism.to_json().count('"subset selection"') == 1
    reports = json.loads(json.dumps(simulated(survey, pd.DataFrame({"a": np.arange(3200) % 32 + 1}), 8)))
    assert len(reports) == 3200 and all(isinstance(r, list) and len(set(r)) == len(r) == len(reports[0]) for r in reports)
    cursor = local.Survey.from_json(survey.to_json()).cursor(reports)
    rows, errors = cursor.execute(histogram).fetchall(), cursor.errors
    assert [row[0] for row in rows] == list(range(1, 33))
    assert all(abs(row[1] - 100) <= 5 * error[1] for row, error in zip(rows, errors))
    total = cursor.execute("SELECT COUNT(*) FROM t WHERE a <= 16").fetchall()[0][0]
    assert abs(total - 1600) <= 5 * cursor.errors[0][0]
    with pytest.raises(dpsql.DataError, match="distinct items"):
        survey.connect([reports[0][:1] * len(reports[0])])


def test_simulation_reports_each_units_record_as_the_client_would() -> None:
    """simulate() picks one record per unit and maps it exactly as randomize() does on a device: the
    same cells for values in the domain (NULLs, bin edges, non-integer and out-of-range values follow
    Survey.cell), the fallback for the others — seeded, both give the same reports in the same order."""
    schema = {"columns": {"job": {"categories": ["a", "b"], "nullable": True}, "income": {"bins": [0, 10, 50]}, "age": {"range": [1, 3]}}}
    survey = local.design(schema, ["SELECT job, income, age, COUNT(*) FROM t GROUP BY job, income, age"], 1.0, seed=0, **FAST)
    table = pd.DataFrame(
        {
            "job": ["a", "b", None, "c", "a", "b", None, "a", "b"],
            "income": [0.0, 9.99, 10.0, 5.0, 50.0, 49.0, -1.0, 25.0, 10.0],
            "age": [1.0, 3.0, 2.0, 1.0, 1.0, 2.5, 3.0, 4.0, 1.0],
        }
    )
    strict = []
    for record in table.to_dict("records"):
        try:
            strict.append(survey.cell(record))
        except dpsql.DataError:
            strict.append(None)
    assert strict == [0, 8, 16, None, None, None, None, None, 9]  # 6·job + 3·income bin + age
    records = survey._unit_records(table, salt=0)
    rows = table.astype(object).where(table.notna(), None)[list(survey.columns)].values.tolist()
    assert [[record[c] for c in survey.columns] for record in records] == rows  # no unit column: every row, NULL as None
    with dpsql.testing.seeded(3):
        reported = [survey.reported_cell(record, dpsql.testing.python_random()) for record in records]
    assert [cell for cell, known in zip(reported, strict) if known is not None] == [c for c in strict if c is not None]
    assert reported[3] == 12  # job 'c' is outside its domain: job's NULL cell (nullable), income [0, 10), age 1
    with dpsql.testing.seeded(4):
        source = dpsql.testing.python_random()
        cells = [survey.reported_cell(record, source) for record in survey._unit_records(table, salt=source.getrandbits(62))]
        source.shuffle(cells)
        expected = [survey.mechanism.randomize(cell, source) for cell in cells]
    assert simulated(survey, table, 4) == expected


# -- every unit reports, and no seed drives real randomization ------------------------------


def test_a_value_without_a_cell_is_reported_through_the_fallback(survey: local.Survey) -> None:
    """Earlier, such a client sent nothing (randomize raised): whether a report arrives was a
    function of the private value. Now: a non-nullable column's bad value becomes a uniformly random
    cell of that column (the other columns keep theirs), a nullable column's its NULL cell."""
    assert isinstance(survey.randomize({"sex": "X", "age": 2}), int) and isinstance(survey.randomize({"age": 99}), int)
    with dpsql.testing.seeded(0):
        rng = dpsql.testing.python_random()
        cells = np.array([survey.reported_cell({"sex": None, "age": 3}, rng) for _ in range(4000)])
    # sex is uniform over F, M (cells 2 and 6): binomial(4000, 1/2) within 5 sd; age stays 3
    assert set(cells) == {2, 6} and abs((cells == 2).sum() - 2000) <= 5 * math.sqrt(1000)
    nullable = local.design({"columns": {"job": {"categories": ["a", "b"], "nullable": True}}}, ["SELECT job, COUNT(*) FROM t GROUP BY job"], 1.0, seed=0, **FAST)
    assert {nullable.reported_cell({"job": value}, random.Random(1)) for value in ("zzz", None, 7, math.nan)} == {2}
    assert nullable.reported_cell({}, random.Random(1)) == 2  # a missing column is NULL
    with pytest.raises(dpsql.DataError, match="mapping"):
        survey.randomize(["F", 1])  # type: ignore[arg-type]


def test_seeds_are_refused_on_real_records(survey: local.Survey) -> None:
    """Earlier, with simulate(data, seed=s) anyone knowing s recovered 37 % of Adult's true cells."""
    with pytest.raises(dpsql.ProgrammingError, match="anyone who knows a seed can undo the randomization"):
        survey.simulate(population(), seed=1)
    with pytest.raises(dpsql.ProgrammingError, match="dpsql.testing.seeded"):
        survey.randomize({"sex": "F", "age": 1}, random.Random(1))
    first, second = survey.simulate(population()), survey.simulate(population())
    assert first != second  # OS entropy: 310 reports never coincide by chance


def test_a_range_of_days_maps_dates_instants_and_iso_texts_to_their_day() -> None:
    """A record's date (a date, a naive instant, an ISO text from JSON) finds its day's cell; it found none before,
    so every device reported the fallback's random cell."""
    schema = {"columns": {"d": {"range": ["2024-01-01", "2024-01-07"]}}}
    survey = local.design(schema, ["SELECT d, COUNT(*) FROM t GROUP BY d"], 1.0, seed=0, **FAST)
    day = datetime.date(2024, 1, 3)
    assert [survey.cell({"d": v}) for v in (day, datetime.datetime(2024, 1, 3, 23, 59), "2024-01-03", pd.Timestamp("2024-01-07"))] == [2, 2, 2, 6]
    for outside in (datetime.date(2023, 12, 31), "2024-01-08", "Jan 3", 20240103, datetime.datetime(2024, 1, 3, tzinfo=datetime.timezone.utc)):
        with pytest.raises(dpsql.DataError, match="outside its declared domain"):
            survey.cell({"d": outside})
