"""Inputs that crashed with a non-dpsql exception, each now a clear dpsql error.

The last cases crashed in the statement pipeline before it was rewritten; they are dpsql
errors now.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

import dpsql
from dpsql import cli
from dpsql.accountant import MAX_EPSILON, MAX_RHO, MIN_EPSILON, MIN_RHO, Cost

FRAME = pd.DataFrame({"sex": ["F", "M", "F"], "age": [20, 30, 40], "browser": ["x", "y", "x"]})
SCHEMA = {"privacy_unit": None, "columns": {"sex": {"categories": ["F", "M"]}, "age": {"range": [0, 100]}, "browser": "unknown"}}
BY_SEX = "SELECT sex, COUNT(*) FROM t GROUP BY sex"
BY_AGE = "SELECT age, COUNT(*) FROM t GROUP BY age"


def connection(**options: object) -> dpsql.Connection:
    budget = options.pop("budget", dpsql.Budget(10.0, 1e-6))
    opened = dpsql.connect(budget=budget, **options)  # type: ignore[arg-type]
    opened.register("t", FRAME, schema=SCHEMA)
    return opened


OUT_OF_RANGE = [10**400, 1e300, -1e300, 5e-324, 1e-300, 0.0, MAX_EPSILON * 2, MIN_EPSILON / 2]


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=repr)
def test_epsilons_out_of_range_are_programming_errors(value: float) -> None:
    """Before: OverflowError (int too large to convert to float; ε² of 1e300) or an internal NaN
    message with numpy warnings (ε = 5e-324)."""
    for make in (lambda: dpsql.Budget(value), lambda: Cost.pure(value)):
        with pytest.raises(dpsql.ProgrammingError, match="epsilon must (be a finite number|lie in)"):
            make()
    with pytest.raises(dpsql.ProgrammingError, match="epsilon must"):
        connection().cursor().execute(BY_SEX, epsilon=value)
    with pytest.raises(dpsql.ProgrammingError, match="epsilon must"):
        connection(default_epsilon=value)


@pytest.mark.parametrize("value", [10**400, 1e300, 5e-324, 1e-300, 0.0, MAX_RHO * 2, MIN_RHO / 2], ids=repr)
def test_rhos_and_deltas_out_of_range_are_programming_errors(value: float) -> None:
    with pytest.raises(dpsql.ProgrammingError, match="rho must (be a finite number|lie in)"):
        connection(noise="gaussian").cursor().execute(BY_SEX, rho=value)
    if value >= 1 or value < 0:
        with pytest.raises(dpsql.ProgrammingError, match="delta must (be a finite number|lie in)"):
            dpsql.Budget(1.0, value)


def test_a_subnormal_delta_is_a_budget() -> None:
    """ln(1/δ) overflowed to inf for δ = 5e-324, and the budget's ρ became NaN."""
    assert dpsql.Budget(1.0, 5e-324).rho == pytest.approx((math.sqrt(744.44007 + 1) - math.sqrt(744.44007)) ** 2, rel=1e-6)


@pytest.mark.filterwarnings("error")  # no numpy warning on the way either
def test_the_extremes_of_the_accepted_range_work() -> None:
    with dpsql.testing.noise_disabled():
        rows = connection(budget=dpsql.Budget(MAX_EPSILON)).cursor().execute(BY_SEX, epsilon=MAX_EPSILON).fetchall()
    assert rows == [("F", pytest.approx(2.0)), ("M", pytest.approx(1.0))]
    cursor = connection().cursor().execute(BY_SEX, epsilon=MIN_EPSILON)  # noise of scale 1e9, but exact and finite
    assert [row[0] for row in cursor.fetchall()] == ["F", "M"] and all(1e8 < error[1] < 1e11 for error in cursor.errors)


def test_a_schema_as_long_json_text_is_parsed_not_opened() -> None:
    """Before: OSError File name too long (the text was tried as a path first)."""
    document = {"privacy_unit": None, "columns": {f"column_{i}": {"categories": ["a", "b"]} for i in range(40)}}
    text = json.dumps(document)
    assert len(text.encode()) > 255
    assert dpsql.Schema.load(text).column_names == tuple(document["columns"])
    assert dpsql.Schema.load(json.dumps(SCHEMA)).column("age").size == 101  # short JSON text too
    with pytest.raises(dpsql.ProgrammingError, match="cannot parse"):
        dpsql.Schema.load("{" + "x" * 300)


@pytest.mark.parametrize("bounds", [[-(10**30), 10**30], [0, 2**40], [0, 1 << 20]], ids=str)
def test_an_enormous_range_is_refused_when_the_schema_is_loaded(bounds: list[int]) -> None:
    """Before: ValueError Maximum allowed size exceeded (GROUP BY), MemoryError (2^40)."""
    with pytest.raises(dpsql.ProgrammingError, match="(has more than 1048576 values|within ±2\\^62).*declare bins instead"):
        dpsql.Schema.load({"columns": {"age": {"range": bounds}}})
    assert dpsql.Schema.load({"columns": {"age": {"range": [1, 1 << 20]}}}).column("age").size == 1 << 20


