"""Work that grows with the input grows linearly: long IN lists, OR chains and parameter lists, many
categories, wide batches, and a repeated batch answered without redoing its work.

These tests count work (calls, SQL terms, engine statements) rather than time it: the times themselves
are printed by ``benchmarks/latency.py`` and guarded by ``benchmarks/regress.py``."""

from __future__ import annotations

import itertools
import math

import numpy as np

import duckdb
import pytest

import dpsql
import dpsql.testing
from dpsql import pipeline
from dpsql.schema import ColumnDomain
from dpsql.sql import bounded
from dpsql.sql import compile as compile_module
from dpsql.sql import literals
from recording_backend import RecordingBackend

VALUES = 2_000  # cells of the range column


@pytest.fixture()
def wide_range() -> dpsql.Connection:
    database = duckdb.connect()
    database.execute(f"CREATE TABLE t AS SELECT i % {VALUES} AS v, i % 7 AS g FROM range(20000) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {"v": {"range": [0, VALUES - 1]}, "g": {"range": [0, 6]}}})
    return connection


def _exact(connection: dpsql.Connection, sql: str, parameters: object = None) -> list[tuple[object, ...]]:
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute(sql, parameters, epsilon=1.0).fetchall()
    return [tuple(round(x) if isinstance(x, float) else x for x in row) for row in rows]


def test_long_in_list_or_chain_and_parameters_give_duckdb_counts_with_one_check_per_literal(
    wide_range: dpsql.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each literal is checked once (the old evaluation checked every literal on every cell: k·n checks),
    and an OR chain of equalities is evaluated as one IN list."""
    checks = 0
    checked_literal = compile_module._checked_literal

    def counting(*arguments: object, **options: object) -> object:
        nonlocal checks
        checks += 1
        return checked_literal(*arguments, **options)

    monkeypatch.setattr(compile_module, "_checked_literal", counting)
    listed = list(range(0, VALUES, 3))
    in_list = f"SELECT g, COUNT(*) FROM t WHERE v IN ({', '.join(map(str, listed))}) GROUP BY g"
    or_chain = f"SELECT g, COUNT(*) FROM t WHERE {' OR '.join(f'v = {v}' for v in listed)} GROUP BY g"
    bound = f"SELECT g, COUNT(*) FROM t WHERE v IN ({', '.join('?' for _ in listed)}) GROUP BY g"
    expected = duckdb.connect().execute(
        f"SELECT i % 7 AS g, COUNT(*) FROM range(20000) t(i) WHERE i % {VALUES} % 3 = 0 GROUP BY g ORDER BY g"
    ).fetchall()
    for sql, parameters in ((in_list, None), (or_chain, None), (bound, listed)):
        checks = 0
        assert sorted(_exact(wide_range, sql, parameters)) == expected
        assert checks <= 2 * len(listed)  # the statement's workload and its SQL filter: once each


def test_isolated_values_of_a_range_reach_the_engine_as_one_in_list(wide_range: dpsql.Connection) -> None:
    """A mask of scattered cells is one ``IN`` (runs of three or more cells a ``BETWEEN``), not one
    ``BETWEEN`` per cell: thousands of ORed BETWEENs cost the engine seconds to plan."""
    recording = RecordingBackend(duckdb.connect())
    recording.connection.execute(f"CREATE TABLE t AS SELECT i % {VALUES} AS v, i % 7 AS g FROM range(20000) t(i)")
    connection = dpsql.connect(recording, budget=dpsql.Budget(epsilon=1e6))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {"v": {"range": [0, VALUES - 1]}, "g": {"range": [0, 6]}}})
    listed = [*range(0, 1000, 2), 1500, 1501, 1502, 1503]
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute(f"SELECT COUNT(*) FROM t WHERE v IN ({', '.join(map(str, listed))})", epsilon=1.0).fetchall()
    assert round(rows[0][0]) == 10 * len(listed)
    sql = recording.statements[-1].upper()
    assert sql.count("C0 BETWEEN") == 1 and sql.count("C0 IN (") == 1  # c0 is v


def test_text_categories_register_without_asking_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strings declared for a text column, and 32-bit integers for an integer column, are their own casts:
    no constant SELECT of one column per category (which took minutes for 10⁵ categories)."""
    asked: list[str] = []
    engine_cast = literals._cast_in_engine

    def recording(*arguments: object) -> object:
        asked.append(arguments[0].name)  # type: ignore[attr-defined]
        return engine_cast(*arguments)  # type: ignore[arg-type]

    monkeypatch.setattr(literals, "_cast_in_engine", recording)
    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT 'k' || (i % 5000) AS word, i % 3 AS n, (i % 2 = 0) AS flag FROM range(10000) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6))
    words = [f"k{i}" for i in range(5000)]
    schema = {"privacy_unit": None, "columns": {"word": {"categories": words}, "n": {"categories": [0, 1, 2]}, "flag": {"categories": [0, 1]}}}
    connection.register("t", None, schema=schema)
    assert asked == ["flag"]  # a BOOLEAN column still casts 0/1 in the engine
    with dpsql.testing.noise_disabled():
        rows = connection.cursor().execute("SELECT n, COUNT(*) FROM t WHERE word IN ('k1', 'k2', 'k3') GROUP BY n", epsilon=1.0).fetchall()
    assert sorted((n, round(c)) for n, c in rows) == database.execute(
        "SELECT n, COUNT(*) FROM t WHERE word IN ('k1', 'k2', 'k3') GROUP BY n ORDER BY n"
    ).fetchall()


