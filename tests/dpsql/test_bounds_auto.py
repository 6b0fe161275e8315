"""``bounds: auto`` (``dpsql.sql.clipping.AutomaticBounds``, ``dpsql.sql.magnitudes``): no declared end; each
``auto`` end is a clip chosen privately from the values' magnitude codes, stated in EXPLAIN and the error bars."""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
import dpsql.testing
import planner
from dpsql.sql import magnitudes
from dpsql.sql.clipping import design
from dpsql.sql.moments import ValueEncoding
from duckdb_answers import assert_same_rows, duckdb_rows


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    profit = np.concatenate([np.round(rng.normal(2_000, 3_000, 3000)), [90_000, -60_000]]).astype("int64")
    return pd.DataFrame({"g": rng.integers(0, 2, profit.size), "v": pd.array(profit, dtype="Int64")})


def _connection(frame: pd.DataFrame, bounds: object) -> dpsql.Connection:
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1e6))
    conn.register("t", frame, schema={"privacy_unit": None, "columns": {"g": {"categories": [0, 1]}, "v": {"bounds": bounds}}})
    return conn


def _clips(explanation: str) -> dict[str, float]:
    found = re.findall(r"clip: v = (-?[0-9.e+]+) — released: the values were clamped (below|above)", explanation)
    return {where: float(value) for value, where in found}


@pytest.mark.parametrize(("bounds", "message"), [
    (["auto"], "bounds must be"),
    ("automatic", "bounds must be"),
    (["auto", 2.0**60], "beyond"),
])
def test_malformed_auto_bounds_are_refused(bounds: object, message: str) -> None:
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match=message):
        conn.register("t", pd.DataFrame({"v": [1]}), schema={"privacy_unit": None, "columns": {"v": {"bounds": bounds}}})


def test_clip_auto_beside_auto_bounds_is_refused() -> None:
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    with pytest.raises(dpsql.ProgrammingError, match="drop clip: auto"):
        conn.register("t", pd.DataFrame({"v": [1]}), schema={"privacy_unit": None, "columns": {"v": {"bounds": "auto", "clip": "auto"}}})


def test_a_double_column_is_refused_with_the_envelope_to_declare() -> None:
    """A DOUBLE column fixes no spacing of its values, so no lowest clip is public: declare an envelope."""
    conn = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    conn.register("t", pd.DataFrame({"v": [1.5, 2.5]}), schema={"privacy_unit": None, "columns": {"v": {"bounds": "auto"}}})
    with pytest.raises(dpsql.NotSupportedError, match=r"bounds: \[lo, hi\], clip: auto"):
        conn.cursor().execute("SELECT AVG(v) FROM t", epsilon=1.0)
    assert conn.budget_spent().statements == 0


@pytest.mark.parametrize("bounds", ["auto", [-100_000, "auto"], ["auto", 100_000]])
def test_noise_off_equals_duckdb_on_the_values_clamped_to_the_clips(frame: pd.DataFrame, bounds: object) -> None:
    """With the noise off each auto end is the mechanism's most likely clip (stated in the explanation), and the
    answers are DuckDB's on the values clamped there and put on 4096 steps of the clips' width."""
    sql = "SELECT g, SUM(v), AVG(v), VAR_POP(v), STDDEV(v) FROM t GROUP BY g"
    with dpsql.testing.noise_disabled():
        cursor = _connection(frame, bounds).cursor().execute(sql, epsilon=1.0)
        released = cursor.fetchall()
    clips = _clips(cursor.explanation)
    low, high = clips.get("below", -100_000.0), clips.get("above", 100_000.0)
    values = frame["v"].dropna().astype(float)
    if isinstance(bounds, str) or bounds[0] == "auto":
        assert -66_000 < low < -3_000 and (values < low).sum() <= 60  # 2 % of the rows at most
    if isinstance(bounds, str) or bounds[1] == "auto":
        assert 7_000 < high < 99_000 and (values > high).sum() <= 60
    clamped = frame["v"].astype("float64").clip(low, high)
    gridded = frame.assign(v=np.floor((clamped - low) / (high - low) * 4096 + 0.5) * (high - low) / 4096 + low)
    assert_same_rows(released, duckdb_rows(sql + " ORDER BY g", {"t": gridded})[1], ordered=True)


def test_magnitude_codes_read_back_within_their_rounding() -> None:
    """DuckDB's codes of values across the envelope (powers of two, their neighbours, negatives, 0, beyond
    2^53) read back within ``magnitudes.rounding`` of the value clamped to the envelope."""
    values = [0.0, 1e-12, 1.0, 2.0, 3.0, -4.0, 4.0 - 1e-9, 1023.0, 1024.0, -1025.0, 0.3, 12345.678, -7e9, 2.0**52, 2.0**53, 2.0**60, -(2.0**70)]
    node = magnitudes.code(__import__("sqlglot").exp.column("v"), -(2.0**53), 2.0**53, 0.0)
    database = duckdb.connect()
    database.register("t", pd.DataFrame({"v": values}))
    codes = np.array([row[0] for row in database.execute(f"SELECT {node.sql('duckdb')} FROM t").fetchall()])
    clamped = np.clip(values, -(2.0**53), 2.0**53)
    back = magnitudes.values(codes, 0.0)
    assert np.all(np.abs(back - clamped) <= np.array([magnitudes.rounding(abs(v)) for v in clamped]))
    assert codes[0] == 0 and np.all(np.diff(codes[np.argsort(clamped)]) >= 0)  # order kept


def test_explain_states_the_ends_and_the_share(frame: pd.DataFrame) -> None:
    conn = _connection(frame, "auto")
    rows = conn.cursor().execute("EXPLAIN SELECT g, AVG(v) FROM t GROUP BY g", epsilon=1.0).fetchall()
    (clip,) = [r for r in rows if r[0] == "clip"]
    assert clip[2] == pytest.approx(planner.CLIP_SHARE) and "a lower and an upper clip at ε 0.075 each" in clip[3]
    assert "spacing 1" in clip[3] and conn.budget_spent().statements == 0


def test_the_error_bars_assume_the_clipped_rows_of_each_end() -> None:
    """Each end's mechanism spends half the clips' share: the error bars take 3 + 2k/(ε/2) rows beyond the
    ends, in the width between them, and the codes' rounding."""
    encoding = ValueEncoding("v", -(2.0**53), 2.0**53, 4096, 1, True, exact=False, auto_ends=(True, True), resolution=1.0)
    chosen = design(encoding, planner.Privacy.laplace(2.0), 1, slope=1.0)  # the noise slope is clip: auto's alone
    assert chosen is not None
    clipped = chosen.clipped((-10.0, 1000.0))
    assert (clipped.low, clipped.high, clipped.clipped_excess) == (-10.0, 1000.0, 0.5)
    assert clipped.clipped_rows == pytest.approx(3 + 2 / (planner.CLIP_SHARE * 2.0 / 2), rel=1e-4)
    assert clipped.rounding == pytest.approx(1010 / 8192 + magnitudes.rounding(1000.0))


def test_released_clips_land_near_the_tails_and_are_charged_once(frame: pd.DataFrame) -> None:
    conn = _connection(frame, "auto")
    with dpsql.testing.seeded(5):
        cursor = conn.cursor().execute("SELECT g, AVG(v) FROM t GROUP BY g", epsilon=20.0)
    clips = _clips(cursor.explanation)
    assert -66_000 < clips["below"] < -5_000 and 5_000 < clips["above"] < 99_000
    assert conn.budget_spent().epsilon == pytest.approx(20.0) and conn.budget_spent().statements == 1