def test_bins_beyond_the_doubles_are_refused() -> None:
    with pytest.raises(dpsql.ProgrammingError, match="finite numeric edges"):
        dpsql.Schema.load({"columns": {"income": {"bins": [0, 10**400]}}})


@pytest.mark.parametrize(("arguments", "message"), [(["--persons", "-5"], "between 1 and 10,000,000 persons"),
                                                     (["--persons", "0"], "between 1 and"), (["--seed", "-1"], "non-negative")])
def test_the_demo_refuses_impossible_sizes(arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ValueError negative dimensions are not allowed."""
    assert cli.main(["demo", *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_selection_delta_below_the_grid_is_a_programming_error() -> None:
    """Before: OverflowError cannot convert float infinity to integer (selection_delta = 1e-320)."""
    opened = connection()
    opened.selection_delta = 1e-320
    with pytest.raises(dpsql.ProgrammingError, match="delta per partition .* must be 0 or at least 1e-15"):
        opened.cursor().execute("SELECT browser, COUNT(*) FROM t GROUP BY browser", epsilon=1.0)
    assert opened.budget_spent().statements == 0


# -- in the statement pipeline's files ---------------------------------------------------------------


def test_count_without_an_argument() -> None:
    """AttributeError 'NoneType' object has no attribute 'sql' (dpsql/sql/parse.py)."""
    with pytest.raises(dpsql.ProgrammingError):
        connection().cursor().execute("SELECT COUNT() FROM t", epsilon=1.0)


@pytest.mark.parametrize("parameters", [None, 5])
def test_executemany_without_a_sequence(parameters: object) -> None:
    """TypeError 'NoneType' object is not iterable (Cursor.executemany in dpsql/connection.py)."""
    with pytest.raises(dpsql.ProgrammingError):
        connection().cursor().executemany("SELECT sex, COUNT(*) FROM t WHERE age > ? GROUP BY sex", parameters, epsilon=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", [[1, 10**400], [1, 1e300], 0], ids=["int-beyond-doubles", "1e300", "not-a-list"])
def test_bad_statement_weights(weights: object) -> None:
    """OverflowError (math.isfinite of 10**400 in batch._weights; weight² of 1e300 in the planner, outside
    batch._plan's except) and TypeError (len of an int): dpsql/batch.py."""
    with pytest.raises(dpsql.ProgrammingError):
        connection().workload([BY_SEX, BY_AGE], epsilon=1.0, weights=weights)  # type: ignore[arg-type]


def test_lopsided_weights_with_reuse() -> None:
    """KeyError ('sex',) from reuse._answer_product AFTER the charge: the plan measures only (age) and
    answers sex from it, and the store has no coefficients keyed (sex,). dpsql/batch.py + dpsql/reuse.py."""
    opened = connection()
    results = opened.workload([BY_SEX, BY_AGE], epsilon=1.0, weights=[1, 1e5])
    assert [row[0] for row in results[0].rows] == ["F", "M"] and not math.isnan(results[0].rows[0][1])


def test_a_cube_with_more_cells_than_can_be_returned_is_refused_in_prepare() -> None:
    """Before: numpy's MemoryError (an 11-column CUBE of Adult asked for 51.3 TiB building its row keys in
    dpsql/sql/compile.py). Refused from the declared domains, before anything is read or charged; a batch
    whose grouping sets together exceed the limit too."""
    columns = {f"c{i}": {"categories": list(range(40))} for i in range(8)}
    schema = {"columns": columns | {"a": {"range": [1, 2048]}, "b": {"range": [1, 8193]}}}
    frame = pd.DataFrame({name: [0, 1] for name in columns} | {"a": [1, 2], "b": [1, 2]})
    opened = dpsql.connect(budget=dpsql.Budget(epsilon=1.0))
    opened.register("t", frame, schema=schema)
    names = ", ".join(columns)
    for explain in ("", "EXPLAIN "):
        with pytest.raises(dpsql.NotSupportedError, match=r"GROUP BY \(c0, c1, .*, c7\) has 6,553,600,000,000 cells: dpsql returns "
                           r"at most 33,554,432 rows per statement or batch; group by fewer or coarser columns"):
            opened.cursor().execute(f"{explain}SELECT {names}, COUNT(*) FROM t GROUP BY CUBE ({names})", epsilon=0.5)
    with pytest.raises(dpsql.NotSupportedError, match=r"GROUP BY \(b, a\) has 16,779,264 cells beside the other grouping sets"):
        opened.workload(["SELECT a, b, COUNT(*) FROM t GROUP BY a, b", "SELECT b, a, COUNT(*) FROM t GROUP BY b, a"], epsilon=0.5)
    assert opened.budget_spent().statements == 0
