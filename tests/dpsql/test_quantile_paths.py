"""Quantiles the planner gives to an exponential mechanism (``dpsql.sql.quantile_paths``): chosen before the
read from public facts, charged once with the statement, released per group with the CDF's band as error."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.schema
import dpsql.sql.parse
import dpsql.testing
from dpsql.sql import quantile_paths, quantiles
from planner import quantile_mechanisms

SCHEMA = {"privacy_unit": None, "columns": {"g": {"categories": [0, 1, 2, 3]}, "v": {"range": [0, 100]}}}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    return pd.DataFrame({"g": np.repeat([0, 1, 2], [40, 200, 800]), "v": np.clip(rng.normal(50, 15, 1040).round(), 0, 100).astype(int)})


@pytest.fixture()
def connection(frame: pd.DataFrame):  # noqa: ANN201
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6), reuse=False)
    conn.register("t", frame, schema=SCHEMA)
    yield conn
    conn.close()


def _paths(connection: dpsql.Connection, sql: str, **cost: float) -> list[tuple]:
    rows = connection.cursor().execute("EXPLAIN " + sql, **(cost or {"epsilon": 1.0})).fetchall()
    return [r for r in rows if r[0] == "mechanism"]


def test_a_median_per_group_goes_to_permute_and_flip_and_deciles_to_the_cdf(connection: dpsql.Connection) -> None:
    """From public facts only (EXPLAIN reads nothing): one median — the exponential path at 90 % of ε, the
    linear plan (the CDF for each group's count and the error bar) at the rest; nine deciles — the CDF."""
    (median,) = _paths(connection, "SELECT g, MEDIAN(v) FROM t GROUP BY g")
    assert median[1] == "v" and median[3].startswith("exponential: permute-and-flip per group at ε 0.9") and "#mechanism" in median[3]
    rows = connection.cursor().execute("EXPLAIN SELECT g, MEDIAN(v) FROM t GROUP BY g", epsilon=1.0).fetchall()
    assert [r for r in rows if r[0] == "strategy"][0][3].startswith("0.1-DP")
    deciles = ", ".join(f"QUANTILE_DISC(v, {k / 10})" for k in range(1, 10))
    (cdf,) = _paths(connection, f"SELECT g, {deciles} FROM t GROUP BY g")
    assert cdf[3].startswith("CDF;")
    assert not _paths(connection, "SELECT g, MIN(v), MEDIAN(v) FROM t GROUP BY g")  # MIN reads the CDF's end
    assert connection.budget_spent().statements == 0


def test_the_statement_is_charged_once_and_noise_off_gives_duckdbs_answers(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    sql = "SELECT g, MEDIAN(v) AS m, QUANTILE_DISC(v, 0.5) AS d FROM t GROUP BY g"
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute(sql, epsilon=0.5).fetchall()
    exact = frame.groupby("g")["v"]
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    for g, median, disc in rows[:3]:
        values = np.sort(exact.get_group(g).to_numpy())
        assert median == pytest.approx(float(np.median(values)))
        assert disc == values[math.ceil(0.5 * len(values)) - 1]
    spent = connection.budget_spent()
    assert spent.statements == 1 and spent.epsilon == pytest.approx(0.5)


def test_released_medians_are_close_and_their_intervals_hold_the_band(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """Seeded releases at ε = 1: the tie-aware rank error of the large groups' medians is within a few rows,
    each error makes value ± 1.96·error hold the answer's CDF band (so the exact median, in 20 of 20 runs here),
    and the 0-row group gets a value with an error spanning the domain."""
    truth = {g: np.sort(group.to_numpy()) for g, group in frame.groupby("g")["v"]}
    covered, errors = [], []
    for seed in range(20):
        with dpsql.testing.seeded(seed):
            cursor = connection.cursor().execute("SELECT g, MEDIAN(v) FROM t GROUP BY g", epsilon=1.0)
        for (g, value), (_, error), (_, band) in zip(cursor.fetchall(), cursor.errors, cursor.confidence_interval(0.95)):
            if g == 3:  # no rows: NULL when the noisy count is not positive, else a value with its error bar
                assert (value is None) == (error is None) and (error is None or error > 0)
                continue
            values = truth[g]
            below, at_most = np.searchsorted(values, value, "left"), np.searchsorted(values, value, "right")
            errors.append(max(below - 0.5 * len(values), 0.5 * len(values) - at_most, 0.0))
            covered.append(band[0] <= float(np.median(values)) <= band[1])
    assert np.mean(errors) < 2.0 and all(covered)


def test_a_group_whose_noisy_count_is_not_positive_gets_the_mechanisms_value_and_the_whole_domain_as_error() -> None:
    domain = dpsql.schema.ColumnDomain("v", "range", (0, 100))
    item = dpsql.sql.parse.Quantile("m", "PERCENTILE_CONT", "v", 0.5)
    cdf, variances = np.zeros((2, 101)), np.ones((2, 101))
    cdf[1] = np.arange(101) >= 30  # one row at 30
    values, errors = quantiles.released(item, domain, cdf, variances, chosen=np.array([17, 31]))
    assert values == [17.0, 31.0] and errors[0] == pytest.approx(100 / quantiles.BAND, rel=1e-6)
    assert 1.96 * errors[1] >= 1.0  # the band [30, 30] and the answer 31


def test_the_mechanism_draws_from_the_test_seed_and_else_from_os_entropy(connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs under one seed are equal; without a seed the mechanism gets no generator (OS entropy)."""
    sql = "SELECT g, MEDIAN(v) FROM t GROUP BY g"
    runs = []
    for _ in range(2):
        with dpsql.testing.seeded(9):
            runs.append(connection.cursor().execute(sql, epsilon=1.0).fetchall())
    assert runs[0] == runs[1]
    sources = []
    original = quantile_mechanisms.ExponentialQuantiles.release
    monkeypatch.setattr(quantile_mechanisms.ExponentialQuantiles, "release", lambda self, h, rng=None: sources.append(rng) or original(self, h, rng))
    connection.cursor().execute(sql, epsilon=1.0)
    assert sources == [None]


def test_under_zcdp_the_exponential_mechanism_spends_its_share_of_rho(frame: pd.DataFrame) -> None:
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-6), noise="gaussian", reuse=False)
    conn.register("t", frame, schema=SCHEMA)
    (path,) = _paths(conn, "SELECT g, MEDIAN(v) FROM t GROUP BY g", rho=0.5)
    assert path[3].startswith("exponential: exponential mechanism per group at ρ 0.45")
    rows = conn.cursor().execute("SELECT g, MEDIAN(v) FROM t GROUP BY g", rho=0.5).fetchall()
    assert len(rows) == 4 and conn.budget_spent().rho == pytest.approx(0.5)
    conn.close()


def test_a_column_in_several_grouping_sets_or_masked_by_a_where_stays_on_the_cdf(connection: dpsql.Connection) -> None:
    assert not _paths(connection, "SELECT g, MEDIAN(v) FROM t GROUP BY ROLLUP (g)")
    batch = connection.workload(["SELECT g, MEDIAN(v) FROM t WHERE v > 20 GROUP BY g", "SELECT COUNT(*) FROM t"], explain=True)
    assert not [r for r in batch[0].fetchall() if r[0] == "mechanism" and r[3].startswith("exponential")]


def test_histograms_follow_the_product_rows(frame: pd.DataFrame) -> None:
    """Two GROUP BY columns: each group's released cell lands on that group's row (at a large ε the exact
    median cell of every group)."""
    data = frame.assign(h=frame.index % 2)
    schema = {"privacy_unit": None, "columns": {**SCHEMA["columns"], "h": {"categories": [0, 1]}}}  # type: ignore[dict-item]
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6), reuse=False)
    conn.register("t", data, schema=schema)
    with dpsql.testing.seeded(1):
        rows = conn.cursor().execute("SELECT h, g, QUANTILE_DISC(v, 0.5) FROM t GROUP BY h, g", epsilon=500.0).fetchall()
    assert _paths(conn, "SELECT h, g, QUANTILE_DISC(v, 0.5) FROM t GROUP BY h, g", epsilon=500.0)[0][3].startswith("exponential:")
    for h, g, value in rows:
        values = np.sort(data.loc[(data.h == h) & (data.g == g), "v"].to_numpy())
        if values.size:
            below, at_most = np.searchsorted(values, value, "left"), np.searchsorted(values, value, "right")
            assert below <= 0.5 * len(values) <= at_most
    conn.close()


def test_the_choice_is_made_before_the_read(connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement prepared with no backend read: the choice is memoised with the compiled batch, and release
    only reads what prepare decided (the mechanism's marginal among the plan's)."""
    calls = []
    original = quantile_paths.choose
    monkeypatch.setattr(quantile_paths, "choose", lambda *a, **k: calls.append(1) or original(*a, **k))
    for _ in range(3):
        connection.cursor().execute("SELECT g, MEDIAN(v) FROM t GROUP BY g", epsilon=1.0)
    assert calls == [1]
