"""Neighbouring-data fuzzer: nothing after the read may depend on the data.

For every statement of the accepted grammar corpora (``grammar/accepted/**``) and random batches of
them, the fuzzer builds a table ``D`` and its neighbour ``D′ = D`` plus one adversarial privacy unit,
runs the statement on both through the public API (``connect``, ``register``, ``cursor.execute`` /
``connection.workload``) and asserts:

* **the same outcome class** on both: released, or the same dpsql exception class (a refusal must come
  from public facts, before the read; a failure after the read that happens on one side only answers a
  yes/no question about the added unit);
* **the same charge** (the ledger's ε, ρ and (ε, δ) part);
* with the noise off, **every released count moves by at most what one unit may contribute**:
  ``max_rows_per_group`` rows per key of a column without declared domain, ``max_rows_per_unit`` rows
  in any other cell, and a SUM by at most ``max_rows_per_unit·max(|lo|, |hi|)`` over the interval of what it sums
  (a column's bounds, or an expression's by interval arithmetic; keys that merge after bounding, as HUGEINT keys
  read as doubles did, break this).

Tables are typed in several ways (:data:`TYPINGS`): the group-key column without a declared domain as
VARCHAR, HUGEINT, UBIGINT, DECIMAL(38,18), DATE and DOUBLE — with keys that collide as doubles — and
columns with declared domains as DOUBLE or DECIMAL, plus a schema whose bounds are absurdly wide and one whose
statements choose their own bound (``max_rows_per_unit: {auto: 4}``: outcomes and charges are compared, not how far
a count moves, since D and D′ may choose different bounds), and that column as TIMESTAMP values declared as a
range of days, with statements of its own (:data:`DAYS_STATEMENTS`).
Datasets (:func:`dataset`): empty, sparse (some declared values never occur: empty groups) and
random. The added unit (:func:`unit`) fills the empty groups, puts the most rows it may into two keys
(which collide as doubles in the wide-integer typings), or carries the typing's special values — NULL,
NaN, ±infinity, −0.0, extreme and out-of-bounds numbers, dates ±infinity, duplicate keys — or a
random mix of all of those.

On DuckDB every statement runs on two of the five fixed worlds in the plain typing, and each private
core as written (not the ``shells/`` and ``dialects/`` corpora, which re-express them) on one world, in
turn, in every other typing; every third core runs on PostgreSQL and two statements on Spark when those
engines are available (``tests/engines.py``). Random batches of any statements run on every engine,
the noise off and on. Everything is seeded: the failure message names the typing, the world, the
statement, the added unit's rows and the seed (``DPSQL_FUZZ_SEED`` changes it). ``--audit-runs N`` adds
N random worlds per typing and engine, each running a sample of statements and batches, with the noise
off and on.

**Time budget**: the default cases (1,262 neighbouring pairs on DuckDB, statement sequences and batches included,
249 on PostgreSQL, 4 on Spark) are sized to keep ``tests/audit`` within 3 minutes on 2 cores (``docs/audit.md`` has
the measured times);
each extra random world adds about 10 pairs per typing and engine.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
import os
import random
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

import dpsql
import dpsql.testing
import engines
from conftest import ADULT_SCHEMA, adult_corpus
from dpsql.schema import Schema
from dpsql.sql.bounded_expressions import derive

BASE_SEED = int(os.environ.get("DPSQL_FUZZ_SEED", "23"))
ACCEPTED = Path(__file__).resolve().parents[2] / "grammar" / "accepted"
CORPUS = tuple((str(p.relative_to(ACCEPTED)), p.read_text().strip()) for p in adult_corpus(ACCEPTED))
EPSILON = 4.0  # per statement: thresholds low enough that the datasets' keys are released
BUDGET = dpsql.Budget(epsilon=1e9, delta=0.5)
SELECTION_DELTA = 1e-4  # what each key selection spends (the budget pays for thousands)
MAX_ROWS_PER_UNIT = 4
MAX_ROWS_PER_GROUP = 2
COLUMNS = ("person_id", "sex", "race", "age", "income", "job", "browser")
SCHEMA: dict[str, object] = {  # the grammar corpus's table, with bounds a unit can reach on one key
    **ADULT_SCHEMA, "max_rows_per_unit": MAX_ROWS_PER_UNIT, "max_groups_per_unit": 2, "max_rows_per_group": MAX_ROWS_PER_GROUP,
}
#: the values each column takes inside its declared domain (the sparse dataset leaves out the last one)
DOMAIN = {
    "sex": ("M", "F"),
    "race": ("0", "1", "2", "3", "4"),
    "age": ("17", "30", "45", "62", "90"),
    "income": ("5", "20000", "70000", "500000"),
    "job": ("clerk", "engineer", None, "nurse", "teacher"),
}
#: out-of-domain values of the declared columns, whatever the typing
OUTSIDE = {"sex": ("X", "", None), "race": ("7", "-1", None), "income": ("-5", "1000000", None), "job": ("pilot",)}

#: logical column types in each engine's SQL (None: the engine has no such type)
ENGINE_TYPES: dict[str, dict[str, str]] = {
    "text": {"duckdb": "VARCHAR", "postgres": "TEXT", "spark": "STRING"},
    "bigint": {"duckdb": "BIGINT", "postgres": "BIGINT", "spark": "BIGINT"},
    "double": {"duckdb": "DOUBLE", "postgres": "DOUBLE PRECISION", "spark": "DOUBLE"},
    "hugeint": {"duckdb": "HUGEINT", "postgres": "NUMERIC(39, 0)", "spark": "DECIMAL(38, 0)"},
    "ubigint": {"duckdb": "UBIGINT", "postgres": "NUMERIC(20, 0)", "spark": "DECIMAL(20, 0)"},
    "decimal": {"duckdb": "DECIMAL(38, 18)", "postgres": "NUMERIC(38, 18)", "spark": "DECIMAL(38, 18)"},
    "date": {"duckdb": "DATE", "postgres": "DATE", "spark": "DATE"},
    "timestamp": {"duckdb": "TIMESTAMP", "postgres": "TIMESTAMP", "spark": "TIMESTAMP_NTZ"},
}


@dataclass(frozen=True)
class Typing:
    """Column types, the schema, the keys of ``browser`` in D, and the special values of the added unit."""

    name: str
    types: dict[str, str]  # column -> logical type (others: bigint / text)
    keys: tuple[str, ...]  # browser keys of D (K0..K3)
    special_keys: tuple[str | None, ...]
    special_ages: tuple[str | None, ...] = ("16", "91", None)
    special_incomes: tuple[str | None, ...] = ()
    schema: dict[str, object] = dataclasses.field(default_factory=lambda: SCHEMA)
    duckdb_only: tuple[str, ...] = ()  # special values other engines cannot store
    statements: tuple[tuple[str, str], ...] = ()  # statements of its own, run on every fixed world instead of the corpus

    def column_type(self, column: str) -> str:
        return self.types.get(column, "text" if column in ("sex", "job", "browser") else "bigint")

    @property
    def unknown_columns(self) -> tuple[str, ...]:
        """Columns without a declared domain (their group keys are selected: at most r rows per key)."""
        declared = self.schema["columns"]  # type: ignore[index]
        return tuple(c for c in COLUMNS if c != "person_id" and (c not in declared or declared[c] == "unknown" or set(declared[c]) <= {"bounds"}))  # type: ignore[operator]

    @property
    def rows_per_unit(self) -> int:
        """The bound on a unit's rows (with ``max_rows_per_unit: {auto: N}``, the largest it may choose)."""
        bound = self.schema["max_rows_per_unit"]
        return int(bound["auto"] if isinstance(bound, dict) else bound)  # type: ignore[call-overload]

    @property
    def chooses_bound(self) -> bool:
        """Each statement chooses its bound from a noisy histogram: D and D′ may choose different ones, so a count moves
        by more than one unit's rows (the choice is private by composition, ``docs/math.md`` §17) — not checked here."""
        return isinstance(self.schema["max_rows_per_unit"], dict)

    @property
    def rows_per_key(self) -> int:
        return int(self.schema.get("max_rows_per_group", self.rows_per_unit))  # type: ignore[call-overload]