def test_integer_bin_edges_register_without_asking_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,025 integer edges of bins on a BIGINT column compare as themselves: no constant SELECT of 2,050
    columns at register (0.13 s of a 1.9 s first statement); edges beyond 32 bits are still checked."""
    asked: list[int] = []
    engine_check = literals.check_literals

    def recording(columns: tuple[ColumnDomain, ...], column_types: dict[str, literals.ColumnType], *arguments: object) -> None:
        asked.append(sum(len(literals._compared(c, column_types[c.name])) for c in columns))
        engine_check(columns, column_types, *arguments)  # type: ignore[arg-type]

    monkeypatch.setattr(literals, "check_literals", recording)
    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT i * 7 AS v FROM range(1000) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6))
    edges = [int(round(e)) for e in np.linspace(0, 7000, 1025)]
    connection.register("t", None, schema={"privacy_unit": None, "columns": {"v": {"bins": edges}}})
    connection.register("u", "t", schema={"privacy_unit": None, "columns": {"v": {"bins": [0, 7000, 2**40]}}})
    assert asked == [0, 1]
    sql = f"SELECT COUNT(*) FROM t WHERE v >= {edges[100]} AND v < {edges[200]}"
    with dpsql.testing.noise_disabled():
        assert round(connection.cursor().execute(sql, epsilon=1.0).fetchall()[0][0]) == database.execute(sql).fetchone()[0]


def test_a_batch_over_seventy_columns_gives_duckdb_counts() -> None:
    """More columns than one ``GROUPING()`` takes (DuckDB: 63, PostgreSQL: 31): the grouping sets are told
    apart by one ``GROUPING()`` per chunk of columns. It used to fail in the engine after the charge."""
    width = 70
    database = duckdb.connect()
    database.execute(
        "CREATE TABLE t AS SELECT " + ", ".join(f"CAST(hash(i * {k + 3}) % 2 AS BIGINT) AS x{k}" for k in range(width)) + " FROM range(500) t(i)"
    )
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {f"x{k}": {"categories": [0, 1]} for k in range(width)}})
    statements = [f"SELECT x0, x{k}, COUNT(*) FROM t GROUP BY x0, x{k}" for k in range(1, width)] + ["SELECT COUNT(*) FROM t"]
    with dpsql.testing.noise_disabled():
        results = connection.workload(statements, epsilon=1.0)
    for sql, result in zip(statements, results):
        exact = database.execute(sql + (" ORDER BY 1, 2" if "GROUP BY" in sql else "")).fetchall()
        assert [tuple(round(v) if isinstance(v, float) else v for v in row) for row in result.rows] == exact


def test_covers_of_all_pairs_of_a_hundred_columns_hold_their_marginals_and_are_chosen_once() -> None:
    """4,950 pairs of 100 binary columns read through covers: each pair's cover contains it and has at most
    ``COVER_CELLS`` cells, within 1.6× Schönheim's lower bound on the number of such covers (taking each pair
    into the cover it enlarged least needed 5.4× at 2^12 cells: 405 scans of the table, 1.7 M rows read), and
    a repeated batch (the same marginals and sizes) finds them kept instead of running the greedy choice
    again (it took 14 s of such a repeat)."""
    sizes = tuple((f"x{k}", 2) for k in range(100))
    marginals = tuple((f"x{a}", f"x{b}") for a, b in itertools.combinations(range(100), 2))
    bounded._greedy_covers.cache_clear()
    covers = bounded._greedy_covers(marginals, sizes)
    assert all(set(m) <= set(c) and 2 ** len(c) <= bounded.COVER_CELLS for m, c in zip(marginals, covers))
    width = bounded.COVER_CELLS.bit_length() - 1  # binary columns per cover
    schoenheim = math.ceil(100 / width * math.ceil(99 / (width - 1)))  # fewest covers of all pairs, at best
    assert len(set(covers)) <= 1.6 * schoenheim
    assert bounded._greedy_covers(marginals, sizes) is covers and bounded._greedy_covers.cache_info().hits == 1


def test_a_repeated_batch_is_neither_parsed_nor_answered_again(adult_connection: dpsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second run of the same batch (answered from kept measurements) reuses the bound statements and
    the kept GLS answers: no sqlglot parse, no GLS per product."""
    columns = ["sex", "race", "job", "income"]
    statements = [f"SELECT {a}, {b}, COUNT(*) FROM adult GROUP BY {a}, {b}" for a, b in itertools.combinations(columns, 2)]
    first = adult_connection.workload(statements, epsilon=1.0)
    parsed: list[object] = []
    parse_text = pipeline.parse_text
    monkeypatch.setattr(pipeline, "parse_text", lambda text: parsed.append(text) or parse_text(text))
    from planner import store

    answered: list[object] = []
    answer_product = store.MeasurementStore._answer_product
    monkeypatch.setattr(store.MeasurementStore, "_answer_product", staticmethod(lambda p, k: answered.append(p) or answer_product(p, k)))
    second = adult_connection.workload(statements, epsilon=1.0)
    assert parsed == [] and answered == []
    assert [r.rows for r in second] == [r.rows for r in first]


