"""DuckDB-style results: df()/fetchdf(), arrow()/fetch_arrow_table(), pl() with error columns, the
notebook display and plot; parameters of other Python types and other paramstyles."""

from __future__ import annotations

import datetime
import decimal
import math
import sys
from statistics import NormalDist

import duckdb
import matplotlib
import matplotlib.container
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import dpsql
import dpsql.testing
from dpsql import notebook

matplotlib.use("Agg")

WHOLE_TABLE = "SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race"  # no WHERE: repeats are free re-use
BY_SEX_RACE = "SELECT sex, race, COUNT(*) AS n FROM adult WHERE age BETWEEN 20 AND 40 GROUP BY sex, race"


def discrete_laplace_stderr(epsilon: float, contributions: int) -> float:
    """Standard error of discrete Laplace noise of scale contributions/epsilon: 2e^{-1/b}/(1-e^{-1/b})²."""
    q = math.exp(-epsilon / contributions)
    return math.sqrt(2 * q / (1 - q) ** 2)


def exact(frame: pd.DataFrame, sql: str) -> dict[tuple[object, ...], float]:
    """DuckDB's answer on the raw frame (the conftest table is clean: every row is counted)."""
    database = duckdb.connect()
    database.register("adult", frame)
    return {tuple(row[:-1]): float(row[-1]) for row in database.execute(sql).fetchall()}


def test_df_holds_duckdbs_exact_answers_and_the_closed_form_errors(adult_connection: dpsql.Connection, adult_frame: pd.DataFrame) -> None:
    cursor = adult_connection.cursor()
    with dpsql.testing.noise_disabled():
        frame = cursor.execute(BY_SEX_RACE, epsilon=0.5).df(errors=True)
    assert list(frame.columns) == ["sex", "race", "n", "n_stderr"]
    truth = exact(adult_frame, BY_SEX_RACE + " ORDER BY sex, race")
    assert len(frame) == 10  # every (sex, race) cell of the declared domain
    for sex, race, n, error in frame.itertuples(index=False):
        assert n == pytest.approx(truth.get((sex, race), 0.0), abs=1e-9)
        assert error == pytest.approx(discrete_laplace_stderr(0.5, 3), rel=1e-9)  # identity, 3 rows per person (10 digits)
    assert frame["n"].dtype == np.float64 and frame["race"].dtype == np.int64


