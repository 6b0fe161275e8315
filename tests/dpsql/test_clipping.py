"""``clip: auto`` (``dpsql.sql.clipping``): a private clip within loose bounds, released in the statement's
one charge, stated in EXPLAIN and the explanation, and in the error bars as an estimated bias."""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
import planner
from dpsql.sql.clipping import design
from dpsql.sql.moments import ValueEncoding
from planner import UPPER_CLIP_SHARE


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(8)
    income = np.concatenate([rng.lognormal(10, 0.8, 3000).round(), [900_000, 1_200_000], [None] * 20])
    return pd.DataFrame({"g": rng.integers(0, 2, income.size), "v": income})


SCHEMA = {"privacy_unit": None, "columns": {"g": {"categories": [0, 1]}, "v": {"bounds": [0, 10_000_000], "clip": "auto"}}}


@pytest.fixture()
def connection(frame: pd.DataFrame):  # noqa: ANN201
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    conn.register("t", frame, schema=SCHEMA)
    yield conn
    conn.close()


@pytest.mark.parametrize(("spec", "message"), [
    ({"bounds": [0, 1], "clip": "yes"}, "clip must be 'auto'"),
    ({"categories": [1, 2], "clip": "auto"}, "declare them"),
])
def test_clip_needs_auto_and_bounds(spec: dict[str, object], message: str) -> None:
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match=message):
        conn.register("t", pd.DataFrame({"v": [1]}), schema={"privacy_unit": None, "columns": {"v": spec}})


def test_explain_states_the_clip_and_its_share(connection: dpsql.Connection) -> None:
    rows = connection.cursor().execute("EXPLAIN SELECT g, AVG(v) FROM t GROUP BY g", epsilon=1.0).fetchall()
    (clip,) = [r for r in rows if r[0] == "clip"]
    assert clip[1] == "v" and clip[2] == pytest.approx(UPPER_CLIP_SHARE) and "upper clip in [0, 1e+07] at ε 0.1," in clip[3] and "#clip" in clip[3]
    assert "least predicted error" in clip[3] and re.search(r"noise \(\d+(\.\d+)? rows of clip width\)", clip[3])
    assert [r for r in rows if r[0] == "strategy"][0][3].startswith(f"{1 - UPPER_CLIP_SHARE:g}-DP")
    assert connection.budget_spent().statements == 0