def test_what_cannot_fit_is_refused_before_the_charge() -> None:
    """Decided in prepare from the domains alone: a release of more cells than fit in memory (a CDF over a
    range of 2²⁰ values in each of 1,024 groups: 2³⁰ cumulative counts, though only 1,024 rows) is refused
    with nothing charged, never failed after the read."""
    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT i % 1024 AS a, i AS c FROM range(100) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1.0))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {"a": {"range": [0, 1023]}, "c": {"range": [0, (1 << 20) - 1]}}})
    with pytest.raises(dpsql.NotSupportedError, match="would release 1,073,741,824 cells"):
        connection.cursor().execute("SELECT a, MEDIAN(c) FROM t GROUP BY a", epsilon=0.5)
    assert connection.budget_remaining().epsilon == pytest.approx(1.0)


def test_an_engine_s_grouping_sets_limit_is_refused_before_the_charge() -> None:
    """An engine that takes at most k columns in GROUPING SETS (Spark: 64) gets a batch over more columns
    refused in prepare, nothing charged (it used to fail in the engine after the charge)."""

    class Limited(RecordingBackend):
        max_grouping_columns = 3

    backend = Limited(duckdb.connect())
    backend.connection.execute("CREATE TABLE t AS SELECT i % 2 AS a, i % 3 AS b, i % 5 AS c, i % 7 AS d FROM range(100) t(i)")
    connection = dpsql.connect(backend, budget=dpsql.Budget(epsilon=1.0))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {c: {"range": [0, 6]} for c in "abcd"}})
    statements = ["SELECT a, b, COUNT(*) FROM t GROUP BY a, b", "SELECT c, d, COUNT(*) FROM t GROUP BY c, d"]
    with pytest.raises(dpsql.NotSupportedError, match="groups by 4 columns in one pass.*at most 3"):
        connection.workload(statements, epsilon=0.5)
    assert connection.budget_remaining().epsilon == pytest.approx(1.0) and backend.statements == []
    connection.workload(statements[:1], epsilon=0.5)  # within the limit: runs