HUGE = 10**37  # keys HUGE + i collide as doubles (and fit DECIMAL(38, 0) on Spark)
UBIG = 2**64 - 1
DECIMAL_KEY = "1.12345678901234567"
WIDE_SCHEMA = {**SCHEMA, "columns": {**SCHEMA["columns"], "age": {"bounds": [0, 2**53]}}}  # type: ignore[dict-item]  # the widest bounds a schema takes
ROW_SCHEMA = {"privacy_unit": None, "max_rows_per_unit": 1, "columns": SCHEMA["columns"]}  # one row = one unit
AUTO_SCHEMA = {**SCHEMA, "max_rows_per_unit": {"auto": MAX_ROWS_PER_UNIT}}  # each statement chooses its bound
#: browser as TIMESTAMP values declared as a range of days: each value counts in its day (``CAST(browser AS DATE)``)
DAYS_SCHEMA = {**SCHEMA, "columns": {**SCHEMA["columns"], "browser": {"range": ["2024-01-01", "2024-01-03"], "nullable": True}}}  # type: ignore[dict-item]
DAYS_STATEMENTS = (
    ("days/by_day", "SELECT CAST(browser AS DATE) AS d, COUNT(*) FROM adult GROUP BY d"),
    ("days/where_midnights", "SELECT sex, COUNT(*) FROM adult WHERE browser >= '2024-01-02' AND browser < DATE '2024-01-03' GROUP BY sex"),
    ("days/parts_rollup", "SELECT date_trunc('month', browser) AS m, extract(dow FROM browser) AS w, COUNT(*) FROM adult GROUP BY ROLLUP (m, w)"),
    ("days/quantiles", "SELECT sex, MIN(browser), MAX(browser), COUNT(browser) FROM adult GROUP BY sex"),
    ("days/null_or_coupled", "SELECT race, COUNT(*) FROM adult WHERE browser IS NULL OR (browser < '2024-01-02' AND race = 1) GROUP BY race"),
    ("days/sum_by_day", "SELECT CAST(browser AS DATE) AS d, SUM(age), AVG(age) FROM adult GROUP BY d"),
    ("days/splits_a_day", "SELECT COUNT(*) FROM adult WHERE browser < '2024-01-02 12:00'"),
)
TYPINGS = {
    t.name: t
    for t in (
        Typing("plain", {}, ("chrome", "firefox", "safari", "lynx"), ("", "O'Brien", "NULL", "\u00fc" * 3, None, "x" * 300)),
        Typing(
            "hugeint", {"browser": "hugeint", "income": "hugeint"}, tuple(str(HUGE + i) for i in range(4)),
            (str(HUGE + 7), str(-HUGE), "0", None, str(HUGE + 1)), special_incomes=(str(HUGE), "-" + str(HUGE)),
        ),
        Typing(
            "ubigint", {"browser": "ubigint", "race": "ubigint"}, tuple(str(UBIG - i) for i in range(4)),
            (str(UBIG - 9), "0", None, str(UBIG)),
        ),
        Typing(
            "decimal", {"browser": "decimal", "age": "decimal"}, tuple(f"{DECIMAL_KEY}{i}" for i in range(4)),
            (f"{DECIMAL_KEY}9", "-0.000000000000000001", None, "99999999999999999999.999999999999999999"),
            special_ages=("17.5", "90.000000000000000001", "16.999999999999999999", None),
        ),
        Typing(
            "date", {"browser": "date"}, ("2024-01-01", "2024-01-02", "2024-02-29", "1970-01-01"),
            ("infinity", "-infinity", None, "9999-12-31", "0001-01-01", "294247-01-10", "0044-03-15 (BC)"),
            duckdb_only=("294247-01-10", "0044-03-15 (BC)"),
        ),
        Typing(
            "double", {"browser": "double", "age": "double", "income": "double"}, ("0.1", "0.2", "0.30000000000000004", "1e300"),
            ("NaN", "Infinity", "-Infinity", "-0.0", None, "0.0", "5e-324", "1.7976931348623157e308"),
            special_ages=("NaN", "Infinity", "-Infinity", "17.5", "1e305", None),
            special_incomes=("NaN", "Infinity", "-Infinity", "1e305"),
        ),
        Typing(  # no privacy unit: no bounded rows, and declared values tested on the result where they read back exactly
            "rows", {"race": "hugeint", "browser": "date"}, ("2024-01-01", "2024-01-02", "2024-02-29", "1970-01-01"),
            ("infinity", "-infinity", None, "9999-12-31"), schema=ROW_SCHEMA,
        ),
        Typing("auto_bound", {}, ("chrome", "firefox", "safari", "lynx"), ("", None), schema=AUTO_SCHEMA),
        Typing(  # instants at a day's first and last microsecond, outside the range by one microsecond, ±infinity
            "timestamp_days", {"browser": "timestamp"},
            ("2024-01-01 00:00:00", "2024-01-01 23:59:59.999999", "2024-01-02 12:00:00", "2024-01-03 08:00:00"),
            ("infinity", "-infinity", None, "2023-12-31 23:59:59.999999", "2024-01-04 00:00:00", "0001-01-01 00:00:00",
             "294247-01-10 04:00:54.775806", "2024-01-03 23:59:59.999999"),
            schema=DAYS_SCHEMA, duckdb_only=("294247-01-10 04:00:54.775806",), statements=DAYS_STATEMENTS,
        ),
        Typing(
            "wide_bounds", {"age": "double"}, ("chrome", "firefox", "safari", "lynx"), ("edge", None),
            special_ages=("1e305", "-1e305", "Infinity", "NaN", "1.7976931348623157e308", None), schema=WIDE_SCHEMA,
        ),
    )
}