def test_noise_off_clamps_at_the_declared_bounds_as_duckdb(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """With the noise off the clip is the declared upper bound: the answers are DuckDB's on the values clamped
    to the bounds, read on the base grid (2^22 steps) and put on the clip's (4096 steps of its width), each to
    the nearest point, ties up."""
    sql = "SELECT g, SUM(v), AVG(v), VAR_POP(v), STDDEV(v) FROM t GROUP BY g"
    with dpsql.testing.noise_disabled():
        released = connection.cursor().execute(sql, epsilon=1.0).fetchall()
    base = np.floor(frame["v"].astype(float).clip(0, 10_000_000) * 2**22 / 10_000_000 + 0.5)
    gridded = frame.assign(v=np.floor((2 * 4096 * base + 2**22) / (2 * 2**22)) * 10_000_000 / 4096)
    database = duckdb.connect()
    database.register("t", gridded)
    exact = database.execute(sql + " ORDER BY g").fetchall()
    for mine, theirs in zip(released, exact):
        assert mine[0] == theirs[0]
        np.testing.assert_allclose(mine[1:], theirs[1:], rtol=1e-6)


def test_a_released_clip_is_stated_and_clamps_the_values(connection: dpsql.Connection, frame: pd.DataFrame) -> None:
    """At a large ε the noise is too small for clipping any row to pay: the clip lands at or above the largest value
    (above it the law falls as width^-K, K = ε·λ·20 ≈ 5 for two groups whatever ε, λ falling as 1/ε), the
    explanation states it, and AVG is the mean of the values clamped there (to the clip grid's resolution)."""
    with dpsql.testing.seeded(3):
        cursor = connection.cursor().execute("SELECT g, AVG(v) FROM t GROUP BY g", epsilon=2000.0)
    (line,) = [line for line in cursor.explanation.splitlines() if line.startswith("clip: v = ") and "released" in line]
    clip = float(re.match(r"clip: v = ([0-9.e+]+)", line).group(1))  # type: ignore[union-attr]
    values = frame["v"].dropna().astype(float)
    assert values.max() * 0.9999 <= clip <= values.max() * 1.5
    for g, avg in cursor.fetchall():
        group = frame.loc[frame["g"] == g, "v"].dropna().astype(float)
        assert avg == pytest.approx(group.clip(upper=clip).mean(), rel=2e-3)


def test_error_bars_add_the_estimated_clipping_bias() -> None:
    encoding = ValueEncoding("v", 0.0, 1000.0, 4096, 1, False)
    values = np.array([[100.0, 30.0, 130.0], [300.0, 60.0, 360.0]])  # C, U, C + U per group
    variances = np.array([[4.0, 1.0, 5.0], [4.0, 1.0, 5.0]])
    _, plain = encoding.released("AVG", values, variances)
    _, biased = ValueEncoding("v", 0.0, 1000.0, 4096, 1, False, clipped_rows=3.0, clipped_excess=0.5).released("AVG", values, variances)
    bias = 3.0 * 0.5 * 1000.0 / 400.0  # three rows half a width above, over the 400 rows of the branch
    np.testing.assert_allclose(np.square(biased), np.square(plain) + bias**2)


def test_a_clipped_measurement_is_never_kept(connection: dpsql.Connection) -> None:
    for _ in range(2):
        cursor = connection.cursor().execute("SELECT g, AVG(v) FROM t GROUP BY g", epsilon=1.0)
        assert "answered: measured" in cursor.explanation
    assert connection.budget_spent().statements == 2


def test_under_zcdp_the_clip_spends_its_share_of_rho(frame: pd.DataFrame) -> None:
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=100.0, delta=1e-6), noise="gaussian")
    conn.register("t", frame, schema=SCHEMA)
    rows = conn.cursor().execute("SELECT g, SUM(v), STDDEV(v) FROM t GROUP BY g", rho=0.5).fetchall()
    assert len(rows) == 2 and all(r[1] > 0 for r in rows) and conn.budget_spent().rho == pytest.approx(0.5)
    conn.close()


def test_the_error_bars_assume_the_rows_the_clip_mechanism_cannot_tell_apart() -> None:
    """At ε = 2 the clip spends 0.2: the error bars take 3 + 1/0.2 rows as clipped (its temperature above 3)."""
    encoding = ValueEncoding("v", 0.0, 1000.0, 4096, 1, False, clip_base=1000)
    clip = design(encoding, planner.Privacy.laplace(2.0), 1, slope=2.5)
    assert clip is not None
    clipped = clip.clipped(500)
    assert clipped.high == 500.0 and clipped.clipped_excess == 0.5
    assert clipped.clipped_rows == pytest.approx(3 + 1 / (UPPER_CLIP_SHARE * 2.0), rel=1e-4)  # ε rounded to 2^-16 steps


def test_the_clip_weighs_the_noise_its_plan_predicts(connection: dpsql.Connection) -> None:
    """The mechanism's noise slope is the plan's: √(2/π)·sd of each group's sum of clip widths, summed over the
    groups. One grouping set of two groups, AVG: each group's C, U cells measured at ε·0.9 (sensitivity 1 after
    the scale) — the slope the clip reads equals that of the plan's own variances, and a CUBE's is the mean over
    its grouping sets."""
    from dpsql.sql import clipping

    seen: list[float] = []
    original = clipping.noise_slope

    def spy(batch, plan):  # noqa: ANN001, ANN202
        seen.append(original(batch, plan))
        width = len(batch.encoding.block())
        held = [v for p, v in zip(batch.workload.products, plan.query_variances()) if any(batch.encoding.attribute in f.attributes for f in p.factors)]
        expected = np.mean([np.sqrt(np.asarray(v).reshape(-1, width)[:, 1]).sum() for v in held]) * np.sqrt(2 / np.pi) / batch.scale
        assert seen[-1] == pytest.approx(expected) and seen[-1] > 0
        return seen[-1]

    clipping.noise_slope = spy
    try:
        connection.cursor().execute("SELECT g, AVG(v) FROM t GROUP BY g", epsilon=1.0)
        connection.cursor().execute("SELECT g, AVG(v) FROM t GROUP BY CUBE (g)", epsilon=1.0)
    finally:
        clipping.noise_slope = original
    assert len(seen) == 2 and seen[0] > seen[1] / 2