def test_released_rows_stay_columns_until_read(adult_connection: dpsql.Connection) -> None:
    """Without HAVING, ORDER BY or LIMIT a result keeps its rows as columns (a float per value and error, a
    cell number per key: Adult's 364 three-way marginals as tuples took 0.85 KB per cell) and reads them as
    the same plain-Python rows the ordered form builds at once."""
    from dpsql.columns import ColumnRows

    sql = "SELECT sex, job, COUNT(*) AS n, AVG(age) FROM adult GROUP BY CUBE (sex, job)"
    with dpsql.testing.noise_disabled():
        lazy = adult_connection.cursor().execute(sql, epsilon=1.0)
        ordered = adult_connection.cursor().execute(sql + " ORDER BY n DESC", epsilon=1.0)
    result = lazy._check_result()
    assert isinstance(result.rows, ColumnRows) and isinstance(ordered._check_result().rows, list)
    rows = lazy.fetchall()
    assert sorted(rows, key=repr) == sorted(ordered.fetchall(), key=repr)
    assert {type(v) for row in rows for v in row} <= {str, float, type(None)}  # plain values, never numpy scalars
    assert result.rows == rows and result.rows[-1] == rows[-1] and result.rows[1:4] == rows[1:4] and len(result.rows) == len(rows)
    assert repr(result.rows) == repr(rows) and lazy.errors == list(result.errors)
    assert result.rows + result.rows[:1] == rows + rows[:1] and rows[:1] + result.rows == rows[:1] + rows  # a list's concatenation


def test_noise_for_millions_of_cells_is_drawn_in_chunks_with_each_cell_s_own_scale() -> None:
    """The exact samplers need a few hundred bytes per sample while they work: twenty million samples at
    once took gigabytes. Drawn a chunk at a time, each cell still gets the noise of its own parameter."""
    from planner.budget import NOISE_CHUNK, sample_noise
    from planner import Privacy

    parameters = np.concatenate([np.full(NOISE_CHUNK, 1e-3), np.full(NOISE_CHUNK + 7, 50.0)])
    drawn = sample_noise(Privacy.laplace(1.0), parameters, np.random.default_rng(3))
    assert drawn.shape == parameters.shape and drawn.dtype.kind == "i"
    assert np.count_nonzero(drawn[:NOISE_CHUNK]) < 10  # scale 10⁻³: P[Z ≠ 0] ≈ 2e^{-1000}
    assert np.var(drawn[NOISE_CHUNK:]) == pytest.approx(2 * 50.0**2, rel=0.02)  # Var of scale 50 ≈ 2b²


def test_a_wide_batch_holds_little_beyond_its_answers_while_it_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    """All 20 three-way marginals of six columns (234,954 cells) in one batch: at no moment of prepare and
    release does dpsql hold more than 160 bytes per released cell, the answers themselves included (a value and
    a standard error of 8 bytes, a byte per key: 19). It held about 220 when each count's answers were copied
    into its result, the keys were cached as int64 and a variance the same for a whole residual was an array of
    copies; ``benchmarks/wide_batch.py`` measures the same on Adult's 364 three-way marginals. The noise
    sampler's fixed work per chunk (a few hundred bytes per sample of a chunk) is made small here, so that what
    is measured is what grows with the cells."""
    import gc
    import tracemalloc

    from planner import budget

    monkeypatch.setattr(budget, "NOISE_CHUNK", 1 << 12)
    sizes = (2, 6, 15, 16, 42, 99)
    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT " + ", ".join(f"hash(i * {k + 3}) % {n} AS x{k}" for k, n in enumerate(sizes)) + " FROM range(2000) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=2.0))
    connection.register("t", None, schema={"privacy_unit": None, "columns": {f"x{k}": {"range": [0, n - 1]} for k, n in enumerate(sizes)}})
    groups = [", ".join(f"x{k}" for k in chosen) for chosen in itertools.combinations(range(len(sizes)), 3)]
    statements = [f"SELECT {group}, COUNT(*) FROM t GROUP BY {group}" for group in groups]
    connection.workload(statements[:1], epsilon=0.5)  # first use: imports and the process's caches
    gc.collect()
    tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        results = connection.workload(statements, epsilon=1.0)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    cells = sum(len(result.rows) for result in results)
    assert cells == sum(math.prod(sizes[k] for k in chosen) for chosen in itertools.combinations(range(len(sizes)), 3)) == 234_954
    assert peak / cells < 160, f"{peak / cells:.0f} bytes per released cell"
