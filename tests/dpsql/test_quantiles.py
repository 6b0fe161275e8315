"""Quantiles: MEDIAN, PERCENTILE_CONT/DISC, QUANTILE*, MIN, MAX from one measured CDF per
group — equal to DuckDB's exact answers with noise off (GROUP BY, CUBE, ROLLUP, WHERE, HAVING, batches with
the WHERE as masks), bins and dates to the resolution of their domains, error bars from the plan with the rank
error's covariance, the projected CDF's inversion (raw and clipping variants are measurably worse), interval
coverage, and refusals before anything is read."""

from __future__ import annotations

import bisect
import datetime
import math
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
from dpsql import local
from conftest import ADULT_SCHEMA, make_adult
from pipeline_helpers import cdf_path
from dpsql.schema import ColumnDomain
from dpsql.sql import bounded, quantiles
from dpsql.sql.parse import Quantile
from planner import Explicit, Prefix



CORPUS = sorted((Path(__file__).resolve().parents[2] / "grammar" / "accepted" / "quantiles").glob("*.sql"))


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return make_adult(persons=900, seed=11)  # at most 3 rows per person: bounding keeps every row


@pytest.fixture()
def connection(frame: pd.DataFrame):  # noqa: ANN201
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6, delta=1e-6))
    conn.register("adult", frame, schema=ADULT_SCHEMA)
    yield conn
    conn.close()


def _exact(sql: str, frame: pd.DataFrame) -> list[tuple]:
    connection = duckdb.connect()
    connection.register("adult", frame)
    rows = connection.execute(sql).fetchall()
    connection.close()
    return rows


def _normalised(rows: list[tuple]) -> list[tuple]:
    return sorted((tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows), key=repr)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_equals_duckdb_with_noise_off(connection: dpsql.Connection, frame: pd.DataFrame, path: Path) -> None:
    sql = path.read_text().strip()
    with dpsql.testing.noise_disabled():
        released = connection.cursor().execute(sql, epsilon=1.0).fetchall()
    assert _normalised(released) == _normalised(_exact(sql, frame))