# -- datasets ------------------------------------------------------------------------------------------
Row = dict[str, "str | None"]


def _row(person: int, sex: str, race: str, age: str | None, income: str | None, job: str | None, browser: str | None) -> Row:
    return dict(zip(COLUMNS, (str(person), sex, race, age, income, job, browser)))


def dataset(kind: str, typing: Typing, rng: random.Random) -> list[Row]:
    """D: ``empty``; ``sparse`` (three units, one sex, no race 4, no teacher, no key K3); ``random``."""
    k0, k1, k2, _ = typing.keys
    if kind == "empty":
        return []
    if kind == "sparse":
        return [
            _row(1, "M", "0", "30", "5", "clerk", k0), _row(1, "M", "1", "45", "20000", "engineer", k1),
            _row(2, "M", "2", "62", "70000", "nurse", k2),
            _row(3, "M", "3", "17", "5", None, k0), _row(3, "M", "0", "89", "20000", "clerk", k1),
        ]
    rows = []
    for person in range(1, 31):
        for _ in range(rng.randint(1, 3)):
            rows.append(_row(
                person, rng.choice(DOMAIN["sex"]), rng.choice(DOMAIN["race"]), rng.choice(DOMAIN["age"]),
                rng.choice(DOMAIN["income"]), rng.choice(DOMAIN["job"]), rng.choice(typing.keys[:3] + (None,)),
            ))
    return rows


def unit(kind: str, typing: Typing, rng: random.Random, person: int = 1000) -> list[Row]:
    """The added unit's rows (module doc): ``gap``, ``collide``, ``special0``/``special4`` (the typing's
    special values from that offset, in otherwise declared values) or ``random``; its first row only
    when one row is one unit."""
    return _unit_rows(kind, typing, rng, person)[: typing.rows_per_unit if typing.schema["privacy_unit"] is None else None]