def test_frames_take_the_rows_not_fetched_yet_like_duckdb(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor().execute(BY_SEX_RACE, epsilon=0.5)
    everything, errors = list(cursor._frame_source().rows), cursor.errors
    first = cursor.fetchone()
    rest = cursor.fetchdf(errors=True)
    assert first == everything[0] and len(rest) == 9
    assert [tuple(r) for r in rest[["sex", "race", "n"]].itertuples(index=False)] == everything[1:]
    assert list(rest["n_stderr"]) == [e[2] for e in errors[1:]]
    assert len(cursor.df()) == 0 and list(cursor.df(errors=True).columns) == ["sex", "race", "n", "n_stderr"]


def test_arrow_and_polars_match_the_rows(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    rows = cursor.execute(WHOLE_TABLE, epsilon=0.5).fetchall()
    errors = cursor.errors
    table = cursor.execute(WHOLE_TABLE, epsilon=0.5).arrow(errors=True)  # re-use: the same values, free
    assert isinstance(table, pa.Table)
    assert table.schema.names == ["sex", "race", "n", "n_stderr"]
    assert table.schema.field("n").type == pa.float64() and table.schema.field("race").type == pa.int64()
    assert list(zip(*(table.column(c).to_pylist() for c in ("sex", "race", "n")))) == rows
    assert table.column("n_stderr").to_pylist() == [e[2] for e in errors]
    assert cursor.execute(WHOLE_TABLE, epsilon=0.5).fetch_arrow_table().num_columns == 3
    frame = cursor.execute(WHOLE_TABLE, epsilon=0.5).pl(errors=True)
    assert isinstance(frame, pl.DataFrame) and frame.columns == ["sex", "race", "n", "n_stderr"]
    assert frame.rows() == [row + (error[2],) for row, error in zip(rows, errors)]


def test_rolled_up_keys_stay_integers_with_nulls(adult_connection: dpsql.Connection) -> None:
    results = adult_connection.workload(["SELECT race, COUNT(*) AS n FROM adult GROUP BY ROLLUP (race)"], epsilon=0.5)
    frame = results[0].df(errors=True)
    assert str(frame["race"].dtype) == "Int64" and frame["race"].isna().sum() == 1
    assert frame["n"].iloc[-1] == pytest.approx(frame["n"].iloc[:-1].sum(), abs=1e-6)  # consistent subtotal
    assert results[0].arrow().schema.field("race").type == pa.int64()
    assert results[0].pl()["race"].null_count() == 1


def test_repeated_names_are_kept_by_pandas_and_arrow_and_refused_by_polars(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    sql = "SELECT sex, COUNT(*), COUNT(*) FROM adult GROUP BY sex"
    assert list(cursor.execute(sql, epsilon=0.5).df().columns) == ["sex", "COUNT(*)", "COUNT(*)"]
    assert cursor.execute(sql, epsilon=0.5).arrow().schema.names == ["sex", "COUNT(*)", "COUNT(*)"]
    with pytest.raises(dpsql.ProgrammingError, match="rename .* with AS"):
        cursor.execute(sql, epsilon=0.5).pl()


@pytest.mark.parametrize(("method", "module", "extra"), [("df", "pandas", "pandas"), ("arrow", "pyarrow", "arrow"), ("pl", "polars", "polars")])
def test_a_missing_library_names_the_extra(adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch, method: str, module: str, extra: str) -> None:
    cursor = adult_connection.cursor().execute(BY_SEX_RACE, epsilon=0.5)
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(dpsql.InterfaceError, match=rf"needs {module}, which is not installed: pip install 'dpsql\[{extra}\]'"):
        getattr(cursor, method)()


def test_frames_need_a_result(adult_connection: dpsql.Connection) -> None:
    with pytest.raises(dpsql.InterfaceError, match="no result set"):
        adult_connection.cursor().df()


# -- parameters -----------------------------------------------------------------------------------------


def test_numpy_and_decimal_parameters_bind_like_python_numbers(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    sql = "SELECT sex, COUNT(*) AS n FROM adult WHERE age BETWEEN ? AND ? AND race = ? AND sex = ? GROUP BY sex"
    with dpsql.testing.noise_disabled():
        plain = cursor.execute(sql, (20, 40, 1, "F"), epsilon=1.0).fetchall()
        numpy = cursor.execute(sql, (np.int64(20), np.int16(40), np.uint8(1), np.str_("F")), epsilon=1.0).fetchall()
        others = cursor.execute(sql, (np.float64(20.0), decimal.Decimal("40"), np.int32(1), "F"), epsilon=1.0).fetchall()
    assert numpy == plain == others and plain[0][1] > 0


def test_dates_bind_as_iso_text() -> None:
    frame = pd.DataFrame({"day": ["2024-01-01", "2024-01-02", "2024-01-02", "2024-01-03"], "hour": ["09:30:00"] * 4})
    schema = {"columns": {"day": {"categories": ["2024-01-01", "2024-01-02", "2024-01-03"]}, "hour": {"categories": ["09:30:00"]}}}
    connection = dpsql.connect(budget=dpsql.Budget(10.0))
    connection.register("visits", frame, schema=schema)
    cursor = connection.cursor()
    with dpsql.testing.noise_disabled():
        on_day = cursor.execute("SELECT COUNT(*) FROM visits WHERE day = ? AND hour = ?", (datetime.date(2024, 1, 2), datetime.time(9, 30)), epsilon=1.0)
        assert on_day.fetchall()[0][0] == pytest.approx(2.0)
        with pytest.raises(dpsql.DataError):  # a datetime binds as '2024-01-02 00:00:00': not a declared category
            cursor.execute("SELECT COUNT(*) FROM visits WHERE day = ?", (datetime.datetime(2024, 1, 2),), epsilon=1.0)


@pytest.mark.parametrize(
    ("sql", "found"),
    [
        ("SELECT COUNT(*) FROM adult WHERE age > %s", "'%s' is a parameter placeholder of another paramstyle"),
        ("SELECT COUNT(*) FROM adult WHERE age > %(low)s", "'%\\(low\\)s' is a parameter placeholder"),
        ("SELECT COUNT(*) FROM adult WHERE age > :1", "':1' is a parameter placeholder"),
        ("SELECT COUNT(*) FROM adult WHERE age > :low", "named or numbered parameters"),
        ("SELECT COUNT(*) FROM adult WHERE age > $1", "named or numbered parameters"),
    ],
)
def test_other_paramstyles_get_a_dpsql_message(adult_connection: dpsql.Connection, sql: str, found: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=rf"{found}.*paramstyle is 'qmark', write \? for each parameter and pass a sequence"):
        adult_connection.cursor().execute(sql, (30,), epsilon=0.5)
    assert adult_connection.budget_spent().statements == 0


def test_a_percent_sign_inside_a_string_is_not_a_placeholder(adult_connection: dpsql.Connection) -> None:
    with pytest.raises(dpsql.ProgrammingError, match="cannot parse SQL"):
        adult_connection.cursor().execute("SELECT COUNT(*) FROM adult WHERE sex = '%s' AND", epsilon=0.5)


def test_non_finite_and_unknown_parameters_are_refused(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor()
    with pytest.raises(dpsql.ProgrammingError, match="finite number"):
        cursor.execute("SELECT COUNT(*) FROM adult WHERE age > ?", (np.float64("nan"),), epsilon=0.5)
    with pytest.raises(dpsql.ProgrammingError, match="unsupported parameter type list"):
        cursor.execute("SELECT COUNT(*) FROM adult WHERE age > ?", ([1],), epsilon=0.5)


# -- notebook display and plots ---------------------------------------------------------------------------


def test_html_shows_values_with_errors_and_the_cost_and_strategy(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor().execute(BY_SEX_RACE, epsilon=0.5)
    rows, errors = cursor.fetchall(), cursor.errors
    shown = cursor._repr_html_()  # shows every row, fetched or not
    assert shown.count("<tr>") == 1 + 10
    assert f"{rows[0][2]:.1f} <span style='color:#888'>± {errors[0][2]:.4g}</span>" in shown
    assert "strategy: identity — 0.5-DP (Laplace)" in shown and "10 row(s)" in shown
    batch = adult_connection.cursor().execute("SELECT sex, COUNT(*) FROM adult GROUP BY CUBE (sex)", epsilon=0.25)
    assert "cost: epsilon = 0.25" in batch._repr_html_()


def test_html_escapes_and_elides_long_results() -> None:
    rows = [(f"<b>{i}</b>", float(i)) for i in range(120)]
    source = dpsql.frames.FrameSource((("key", None), ("n", None)), rows, [(None, 1.0)] * 120, "cost: epsilon = 1 (<x>)")
    shown = notebook.result_html(source)
    assert "<b>" not in shown and "&lt;b&gt;0&lt;/b&gt;" in shown
    assert shown.count("<tr>") == 1 + 50 + 1 and "120 row(s)" in shown and "(&lt;x&gt;)" in shown


def test_explain_html_is_grouped_by_section(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor().execute("EXPLAIN SELECT sex, COUNT(*) FROM adult GROUP BY ROLLUP (sex)", epsilon=0.5)
    shown = cursor._repr_html_()
    sections = [row[0] for row in cursor.fetchall()]
    for section in dict.fromkeys(sections):
        assert f">{section}</th>" in shown
    assert "nothing was read or charged" in shown and adult_connection.budget_spent().statements == 0


def test_plot_draws_each_value_with_its_confidence_interval_one_axis_per_column(adult_connection: dpsql.Connection) -> None:
    """Each released column gets its own panel and axis (a count and an average do not share a unit)."""
    cursor = adult_connection.cursor().execute("SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY sex", epsilon=0.5)
    rows, errors = cursor.fetchall(), cursor.errors
    axes = cursor.plot(level=0.9)
    z = NormalDist().inv_cdf(0.95)
    assert len(axes) == 2 and [a.get_ylabel() for a in axes] == ["n (90% interval)", "mean_age (90% interval)"]
    for ax, column in zip(axes, (1, 2)):
        (bars,) = [c for c in ax.containers if isinstance(c, matplotlib.container.BarContainer)]
        assert [p.get_height() for p in bars.patches] == pytest.approx([r[column] for r in rows])
        segments = bars.errorbar.lines[2][0].get_segments()
        assert [s[1][1] - s[0][1] for s in segments] == pytest.approx([2 * z * e[column] for e in errors])
    assert [t.get_text() for t in axes[-1].get_xticklabels()] == ["F", "M"] and axes[-1].get_xlabel() == "sex"
    one = adult_connection.cursor().execute("SELECT race, COUNT(*) AS n FROM adult GROUP BY race", epsilon=0.5).plot()
    assert one.get_ylabel() == "n (95% interval)"  # one released column: one Axes
    with pytest.raises(dpsql.ProgrammingError, match="confidence level"):
        cursor.plot(level=1.5)
    with pytest.raises(dpsql.ProgrammingError, match="needs 2 Axes, one per released column"):
        cursor.plot(ax=one)


def test_a_plot_of_many_cells_stays_page_sized(adult_connection: dpsql.Connection) -> None:
    """74 ages were 74 bars on a figure 35 inches (4,000 px) wide; now a line with its band, 8 inches; many
    categorical rows are points with intervals, one row per line, down the page."""
    by_age = adult_connection.cursor().execute("SELECT age, COUNT(*) AS n FROM adult GROUP BY age", epsilon=0.5)
    rows, errors = by_age.fetchall(), by_age.errors
    ax = by_age.plot()
    width, height = ax.figure.get_size_inches()
    assert width <= 12 and height <= 6 and not ax.containers
    (line,) = ax.lines
    assert list(line.get_xdata()) == [r[0] for r in rows] and list(line.get_ydata()) == pytest.approx([r[1] for r in rows])
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    z = NormalDist().inv_cdf(0.975)
    assert band.max() == pytest.approx(max(r[1] + z * e[1] for r, e in zip(rows, errors)))
    cells = adult_connection.cursor().execute("SELECT job, sex, race, COUNT(*) AS n FROM adult GROUP BY job, sex, race", epsilon=0.5)
    ax = cells.plot()
    width, height = ax.figure.get_size_inches()
    assert cells.rowcount == 50 and width <= 12 and len(ax.get_yticklabels()) == 50 and ax.get_xlabel() == "n (95% interval)"


def test_plot_budget_takes_the_connection(adult_connection: dpsql.Connection) -> None:
    """The README wrote plot_budget(conn): it raised TypeError (two arguments were required)."""
    for epsilon in (0.25, 0.5):
        adult_connection.cursor().execute("SELECT sex, COUNT(*) FROM adult WHERE age > ? GROUP BY sex", (int(epsilon * 100),), epsilon=epsilon)
    ax = notebook.plot_budget(adult_connection)
    assert list(ax.lines[0].get_ydata()) == pytest.approx([0.25, 0.75]) and ax.lines[1].get_ydata()[0] == pytest.approx(1000.0)
    with pytest.raises(dpsql.ProgrammingError, match=r"plot_budget\(conn\)"):
        notebook.plot_budget(adult_connection.budget_history())


def test_plot_of_a_result_without_errors_is_refused(adult_connection: dpsql.Connection) -> None:
    cursor = adult_connection.cursor().execute("EXPLAIN SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.5)
    with pytest.raises(dpsql.ProgrammingError, match="no released values"):
        cursor.plot()


def test_budget_history_composes_like_the_ledger() -> None:
    budget = dpsql.Budget(epsilon=3.0, delta=1e-6)
    start = datetime.datetime(2026, 1, 1, 12, 0)
    records = [
        {"at": (start + datetime.timedelta(minutes=2)).isoformat(), "statement": "SELECT b", "epsilon": 0.25, "rho": 0.03125, "delta": 0.0},
        {"at": start, "statement": "SELECT a", "epsilon": 0.5, "rho": 0.125, "delta": 0.0},
        {"at": start + datetime.timedelta(minutes=5), "statement": "SELECT c", "epsilon": None, "rho": 0.02, "delta": 0.0},
    ]
    steps = notebook.spent_over_time(records, budget)
    assert [s for _, s, _ in steps] == ["SELECT a", "SELECT b", "SELECT c"]
    assert [e for _, _, e in steps][:2] == pytest.approx([0.5, 0.75])  # pure ε adds up
    log_term = math.log(1 / 1e-6)  # then the Gaussian part converts from zCDP at the budget's δ
    assert steps[2][2] == pytest.approx(min(0.75 + 0.02 + 2 * math.sqrt(0.02 * log_term), 0.17625 + 2 * math.sqrt(0.17625 * log_term)))
    ax = notebook.plot_budget(records, budget)
    assert list(ax.lines[0].get_ydata()) == pytest.approx([e for _, _, e in steps])
    assert ax.lines[1].get_ydata()[0] == pytest.approx(3.0)
    with pytest.raises(dpsql.ProgrammingError, match="'at'"):
        notebook.spent_over_time([{"statement": "x", "epsilon": 1.0}], budget)


def test_placeholders_bind_in_text_order_whatever_the_clause() -> None:
    from dpsql.sql.parse import Between, Comparison, InList
    from dpsql.sql.statement import parse_statement

    sql = "SELECT race, COUNT(*) FROM adult WHERE ? < age AND sex IN (?, ?) AND age BETWEEN ? AND ? GROUP BY race LIMIT ? OFFSET ?"
    statement = parse_statement(sql, (30, "F", "M", 20, 60, 3, 1))
    query = statement.branches[0].query
    assert query.where.operands == (Comparison("age", ">", 30), InList("sex", ("F", "M")), Between("age", 20, 60))  # type: ignore[union-attr]
    assert (statement.limit, statement.offset) == (3, 1)