def test_a_batch_with_the_where_as_masks_equals_duckdb(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """Different WHERE clauses in one batch: the WHERE on the ranked column is folded into its CDF block."""
    batch = [
        "SELECT sex, MEDIAN(age), COUNT(*) FROM adult WHERE age > 40 AND age <= 75 GROUP BY sex",
        "SELECT race, QUANTILE_DISC(age, 0.3), MAX(age) FROM adult WHERE sex = 'F' GROUP BY race",
        "SELECT job, MIN(age) FROM adult GROUP BY job",
    ]
    with dpsql.testing.noise_disabled():
        results = connection.workload(batch, epsilon=1.0)
    for result, sql in zip(results, batch):
        assert _normalised([tuple(round(v) if isinstance(v, float) and abs(v - round(v)) < 1e-6 else v for v in r) for r in result.fetchall()]) == _normalised(_exact(sql, frame))


def test_approximate_quantile_spellings_are_the_discrete_quantile(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """DuckDB's APPROX_QUANTILE, Spark's PERCENTILE_APPROX (an accuracy argument ignored: ε sets the accuracy) and
    Trino's APPROX_PERCENTILE are answered as QUANTILE_DISC: with the noise off, DuckDB's exact discrete quantile."""
    sql = "SELECT sex, APPROX_QUANTILE(age, 0.3), PERCENTILE_APPROX(age, 0.5, 1000), APPROX_PERCENTILE(age, 0.9) FROM adult GROUP BY sex"
    with dpsql.testing.noise_disabled():
        cursor = connection.cursor().execute(sql, epsilon=1.0)
        released = cursor.fetchall()
    exact = "SELECT sex, QUANTILE_DISC(age, 0.3), QUANTILE_DISC(age, 0.5), QUANTILE_DISC(age, 0.9) FROM adult GROUP BY sex"
    assert _normalised(released) == _normalised(_exact(exact, frame))
    assert cursor.description[1][0] == "APPROX_QUANTILE(age, 0.3)"


def test_bins_answer_to_their_resolution(frame: pd.DataFrame) -> None:
    """DISC/MIN/MAX give the bin; CONT interpolates inside the bin that holds the rank (grouped-data quantile)."""
    edges = ADULT_SCHEMA["columns"]["income"]["bins"]  # type: ignore[index]
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    connection.register("adult", frame, schema=ADULT_SCHEMA)
    sql = "SELECT sex, MEDIAN(income), QUANTILE_DISC(income, 0.9), MIN(income), MAX(income) FROM adult GROUP BY sex"
    with dpsql.testing.noise_disabled():
        rows = {r[0]: r[1:] for r in connection.cursor().execute(sql, epsilon=1.0).fetchall()}
    labels = ColumnDomain("income", "bins", tuple(edges)).labels()
    for sex, group in frame.groupby("sex"):
        counts = np.histogram(group["income"], bins=edges)[0]
        cdf = np.cumsum(counts)
        n = int(cdf[-1])
        rank = 1 + 0.5 * (n - 1)
        cell = int(np.searchsorted(cdf, rank))
        before = cdf[cell - 1] if cell else 0
        median = edges[cell] + (rank - before) / counts[cell] * (edges[cell + 1] - edges[cell])
        assert rows[sex][0] == pytest.approx(median)
        assert rows[sex][1] == labels[int(np.searchsorted(cdf, math.ceil(0.9 * n)))]
        assert rows[sex][2] == labels[int(np.flatnonzero(counts)[0])] and rows[sex][3] == labels[int(np.flatnonzero(counts)[-1])]
    connection.close()


def test_dates_answer_discrete_quantiles_and_refuse_interpolation() -> None:
    rng = np.random.default_rng(5)
    days = pd.to_datetime("2024-01-01") + pd.to_timedelta(rng.integers(0, 60, 400), unit="D")
    frame = pd.DataFrame({"id": range(400), "g": rng.choice(["a", "b"], 400), "day": days.date})
    schema = {"privacy_unit": "id", "columns": {"g": {"categories": ["a", "b"]}, "day": {"range": ["2024-01-01", "2024-03-31"]}}}
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    connection.register("visits", frame, schema=schema)
    sql = "SELECT g, QUANTILE_DISC(day, 0.5), PERCENTILE_DISC(0.1) WITHIN GROUP (ORDER BY day), MIN(day), MAX(day) FROM visits GROUP BY g"
    with dpsql.testing.noise_disabled():
        cursor = connection.cursor().execute(sql, epsilon=1.0)
        released = cursor.fetchall()
    exact = duckdb.connect()
    exact.register("visits", frame)
    assert sorted(released) == sorted(exact.execute(sql).fetchall())
    assert isinstance(released[0][1], datetime.date) and cursor.description[1][1] == dpsql.DATETIME
    assert [c[0] for c in cursor.description[1:3]] == ["QUANTILE_DISC(day, 0.5)", "PERCENTILE_DISC(0.1) WITHIN GROUP (ORDER BY day)"]  # as written
    for row, intervals in zip(released, cursor.confidence_interval(0.95)):  # in whole days, around each date
        assert all(low <= value <= high and (high - value).days == (value - low).days for value, (low, high) in zip(row[1:], intervals[1:]))
    with pytest.raises(dpsql.NotSupportedError, match="interpolating between dates"):
        connection.cursor().execute("SELECT MEDIAN(day) FROM visits", epsilon=1.0)
    assert connection.budget_spent().statements == 1
    connection.close()


@pytest.mark.parametrize(
    ("sql", "error", "message"),
    [
        ("SELECT MEDIAN(sex) FROM adult", dpsql.NotSupportedError, "ordered domain"),
        ("SELECT MEDIAN(browser) FROM adult", dpsql.NotSupportedError, "no declared domain"),
        ("SELECT QUANTILE_CONT(age, [0.1, 0.9]) FROM adult", dpsql.NotSupportedError, "one quantile per fraction"),
        ("SELECT QUANTILE_CONT(age, 1.5) FROM adult", dpsql.ProgrammingError, "between 0 and 1"),
        ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY age DESC) FROM adult", dpsql.NotSupportedError, "1 − q"),
        ("SELECT age, MEDIAN(age) FROM adult GROUP BY age", dpsql.NotSupportedError, "also groups by 'age'"),
        ("SELECT age // 10, MEDIAN(age) FROM adult GROUP BY age // 10", dpsql.NotSupportedError, "also groups by 'age'"),
        ("SELECT MIN(age, 3) FROM adult", dpsql.NotSupportedError, "one column and nothing else"),
        ("SELECT QUANTILE(age) FROM adult", dpsql.ProgrammingError, "the column and the fraction"),
        ("SELECT MEDIAN(DISTINCT age) FROM adult", dpsql.NotSupportedError, "give one column"),
        ("SELECT APPROX_QUANTILE(age, 0.5, weight => race) FROM adult", dpsql.NotSupportedError, "the column and the fraction only"),
        ("SELECT sex, MEDIAN(age) FROM adult WHERE age > 30 OR sex = 'F' GROUP BY sex", dpsql.NotSupportedError, "by OR"),
    ],
)
def test_refusals_name_the_fix_and_charge_nothing(connection: dpsql.Connection, sql: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        connection.cursor().execute(sql, epsilon=1.0)
    assert connection.budget_spent().statements == 0


def test_local_surveys_refuse_quantiles() -> None:
    schema = {"columns": {"age": {"range": [17, 90]}}}
    with pytest.raises(dpsql.NotSupportedError, match="quantiles of reported values"):
        local.design(schema, ["SELECT MEDIAN(age) FROM t"], 1.0)


def test_explain_states_the_cdf_and_its_rank_error(connection: dpsql.Connection) -> None:
    rows = connection.cursor().execute("EXPLAIN SELECT sex, MEDIAN(age), MAX(age) FROM adult GROUP BY sex", epsilon=1.0).fetchall()
    quantile = [r for r in rows if r[0] == "quantile"]
    assert len(quantile) == 1 and quantile[0][1] == "age" and quantile[0][2] == 74.0
    assert "one cumulative count (CDF) per group over the 74 cells of 'age'" in quantile[0][3] and "glossary.md#quantile" in quantile[0][3]
    assert connection.budget_spent().statements == 0


def test_the_projection_pools_violators_by_inverse_variance_and_truncates_at_zero() -> None:
    """By hand: 3 then 2 violate monotonicity and pool to their inverse-variance mean (3·1 + 2·¼)/(1 + ¼) = 2.8;
    the negative first cell is set to 0; a monotone row is left as it is; a row that is not finite too."""
    values = np.array([[-1.0, 3.0, 2.0, 5.0], [0.0, 1.0, 1.0, 4.0], [np.nan, 2.0, 1.0, 3.0]])
    variances = np.array([[1.0, 1.0, 4.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    projected = quantiles.monotone(values, variances)
    np.testing.assert_allclose(projected[:2], [[0.0, 2.8, 2.8, 5.0], [0.0, 1.0, 1.0, 4.0]])
    assert np.isnan(projected[2, 0]) and projected[2, 1:].tolist() == [2.0, 1.0, 3.0]


def test_errors_invert_the_rank_band() -> None:
    """The released error makes value ± 1.96·error hold every value whose rank lies within 1.96 rank standard
    errors of the target rank (the inverted band, made symmetric around the value) — by hand on a fixed CDF."""
    domain = ColumnDomain("v", "range", (0, 9))
    cdf = np.array([[0, 2, 5, 9, 10, 14, 18, 19, 20, 20]], dtype=float)
    variances = np.full((1, 10), 4.0)
    values, errors = quantiles.released(Quantile("m", "PERCENTILE_DISC", "v", 0.5), domain, cdf, variances)
    # N = 20, target rank 10 → first cell with CDF ≥ 10 is 4. Rank SE √(4 + 0.5²·4) = √5; ranks 10 ∓ 1.96·√5
    # = 5.62 and 14.38 → first cells reaching 6 and 15: 3 and 6; the interval is symmetric around 4 and holds
    # both: half-width max(6 − 4, 4 − 3) = 2
    assert values == [4] and errors == [pytest.approx(2 / 1.959964)]
    values, _ = quantiles.released(Quantile("m", "PERCENTILE_CONT", "v", 0.5), domain, cdf, variances)
    assert values == [pytest.approx(4.5)]  # h = 9.5: x[9] = 4 (CDF 10 ≥ 10), x[10] = 5 (CDF 14 ≥ 11)
    empty, none = quantiles.released(Quantile("m", "MIN", "v", 0.0), domain, np.zeros((1, 10)), variances)
    assert empty == [None] and none == [None]  # a group without rows answers NULL


def test_a_quantile_never_carries_an_error_of_zero() -> None:
    """When the rank band falls inside one value (every row of the band on it), the interval is that value's
    own resolution — half a step either side for a range, the whole bin for bins — never ``21 ± 0``."""
    domain = ColumnDomain("v", "range", (0, 9))
    cdf = np.array([[0, 0, 0, 0, 100, 100, 100, 100, 100, 100]], dtype=float)  # 100 rows, all on 4
    values, errors = quantiles.released(Quantile("m", "PERCENTILE_DISC", "v", 0.5), domain, cdf, np.full((1, 10), 1.0))
    assert values == [4] and errors[0] == pytest.approx(0.5 / 1.959964)
    bins = ColumnDomain("v", "bins", (0, 10, 20, 40))
    cdf = np.array([[0, 100, 100]], dtype=float)
    for function, expected, half_width in (("PERCENTILE_DISC", "[10, 20)", 5), ("PERCENTILE_CONT", 15.05, 5.05)):
        values, errors = quantiles.released(Quantile("m", function, "v", 0.5), bins, cdf, np.full((1, 3), 1.0))
        assert values == [pytest.approx(expected)] and errors[0] == pytest.approx(half_width / 1.959964)  # the bin [10, 20)


def test_a_median_of_an_integer_column_has_an_interval_of_its_resolution(connection: dpsql.Connection) -> None:
    """Noise off, the rank band is one value: ``MEDIAN(age)`` is released with the interval [v − 0.5, v + 0.5]
    (was ``v ± 0``, interval [v, v])."""
    with dpsql.testing.noise_disabled():
        cursor = connection.cursor().execute("SELECT MEDIAN(age) FROM adult", epsilon=1e5)
    (median,), ((low, high),) = cursor.fetchall()[0], cursor.confidence_interval(0.95)[0]
    assert cursor.errors[0][0] > 0 and low <= median - 0.5 and high >= median + 0.5


def test_a_bins_quantile_has_a_numeric_interval(frame: pd.DataFrame) -> None:
    """A DISC quantile of a ``bins`` column answers with its bin's label; its interval is in numbers, around the
    bin's midpoint and holding the whole bin (``confidence_interval`` raised ValueError on the label)."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    connection.register("adult", frame, schema=ADULT_SCHEMA)  # income: bins [0, 10000, 50000, 100000, 1000000]
    with dpsql.testing.noise_disabled():
        cursor = connection.cursor().execute("SELECT QUANTILE_DISC(income, 0.5), MEDIAN(income) FROM adult", epsilon=1e5)
    (label, median), (disc, cont) = cursor.fetchall()[0], cursor.confidence_interval(0.95)[0]
    assert label == "[10000, 50000)" and (label.low, label.high) == (10000, 50000)
    assert disc[0] <= 10000 and disc[1] >= 50000 and (disc[0] + disc[1]) / 2 == pytest.approx(30000)
    assert cont[0] <= 10000 <= median <= 50000 <= cont[1]
    connection.close()


def _rank_errors(frame: pd.DataFrame, trials: int, variant: str) -> np.ndarray:
    """Per seeded run, group and fraction (0.1, 0.5) of ``QUANTILE_DISC``, the distance in rows from the
    target rank q·n to the released value's ranks [rows < value, rows ≤ value] (0 for a true quantile of data
    with ties). ``variant``: "projected" (dpsql), "raw" (the least-squares CDF inverted as it is) or "clipped"
    (the broken variant: negative cells of the noisy histogram set to 0 before inverting)."""
    schema = {"privacy_unit": None, "columns": {"g": {"categories": [0, 1, 2, 3]}, "v": {"range": [0, 255]}}}
    truth = {g: np.sort(group["v"].to_numpy()) for g, group in frame.groupby("g")}
    original = quantiles.monotone
    replacements = {
        "raw": lambda values, variances: np.asarray(values, dtype=float),
        "clipped": lambda values, variances: np.cumsum(np.maximum(np.diff(np.asarray(values, dtype=float), axis=1, prepend=0.0), 0.0), axis=1),
    }
    errors = []
    quantiles.monotone = replacements.get(variant, original)  # type: ignore[assignment]
    try:
        for seed in range(trials):
            connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
            with dpsql.testing.seeded(seed), cdf_path():
                connection.register("t", frame, schema=schema)
                sql = "SELECT g, QUANTILE_DISC(v, 0.1), QUANTILE_DISC(v, 0.5) FROM t GROUP BY g"
                rows = connection.cursor().execute(sql, epsilon=0.5).fetchall()
            for g, *released in rows:
                values = truth[g]
                for fraction, value in zip((0.1, 0.5), released):
                    below, at_most = np.searchsorted(values, value, side="left"), np.searchsorted(values, value, side="right")
                    target = fraction * len(values)
                    errors.append(max(below - target, target - at_most, 0.0))
            connection.close()
    finally:
        quantiles.monotone = original  # type: ignore[assignment]
    return np.array(errors).reshape(trials, len(rows), 2)


@pytest.fixture(scope="module")
def packed_rank_errors() -> dict[str, np.ndarray]:
    """250 rows per group packed into a few of 256 cells (the other cells empty), ε = 0.5, 10 seeded runs."""
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"g": np.repeat([0, 1, 2, 3], 250), "v": np.clip(rng.normal(220, 3, 1000).round(), 0, 255).astype(int)})
    return {variant: _rank_errors(frame, 10, variant) for variant in ("projected", "raw", "clipped")}


def test_inversion_does_not_clip_cells(packed_rank_errors: dict[str, np.ndarray]) -> None:
    """Clipping negative cells first (what the issue warns against) piles the noise of the empty cells below
    the data into the CDF: the rank error grows several-fold — the test fails on that broken variant."""
    honest, broken = packed_rank_errors["projected"].mean(), packed_rank_errors["clipped"].mean()
    assert honest < 8  # rows, of 250 per group (measured: 4.2; rank standard error 6–17 rows)
    assert broken > 5 * honest  # measured: 75 (25 at the 10th percentile, 125 at the median)


def test_projecting_the_cdf_beats_inverting_it_raw(packed_rank_errors: dict[str, np.ndarray]) -> None:
    """The monotone, non-negative projection of the CDF (``quantiles.monotone``) is closer to the true CDF
    than the least-squares CDF in the projection's norm; in rank it cuts the 10th percentile's error
    most, where the noise of 200 empty cells below the data makes the raw CDF cross early. The test
    fails on the raw inversion."""
    projected, raw = packed_rank_errors["projected"], packed_rank_errors["raw"]
    assert projected[..., 0].mean() < 0.6 * raw[..., 0].mean()  # measured: 6.2 vs 18.3 rows
    assert projected[..., 1].mean() < 1.3 * raw[..., 1].mean()  # the median, inside the data: 2.2 vs 2.0


def test_quantiles_by_a_column_without_declared_domain_equal_duckdb(frame: pd.DataFrame) -> None:
    """GROUP BY an unknown column (keys selected privately, then counted): the CDF is counted over the
    released keys like any count. One browser per person, so bounding keeps every row and noise off gives
    DuckDB's answers (every key released)."""
    one_browser = frame.assign(browser=frame["person_id"].map(lambda p: ["firefox", "chrome", "safari"][p % 3]))
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6, delta=1e-3))
    connection.register("adult", one_browser, schema=ADULT_SCHEMA)
    sql = "SELECT browser, MEDIAN(age), QUANTILE_DISC(age, 0.9), COUNT(*) FROM adult GROUP BY browser"
    with dpsql.testing.noise_disabled():
        released = connection.cursor().execute(sql, epsilon=1.0).fetchall()
    assert _normalised(released) == _normalised(_exact(sql, one_browser))
    connection.close()


def test_a_date_interval_is_in_whole_days_and_stays_in_the_calendar() -> None:
    from dpsql.result import confidence_intervals

    day = datetime.date(9999, 12, 30)
    ((interval,),) = confidence_intervals([(day,)], [(1.2,)], 0.95)  # 1.96 × 1.2 = 2.35 days → 3 days each way
    assert interval == (datetime.date(9999, 12, 27), datetime.date.max)


def test_the_rank_block_is_f_of_k_minus_q_times_the_non_null_total() -> None:
    domain = ColumnDomain("v", "range", (0, 2), nullable=True)  # cells 0, 1, 2 and the NULL cell
    expected = [[0.75, -0.25, -0.25, 0.0], [0.75, 0.75, -0.25, 0.0], [0.75, 0.75, 0.75, 0.0], [0.75, 0.75, 0.75, 1.0]]
    np.testing.assert_allclose(quantiles.rank_block(Prefix(4), domain, 0.25).matrix(), expected)
    masked = Explicit(np.tril(np.ones((4, 4))) * np.array([0.0, 1.0, 1.0, 1.0]))  # WHERE v > 0 folded into the CDF
    expected = [[0.0, -0.25, -0.25, 0.0], [0.0, 0.75, -0.25, 0.0], [0.0, 0.75, 0.75, 0.0], [0.0, 0.75, 0.75, 1.0]]
    np.testing.assert_allclose(quantiles.rank_block(masked, domain, 0.25).matrix(), expected)


def test_the_plan_prices_each_quantile_rank_error_with_its_covariance(connection: dpsql.Connection) -> None:
    """The rank standard error at cell k is that of F(k) − q·N, from the plan (``Plan.variances_of``): it
    differs from Var F(k) + q²·Var N, which leaves the covariance out, and it is what the error bars use."""
    seen = []
    original = quantiles.released

    def spy(item, domain, values, variances, rank_variances=None, chosen=None):  # type: ignore[no-untyped-def]
        seen.append((item.fraction, np.asarray(variances)[:, : domain.value_cells], rank_variances))
        return original(item, domain, values, variances, rank_variances, chosen)

    quantiles.released = spy  # type: ignore[assignment]
    try:
        connection.cursor().execute("SELECT sex, QUANTILE_CONT(age, 0.1), MEDIAN(age) FROM adult GROUP BY sex", epsilon=1.0)
    finally:
        quantiles.released = original  # type: ignore[assignment]
    assert [fraction for fraction, _, _ in seen] == [0.1, 0.5]
    for fraction, variances, ranks in seen:
        assert ranks is not None and np.all(np.isfinite(ranks)) and np.all(ranks[:, : variances.shape[1]] > 0)
        left_out = variances + fraction**2 * variances[:, -1:]
        assert not np.allclose(ranks[:, : variances.shape[1]], left_out, rtol=0.05)


def test_a_where_folded_into_the_cdf_is_folded_into_its_rank_error(connection: dpsql.Connection) -> None:
    """In a masks-mode batch, ``WHERE age > 40`` zeroes the CDF rows of ages ≤ 40, so there the rank error is
    −q·N alone and its variance the same at every such cell; the unmasked rank block (the broken variant)
    would give a variance growing with the cell."""
    seen = []
    original = quantiles.released

    def spy(item, domain, values, variances, rank_variances=None, chosen=None):  # type: ignore[no-untyped-def]
        seen.append((item, domain, rank_variances))
        return original(item, domain, values, variances, rank_variances, chosen)

    batch = ["SELECT sex, MEDIAN(age) FROM adult WHERE age > 40 AND age <= 75 GROUP BY sex", "SELECT race, MIN(age) FROM adult GROUP BY race"]
    quantiles.released = spy  # type: ignore[assignment]
    try:
        connection.workload(batch, epsilon=1.0)
    finally:
        quantiles.released = original  # type: ignore[assignment]
    item, domain, ranks = next(s for s in seen if s[0].fraction == 0.5)
    assert ranks is not None
    low = [cell for cell, age in enumerate(domain.labels()) if age <= 40]
    assert len(low) > 5 and np.allclose(ranks[:, low], ranks[:, low[:1]]) and np.all(ranks[:, low] > 0)
    assert not np.allclose(ranks[:, low[-1] + 10], ranks[:, low[0]])


def test_having_on_a_quantile_that_is_null_drops_the_group_as_sql_does() -> None:
    """A group with no rows has a NULL MAX; HAVING on it is unknown, so the group is not returned (also
    under NOT) — the old comparison raised after the charge (TypeError on the NULL) for such a group."""
    frame = make_adult(persons=200, seed=4)
    frame = frame[frame["race"] != 4]
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-6))
    connection.register("adult", frame, schema=ADULT_SCHEMA)
    with dpsql.testing.noise_disabled():
        for condition, expected in (("MAX(age) > 0", {0, 1, 2, 3}), ("NOT MAX(age) > 1000", {0, 1, 2, 3}),
                                    ("MAX(age) > 0 OR COUNT(*) >= 0", {0, 1, 2, 3, 4})):
            cursor = connection.cursor()
            cursor.execute(f"SELECT race, MAX(age) AS oldest, COUNT(*) AS n FROM adult GROUP BY race HAVING {condition}", epsilon=1.0)
            assert {row[0] for row in cursor.fetchall()} == expected, condition