def _unit_rows(kind: str, typing: Typing, rng: random.Random, person: int) -> list[Row]:
    k0, k1, _, k3 = typing.keys
    if kind == "gap":
        return [_row(person, "F", "4", "90", "500000", "teacher", k3), _row(person, "F", "4", "17", "5", None, k3)]
    if kind == "collide":
        return [_row(person, rng.choice(DOMAIN["sex"]), rng.choice(DOMAIN["race"]), "45", "5", "clerk", key) for key in (k0, k0, k1, k1)]
    if kind.startswith("special"):
        offset = int(kind.removeprefix("special"))
        keys, ages = typing.special_keys, typing.special_ages
        wide = "age" in typing.unknown_columns  # ages are then only clamped, never dropped
        return [
            _row(person, "F", "4", ages[(offset + i) % len(ages)] if wide or i == 3 else "45", "5", "teacher", keys[(offset + i) % len(keys)])
            for i in range(typing.rows_per_unit)
        ]
    rows = []
    for _ in range(rng.randint(1, typing.rows_per_unit + 1)):
        def pick(inside: Sequence[str | None], outside: Sequence[str | None]) -> str | None:
            return rng.choice(outside) if outside and rng.random() < 0.35 else rng.choice(inside)

        rows.append(_row(
            person, pick(DOMAIN["sex"], OUTSIDE["sex"]), pick(DOMAIN["race"], _storable(OUTSIDE["race"], typing.column_type("race"))),  # type: ignore[arg-type]
            pick(DOMAIN["age"], typing.special_ages), pick(DOMAIN["income"], OUTSIDE["income"] + typing.special_incomes),
            pick(DOMAIN["job"], OUTSIDE["job"]), pick(typing.keys, typing.special_keys),
        ))
    return rows


def _storable(values: Sequence[str | None], logical: str) -> tuple[str | None, ...]:
    """The values a column of that logical type can hold (an unsigned column no negative number)."""
    return tuple(v for v in values if logical != "ubigint" or v is None or not v.startswith("-"))


@dataclass(frozen=True, eq=False)
class World:
    """D (``dataset``) and the unit D′ adds (``added``)."""

    name: str
    rows: tuple[Row, ...]
    added: tuple[Row, ...]

    def describe(self) -> str:
        shown = "; ".join(", ".join(f"{c}={r[c]!r}" for c in COLUMNS[1:]) for r in self.added)
        return f"world {self.name} ({len(self.rows)} rows in D), the added unit: {shown}"


FIXED_WORLDS = (("empty", "gap"), ("sparse", "gap"), ("random", "collide"), ("sparse", "special0"), ("random", "special4"))


def fixed_worlds(typing: Typing) -> list[World]:
    worlds = []
    for index, (data, added) in enumerate(FIXED_WORLDS):
        rng = random.Random(f"{BASE_SEED}/{typing.name}/{index}")
        worlds.append(World(f"{data}+{added}", tuple(dataset(data, typing, rng)), tuple(unit(added, typing, rng))))
    return worlds


def random_world(typing: Typing, index: int) -> World:
    rng = random.Random(f"{BASE_SEED}/{typing.name}/random/{index}")
    data = rng.choice(("empty", "sparse", "random", "random"))
    return World(f"{data}+random#{index}", tuple(dataset(data, typing, rng)), tuple(unit("random", typing, rng)))


# -- engines -------------------------------------------------------------------------------------------
def _literal(value: str | None, sql_type: str) -> str:
    if value is None:
        return f"CAST(NULL AS {sql_type})"
    return f"CAST('{value.replace(chr(39), chr(39) * 2)}' AS {sql_type})"


class Engine:
    """Creates D and D′ as tables and opens dpsql connections over them."""

    name = "duckdb"

    def __init__(self) -> None:
        import duckdb

        self.database = duckdb.connect()

    def supports(self, typing: Typing, world: World) -> bool:
        """Whether the engine can store every value of the world."""
        used = {r["browser"] for r in world.rows + world.added}
        return self.name == "duckdb" or not used & set(typing.duckdb_only)

    def _types(self, typing: Typing) -> dict[str, str]:
        return {c: ENGINE_TYPES[typing.column_type(c)][self.name] for c in COLUMNS}

    def _select(self, rows: Sequence[Row], types: dict[str, str]) -> str:
        if not rows:
            return "SELECT " + ", ".join(f"{_literal(None, types[c])} AS {c}" for c in COLUMNS) + " WHERE 1 = 0"
        return " UNION ALL ".join("SELECT " + ", ".join(f"{_literal(r[c], types[c])} AS {c}" for c in COLUMNS) for r in rows)

    def create(self, name: str, rows: Sequence[Row], typing: Typing) -> None:
        self.database.execute(f"CREATE OR REPLACE TABLE {name} AS {self._select(rows, self._types(typing))}")

    def connect(self) -> dpsql.Connection:
        return dpsql.connect(self.database, budget=BUDGET, reuse=False, selection_delta=SELECTION_DELTA)

    def close(self) -> None:
        self.database.close()


class PostgresEngine(Engine):
    name = "postgres"

    def __init__(self) -> None:
        import psycopg

        dsn = engines.postgres_dsn()
        self.schema = f"dpsql_fuzz_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{os.getpid()}"
        self.admin = psycopg.connect(dsn, autocommit=True)
        self.admin.execute(f"CREATE SCHEMA {self.schema}")
        self.admin.execute(f"SET search_path TO {self.schema}")
        separator = "&" if "?" in dsn else "?"
        self.dsn = f"{dsn}{separator}options={urllib.parse.quote(f'-csearch_path={self.schema}')}"

    def create(self, name: str, rows: Sequence[Row], typing: Typing) -> None:
        self.admin.execute(f"DROP TABLE IF EXISTS {name}")
        self.admin.execute(f"CREATE TABLE {name} AS {self._select(rows, self._types(typing))}")

    def connect(self) -> dpsql.Connection:
        return dpsql.connect(backend=self.dsn, budget=BUDGET, reuse=False, selection_delta=SELECTION_DELTA)

    def close(self) -> None:
        self.admin.execute(f"DROP SCHEMA {self.schema} CASCADE")
        self.admin.close()