def test_quantiles_of_a_range_of_a_hundred_thousand_values_equal_duckdb() -> None:
    """A fine domain is planned and priced through implicit operators (a tree, each rank error from interval
    variances): the old code built each quantile's rank block as a dense n × n matrix (80 GB here)."""
    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT CAST(hash(i) % 100000 AS BIGINT) AS v, CAST(i % 2 AS BIGINT) AS g FROM range(5000) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {"v": {"range": [0, 99999]}, "g": {"range": [0, 1]}}})
    items = ", ".join(f"QUANTILE_DISC(v, {q / 10})" for q in range(1, 10))
    sql = f"SELECT g, {items}, MEDIAN(v) FROM t GROUP BY g ORDER BY g"
    with dpsql.testing.noise_disabled():
        cursor = connection.cursor().execute(sql, epsilon=1.0)
        released = cursor.fetchall()
    assert _normalised(released) == _normalised(database.execute(sql).fetchall())
    assert all(e is not None and e >= 0 for row in cursor.errors for e in row[1:])


@pytest.mark.parametrize(
    "edges",
    [list(range(17, 92)), list(range(16, 96, 4)), [int(round(e)) for e in np.linspace(17, 91, 30)], [*range(17, 60), *range(60, 94, 2)]],
    ids=["width 1", "width 4", "rounded even split", "unequal widths"],
)
def test_many_bins_find_each_row_s_bin_by_division_or_binary_search(frame: pd.DataFrame, edges: list[int]) -> None:
    """A bins column with more bins than a flat CASE is worth is mapped by one integer division when its
    integer edges lie on a line (equal widths, an even split rounded), by nested CASEs (log₂ comparisons
    per row) otherwise: the same cells either way, so the DISC quantiles are DuckDB's values' bins."""
    schema = {**ADULT_SCHEMA, "columns": {**ADULT_SCHEMA["columns"], "age": {"bins": edges}}}  # type: ignore[dict-item]
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    connection.register("adult", frame, schema=schema)
    sql = "SELECT sex, QUANTILE_DISC(age, 0.1), QUANTILE_DISC(age, 0.5), QUANTILE_DISC(age, 0.9) FROM adult GROUP BY sex"
    with dpsql.testing.noise_disabled():
        rows = sorted(connection.cursor().execute(sql, epsilon=1.0).fetchall())
    labels = ColumnDomain("age", "bins", tuple(edges)).labels()
    assert rows == sorted((sex, *(labels[bisect.bisect_right(edges, a) - 1] for a in ages)) for sex, *ages in _exact(sql, frame))
    connection.close()


def test_edges_on_a_line_are_divided_not_searched() -> None:
    """The division needs integer edges ``e₀ + ⌊(k·W + B)/n⌋`` (equal widths, or an even split rounded);
    any other edges keep the binary search. Each found line gives every integer's cell exactly."""
    rounded = tuple(int(round(e)) for e in np.linspace(0, 500_001, 1025))
    for edges in (tuple(range(0, 500_737, 489)), rounded, tuple(range(16, 96, 4))):
        bins, span, offset = bounded._edges_on_a_line(edges)
        values = np.arange(edges[0], edges[-1])
        cells = (bins * (values - edges[0] + 1) - offset - 1) // span
        assert np.array_equal(cells, np.searchsorted(edges, values, side="right") - 1)
    assert bounded._edges_on_a_line((3, 5, 8, 13, 21)) is None
    assert bounded._edges_on_a_line((0.0, 1.5, 3.0)) is None  # floats: a division could land beside an edge
    assert bounded._edges_on_a_line((0, 1 << 52)) is None  # beyond exact doubles (SQLite divides in doubles)