class SparkEngine(Engine):
    name = "spark"

    def __init__(self) -> None:
        self.session = engines.local_spark_session("dpsql-fuzz")

    def create(self, name: str, rows: Sequence[Row], typing: Typing) -> None:
        self.session.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS {self._select(rows, self._types(typing))}")  # type: ignore[attr-defined]

    def connect(self) -> dpsql.Connection:
        return dpsql.connect(backend=self.session, budget=BUDGET, reuse=False, selection_delta=SELECTION_DELTA)

    def close(self) -> None:
        """The session stays up for the other tests of the process."""


ENGINE_KINDS: dict[str, Callable[[], Engine]] = {"duckdb": Engine, "postgres": PostgresEngine, "spark": SparkEngine}


@pytest.fixture(scope="module")
def opened() -> Iterator[dict[str, Engine]]:
    """One engine of each kind per test process, opened on first use."""
    found: dict[str, Engine] = {}
    yield found
    for engine in found.values():
        engine.close()


# -- running a statement on D and D′ ---------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    kind: str  # "released", or the class of the exception
    message: str
    results: tuple[tuple[tuple[str, ...], tuple[tuple[object, ...], ...]], ...]  # per result set: (statement, rows)
    spent: tuple[float, float, float, float]  # what the ledger charged: ε, ρ, the (ε, δ) part's ε and δ


def run(
    connection: dpsql.Connection, table: str, typing: Typing, statements: Sequence[str], seed: int, noise: bool, sequence: bool = False,
    epsilon: float = EPSILON,
) -> Outcome:
    """Register ``table`` as ``adult`` (a new registration: no key set or measurement of an earlier one is
    used) and run the statements (one: execute; several: one batch, or one after the other with ``sequence``),
    seeded, the noise on or off."""
    before = len(connection.budget_history())
    with dpsql.testing.seeded(seed):
        try:
            connection.register("adult", table, schema=typing.schema)
        except dpsql.Error as error:
            return Outcome(f"register: {type(error).__name__}", str(error), (), (0.0, 0.0, 0.0, 0.0))
        try:
            if noise:
                results = _execute(connection, statements, sequence, epsilon)
            else:
                with dpsql.testing.noise_disabled():
                    results = _execute(connection, statements, sequence, epsilon)
            kind, message = "released", ""
        except Exception as error:  # noqa: BLE001 - the class is the outcome (a non-dpsql one is a finding too)
            results, kind, message = (), type(error).__name__, str(error)
    charges = connection.budget_history()[before:]
    spent = (sum(c.epsilon or 0.0 for c in charges), sum(c.rho for c in charges), sum(c.approximate_epsilon for c in charges), sum(c.delta for c in charges))
    return Outcome(kind, message, results, spent)


def _execute(
    connection: dpsql.Connection, statements: Sequence[str], sequence: bool = False, epsilon: float = EPSILON
) -> tuple[tuple[tuple[str, ...], tuple[tuple[object, ...], ...]], ...]:
    if sequence:
        return tuple(((sql,), tuple(connection.cursor().execute(sql, epsilon=epsilon).fetchall())) for sql in statements)
    if len(statements) == 1:
        cursor = connection.cursor()
        cursor.execute(statements[0], epsilon=epsilon)
        return (((statements[0],), tuple(cursor.fetchall())),)
    results = connection.workload(list(statements), epsilon=epsilon)
    return tuple(((sql,), tuple(result.rows)) for sql, result in zip(statements, results))


# -- what a released count may move by -------------------------------------------------------------
def _select_items(sql: str) -> list[exp.Expression] | None:
    """The SELECT list of a statement (the first branch of a UNION ALL), or None for EXPLAIN."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return None
    while isinstance(tree, exp.Union):
        tree = tree.this
    return list(tree.expressions) if isinstance(tree, exp.Select) else None


def _kind(item: exp.Expression) -> str | None:
    inner = item.this if isinstance(item, exp.Alias) else item
    if isinstance(inner, exp.Count):
        return "count"
    if isinstance(inner, exp.Sum):
        return "sum"
    return None


def _sum_bound(item: exp.Expression, typing: Typing) -> float:
    """What one unit may move ``SUM(x)`` by: ``max_rows_per_unit·max(|lo|, |hi|)`` over the interval of ``x`` — a
    column's bounds, or an expression's by interval arithmetic from them (``dpsql.sql.bounded_expressions``)."""
    inner = item.this if isinstance(item, exp.Alias) else item
    schema = Schema.from_dict(typing.schema)
    age = schema.column("age").value_bounds  # a shell's SUM over released values (a count, a sum of age): as before
    try:
        if isinstance(inner.this, exp.Column):
            bounds = schema.column(inner.this.name).value_bounds if inner.this.name in schema.column_names else None
            low, high = bounds or age  # type: ignore[misc]
        else:
            derived = derive(inner.this.sql(dialect="duckdb"), schema.column, "SUM")
            low, high = derived.low, derived.high
    except (dpsql.Error, KeyError):  # not an expression of the table's columns: a shell's
        low, high = age  # type: ignore[misc]
    return typing.rows_per_unit * max(abs(low), abs(high))


def _key_column(item: exp.Expression) -> str | None:
    inner = item.this if isinstance(item, exp.Alias) else item
    return inner.name if isinstance(inner, exp.Column) else None


def movement_violations(typing: Typing, sql: str, first: Sequence[tuple[object, ...]], second: Sequence[tuple[object, ...]]) -> list[str]:
    """Released counts (and sums) that moved by more than one unit may move them (module doc)."""
    items = _select_items(sql)
    if items is None:
        return []
    kinds = [_kind(i) for i in items]
    keys = [p for p, k in enumerate(kinds) if k is None]
    keyed = [p for p in keys if _key_column(items[p]) in typing.unknown_columns]

    def index(rows: Sequence[tuple[object, ...]]) -> dict[tuple[object, ...], tuple[object, ...]]:
        seen: Counter[tuple[str, ...]] = Counter()
        found = {}
        for row in rows:
            key = tuple(repr(row[p]) for p in keys if p < len(row))
            seen[key] += 1
            found[(*key, seen[key])] = row
        return found

    before, after = index(first), index(second)
    # a released NULL key and a rolled-up NULL show the same key: where one side holds more rows of a key than the
    # other (the NULL key released on one side only), its rows cannot be paired by their order, and are not compared
    shown_before, shown_after = Counter(key[:-1] for key in before), Counter(key[:-1] for key in after)
    found = []
    for key in before.keys() & after.keys():
        if shown_before[key[:-1]] != shown_after[key[:-1]]:
            continue
        one, two = before[key], after[key]
        per_key = any(one[p] is not None for p in keyed)
        for position, kind in enumerate(kinds):
            if kind is None or position >= len(one) or one[position] is None or two[position] is None:
                continue
            sum_bound = _sum_bound(items[position], typing) if kind == "sum" else 0.0
            bound = (typing.rows_per_key if per_key else typing.rows_per_unit) if kind == "count" else sum_bound
            if kind == "sum" and not sum_bound < 1e12:
                continue
            moved = abs(float(two[position]) - float(one[position]))  # type: ignore[arg-type]
            if moved > bound + 1e-6 * max(1.0, abs(float(one[position]))):  # type: ignore[arg-type]
                found.append(f"column {position + 1} of row {key[:-1]} moved by {moved:g} > {bound:g}")
    return found


# -- cases ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    statements: tuple[str, ...]
    names: tuple[str, ...]
    world: World
    seed: int
    noise: bool
    sequence: bool = False  # the statements run one after the other (later ones over keys earlier ones released)
    epsilon: float = EPSILON  # per statement


def _batches(count: int, rng: random.Random, statements: Sequence[tuple[str, str]] = CORPUS) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Random batches of 2-3 corpus statements, or of ``statements`` (EXPLAIN left out)."""
    pool = [(name, sql) for name, sql in statements if not sql.upper().startswith("EXPLAIN")]
    batches = []
    for _ in range(count):
        chosen = rng.sample(pool, rng.randint(2, 3))
        batches.append((tuple(sql for _, sql in chosen), tuple(name for name, _ in chosen)))
    return batches


#: the statements that are private cores as written: ``shells/`` (a public shell over the same cores) and
#: ``dialects/`` (other spellings of them) run in the plain typing and in random batches
CORES = tuple(c for c in CORPUS if not c[0].startswith(("shells/", "dialects/")))


def fixed_statements(engine: str, typing: Typing) -> tuple[tuple[str, str], ...]:
    """The statements of the fixed worlds: on DuckDB every one in the plain typing, the cores in the others;
    every third core on PostgreSQL; on Spark, whose every statement recomputes the bounded rows in the JVM,
    one with keys and one with moments and HAVING. A typing with statements of its own runs those instead."""
    if typing.statements:
        return typing.statements
    if engine == "duckdb":
        return CORPUS if typing.name == "plain" else CORES
    if engine == "postgres":
        return CORES[::3]
    return tuple(c for c in CORPUS if c[0] in ("unknown/unknown_cube.sql", "aggregates/grouping_sets_nullable.sql"))


def statement_worlds(engine: str, typing: Typing, position: int, worlds: Sequence[World]) -> list[World]:
    """The worlds the statement at ``position`` runs on: two in DuckDB's plain typing (one of the four
    others in turn, and the sparse world whose groups the added unit fills); else one, in turn over all
    five, starting at a different world in each typing (so each statement meets several across typings). A typing's
    own statements run on every world."""
    if typing.statements:
        return list(worlds)
    if engine == "duckdb" and typing.name == "plain":
        others = worlds[:1] + worlds[2:]
        return [others[position % len(others)], worlds[1]]
    return [worlds[(position + list(TYPINGS).index(typing.name)) % len(worlds)]]


BATCHES = {"duckdb": 6, "postgres": 2, "spark": 0}
RELEASE_BROWSERS = "SELECT browser, COUNT(*) FROM adult GROUP BY browser"
#: statements run one after the other: aggregates over released keys, and a column selected over another's
SEQUENCES = {
    "sum over released keys": (RELEASE_BROWSERS, "SELECT browser, SUM(age), AVG(age) FROM adult GROUP BY browser"),
    "selected over released keys": (RELEASE_BROWSERS, "SELECT browser, person_id, COUNT(*) FROM adult GROUP BY CUBE (browser, person_id)"),
    "sums selected over released keys": (RELEASE_BROWSERS, "SELECT browser, person_id, SUM(age), AVG(age) FROM adult GROUP BY CUBE (browser, person_id)"),
}
#: statements at a large ε, so that a selection's first stage releases keys of the worlds' few rows: GROUP BY two
#: columns without declared domain, selected in stages (``planner.staged_selection``) — browser's keys first, then
#: person_id over them — or, where the first stage releases no browser key, as tuples; with SUM and AVG, the stages
#: select keys only and the moments are measured over the released tuples (``planner.split_staged_selection``)
AT_LARGE_EPSILON = {
    "staged selection": ("SELECT browser, person_id, COUNT(*) FROM adult GROUP BY browser, person_id", 400.0),
    "staged selection with moments": (
        "SELECT browser, person_id, COUNT(*), SUM(age), AVG(age), STDDEV(age) FROM adult GROUP BY CUBE (browser, person_id)", 400.0
    ),
}
ENGINE_TYPINGS = {
    "duckdb": tuple(TYPINGS),
    "postgres": ("plain", "hugeint", "decimal", "date", "double", "wide_bounds", "timestamp_days"),
    "spark": ("plain", "double"),
}


def cases(engine: str, typing: Typing, extra_worlds: int) -> list[Case]:
    """The fixed cases (each statement on its worlds, batches) and ``extra_worlds`` random worlds."""
    worlds = fixed_worlds(typing)
    rng = random.Random(f"{BASE_SEED}/{typing.name}/{engine}")
    found = []
    for position, (name, sql) in enumerate(fixed_statements(engine, typing)):
        for world in statement_worlds(engine, typing, position, worlds):
            found.append(Case((sql,), (name,), world, rng.randrange(1 << 30), False))
    if engine == "duckdb" and not typing.statements:  # statements over keys an earlier one released, on two worlds in each typing
        for number, (name, statements) in enumerate(SEQUENCES.items()):
            for world in (worlds[number % len(worlds)], worlds[1]):
                found.append(Case(statements, (name,), world, rng.randrange(1 << 30), False, sequence=True))
        for name, (sql, epsilon) in AT_LARGE_EPSILON.items():
            for number, world in enumerate(worlds):
                found.append(Case((sql,), (name,), world, rng.randrange(1 << 30), number == 0, epsilon=epsilon))
    for number, (statements, names) in enumerate(_batches(BATCHES[engine], rng, typing.statements or CORPUS)):
        for noise in (False, True):
            found.append(Case(statements, names, worlds[number % len(worlds)], rng.randrange(1 << 30), noise))
    for number in range(extra_worlds):
        world = random_world(typing, number)
        for name, sql in rng.sample(CORPUS, 8):
            found.append(Case((sql,), (name,), world, rng.randrange(1 << 30), rng.random() < 0.5))
        for statements, names in _batches(2, rng):
            found.append(Case(statements, names, world, rng.randrange(1 << 30), rng.random() < 0.5))
    return found


def tables(world: int) -> tuple[str, str]:
    """The names of a world's D and D′ tables."""
    return f"fuzz_{world}_d", f"fuzz_{world}_d_prime"


def findings(engine: Engine, connection: dpsql.Connection, typing: Typing, case: Case, world: int) -> list[str]:
    """What differs between D and D′ for one case (nothing, when the release is total)."""
    first, second = (run(connection, table, typing, case.statements, case.seed, case.noise, case.sequence, case.epsilon) for table in tables(world))
    found = []
    if first.kind.startswith("register:"):  # a typing whose table is refused tests nothing
        found.append(f"the table was refused at register ({first.message[:160]})")
    if first.kind != second.kind:
        found.append(f"outcome {first.kind} on D, {second.kind} on D′ ({(first.message or second.message)[:160]})")
    elif not all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15) for a, b in zip(first.spent, second.spent)):
        found.append(f"charged {first.spent} on D, {second.spent} on D′")
    if first.kind == second.kind == "released" and not case.noise and not typing.chooses_bound:
        for (sql,), rows in first.results:
            other = next(r for (s,), r in second.results if s == sql)
            found += movement_violations(typing, sql, rows, other)
    context = (
        f"[{engine.name}, typing {typing.name}, {case.world.describe()}; statement(s) {', '.join(case.names)}; "
        f"noise {'on' if case.noise else 'off'}; case seed {case.seed}, DPSQL_FUZZ_SEED={BASE_SEED}]"
    )
    return [f"{line} {context}" for line in found]


def fuzz(engine: Engine, typing: Typing, chosen: Sequence[Case]) -> tuple[int, list[str]]:
    """Run the cases on one connection (plans are public and shared across worlds): how many ran, and the findings."""
    worlds = list(dict.fromkeys(case.world for case in chosen if engine.supports(typing, case.world)))
    for number, world in enumerate(worlds):
        first, second = tables(number)
        engine.create(first, world.rows, typing)
        engine.create(second, world.rows + world.added, typing)
    connection = engine.connect()
    found: list[str] = []
    try:
        for case in chosen:
            if case.world in worlds:
                found += findings(engine, connection, typing, case, worlds.index(case.world))
    finally:
        connection.close()
    return sum(case.world in worlds for case in chosen), found


PARAMETERS = [(engine, typing) for engine, typings in ENGINE_TYPINGS.items() for typing in typings]


@pytest.mark.parametrize(("engine_name", "typing_name"), PARAMETERS, ids=[f"{e}-{t}" for e, t in PARAMETERS])
def test_outcomes_are_the_same_on_neighbouring_data(
    engine_name: str, typing_name: str, opened: dict[str, Engine], audit_runs: int | None
) -> None:
    if engine_name not in opened:
        opened[engine_name] = ENGINE_KINDS[engine_name]()
    engine, typing = opened[engine_name], TYPINGS[typing_name]
    checked, found = fuzz(engine, typing, cases(engine_name, typing, audit_runs or 0))
    assert checked > 0
    assert not found, f"{len(found)} finding(s) in {checked} neighbouring pairs:\n" + "\n".join(found[:40])


def test_the_fuzzer_sees_a_release_that_fails_on_one_side_only() -> None:
    """The check itself can fail: an outcome that depends on the added unit, and a count that moves by
    more than a unit may move it, are reported."""
    typing = TYPINGS["plain"]

    class FailingOnTheNeighbour(Engine):
        """Statements on D′ fail after the read."""

        def connect(self) -> dpsql.Connection:
            connection = super().connect()
            register, cursor = connection.register, connection.cursor
            registered: list[object] = []

            def recording(name: str, source: object = None, schema: object = None) -> None:
                registered.append(source)
                register(name, source, schema)

            def failing_cursor() -> object:
                made = cursor()
                execute = made.execute

                def failing(sql: str, **options: object) -> object:
                    execute(sql, **options)
                    if registered[-1] == tables(0)[1]:
                        raise dpsql.InternalError("failed after the read")
                    return made

                made.execute = failing  # type: ignore[method-assign]
                return made

            connection.register, connection.cursor = recording, failing_cursor  # type: ignore[method-assign]
            return connection

    engine = FailingOnTheNeighbour()
    try:
        case = Case(("SELECT browser, COUNT(*) FROM adult GROUP BY browser",), ("inline",), fixed_worlds(typing)[1], 1, False)
        checked, found = fuzz(engine, typing, [case])
        assert checked == 1
        assert len(found) == 1 and found[0].startswith("outcome released on D, InternalError on D′"), found
        assert "case seed 1" in found[0] and "typing plain" in found[0]
    finally:
        engine.close()
    moved = movement_violations(typing, case.statements[0], [("chrome", 10.0)], [("chrome", 10.0 + MAX_ROWS_PER_GROUP + 1)])
    assert len(moved) == 1 and "moved by 3" in moved[0]
    assert not movement_violations(typing, case.statements[0], [("chrome", 10.0)], [("chrome", 10.0 + MAX_ROWS_PER_GROUP)])
    assert len(movement_violations(typing, case.statements[0], [(None, 10.0)], [(None, 10.0 + MAX_ROWS_PER_UNIT + 1)])) == 1
    # a CUBE's NULL browser key released on D′ only sits before the rolled-up row with the same key: not paired with it
    cube = "SELECT browser, COUNT(*) FROM adult GROUP BY CUBE (browser)"
    assert not movement_violations(typing, cube, [("chrome", 9.0), (None, 29.0)], [("chrome", 9.0), (None, 10.0), (None, 32.0)])
    assert len(movement_violations(typing, cube, [("chrome", 9.0), (None, 29.0)], [("chrome", 19.0), (None, 10.0), (None, 32.0)])) == 1


#: keys every engine stores, in a typing: the released keys must be the same values on each
ALIKE = {
    "double": ("NaN", "Infinity", "-Infinity", "0.1", "0.30000000000000004", "1e300", "-0.0", None),
    "decimal": ("1.000000000000000001", "1.000000000000000002", "-0.5", "0", None),
    "hugeint": (str(HUGE), str(HUGE + 1), "-1", None),
}


@pytest.mark.parametrize("engine_name", list(ENGINE_KINDS))
def test_keys_read_back_alike_on_every_engine(engine_name: str, opened: dict[str, Engine]) -> None:
    """The released keys of one table are the same Python values on DuckDB, PostgreSQL and Spark: each
    engine prints its own text (``nan``/``NaN``, ``1e+300``/``1.0E300``), read back in the column's type."""
    if engine_name not in opened:
        opened[engine_name] = ENGINE_KINDS[engine_name]()
    engine = opened[engine_name]
    connection = engine.connect()
    try:
        for logical, values in ALIKE.items():
            typing = Typing(f"alike_{logical}", {"browser": logical}, ("a", "b", "c", "d"), ())
            # three units per key, released at a large ε: few rows, since Spark analyses each row's SELECT of the view
            rows = [_row(person, "M", "0", "30", "5", "clerk", value) for person, value in enumerate(values * 3)]
            engine.create("fuzz_alike", rows, typing)
            connection.register("adult", "fuzz_alike", schema=SCHEMA)
            with dpsql.testing.noise_disabled(), dpsql.testing.seeded(1):
                released = connection.cursor().execute("SELECT browser, COUNT(*) FROM adult GROUP BY browser", epsilon=100.0).fetchall()
            expected = [_shown_in_python(v, logical, engine.name) for v in values]
            assert sorted(map(repr, (key for key, _ in released))) == sorted(map(repr, expected)), logical
            assert all(count == pytest.approx(3.0) for _, count in released)
    finally:
        connection.close()


def _shown_in_python(text: str | None, logical: str, engine: str) -> object:
    """What a key stored as ``text`` is released as (−0.0 as 0.0: SQL's ``=`` makes them one value). A wide
    integer is DuckDB's HUGEINT (an int) but a NUMERIC/DECIMAL of scale 0 elsewhere (a Decimal, equal to it)."""
    if text is None:
        return None
    if logical == "double":
        return float(text) + 0.0
    if logical == "hugeint":
        return int(text) if engine == "duckdb" else decimal.Decimal(text)
    return decimal.Decimal(text).quantize(decimal.Decimal("1e-18"))
