"""A realistic, seeded census-like table and a short tour of private queries on it.

The table has several rows per person (one per survey wave), categorical columns (sex, race,
education, state, occupation with NULLs for people without one), ordered columns (wave year, age,
income in bins) and a column with no public domain (browser). :data:`DEMO_SCHEMA` declares its
public domains; the tour runs on embedded DuckDB::

    python -m dpsql.cli demo            # or: dpsql demo
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

import dpsql

SEXES = ["F", "M"]
RACES = [0, 1, 2, 3, 4]
EDUCATION = ["none", "high_school", "college", "bachelor", "master", "doctorate"]
STATES = ["CA", "NY", "TX", "FL", "IL", "PA", "OH", "GA", "NC", "MI"]
OCCUPATIONS = ["clerical", "craft", "management", "professional", "sales", "service"]
INCOME_EDGES = [0, 10_000, 25_000, 50_000, 100_000, 250_000, 10_000_000]
WAVES = (2019, 2022)
MAX_WAVES_PER_PERSON = 4
MAX_PERSONS = 10_000_000  # the table is generated in memory (≈ 2.5 rows per person)

DEMO_SCHEMA: dict[str, object] = {
    "privacy_unit": "person_id",
    "max_rows_per_unit": MAX_WAVES_PER_PERSON,
    "columns": {
        "wave": {"range": list(WAVES)},
        "sex": {"categories": SEXES},
        "race": {"categories": RACES},
        "age": {"range": [17, 90]},
        "education": {"categories": EDUCATION},
        "state": {"categories": STATES},
        "income": {"bins": INCOME_EDGES},
        "occupation": {"categories": OCCUPATIONS, "nullable": True},
        "browser": "unknown",
    },
}


def generate_census(persons: int = 20_000, seed: int = 0) -> dict[str, np.ndarray]:
    """Columns of a synthetic survey: each person answers 1-4 waves (≈ 2.5 rows per person).

    Income depends on education and age, occupation on education, and about 8% of rows have no
    occupation (NULL); a few rows carry values outside the schema's domains (age 99, income below 0
    from data-entry errors) so the dropping rule has something to do.
    """
    if isinstance(persons, bool) or not isinstance(persons, int) or not 1 <= persons <= MAX_PERSONS:
        raise dpsql.ProgrammingError(f"the demo needs between 1 and {MAX_PERSONS:,} persons (--persons), got {persons!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise dpsql.ProgrammingError(f"the demo's seed (--seed) must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(seed)
    waves_per_person = rng.integers(1, MAX_WAVES_PER_PERSON + 1, size=persons)
    person = np.repeat(np.arange(1, persons + 1, dtype=np.int64), waves_per_person)
    rows = len(person)
    first_wave = np.repeat(rng.integers(WAVES[0], WAVES[1] + 1, size=persons), waves_per_person)
    offset = np.arange(rows) - np.repeat(np.cumsum(waves_per_person) - waves_per_person, waves_per_person)
    wave = np.minimum(first_wave + offset, WAVES[1])
    birth_age = np.repeat(np.clip(rng.gamma(6.0, 7.0, size=persons) + 17, 17, 86).astype(np.int64), waves_per_person)
    age = birth_age + (wave - WAVES[0])
    age[rng.random(rows) < 0.002] = 99  # data-entry errors: outside the declared range
    sex = np.repeat(rng.choice(SEXES, size=persons), waves_per_person)
    race = np.repeat(rng.choice(RACES, size=persons, p=[0.62, 0.13, 0.12, 0.09, 0.04]), waves_per_person)
    education_level = np.repeat(rng.choice(len(EDUCATION), size=persons, p=[0.08, 0.3, 0.22, 0.24, 0.12, 0.04]), waves_per_person)
    state = np.repeat(rng.choice(STATES, size=persons, p=[0.2, 0.14, 0.14, 0.12, 0.08, 0.08, 0.07, 0.06, 0.06, 0.05]), waves_per_person)
    log_income = 9.2 + 0.35 * education_level + 0.02 * np.minimum(age - 17, 40) + rng.normal(0, 0.7, size=rows)
    income = np.round(np.exp(log_income), -2)
    income[rng.random(rows) < 0.002] = -1.0  # data-entry errors: outside the declared bins
    occupation_index = np.clip(education_level // 2 + rng.integers(-1, 3, size=rows), 0, len(OCCUPATIONS) - 1)
    occupation = np.array(OCCUPATIONS, dtype=object)[occupation_index]
    occupation[rng.random(rows) < 0.08] = None
    browser = rng.choice(["firefox", "chrome", "safari", "edge", "lynx"], size=rows, p=[0.2, 0.5, 0.2, 0.09, 0.01])
    return {
        "person_id": person,
        "wave": wave.astype(np.int64),
        "sex": sex.astype(object),
        "race": race.astype(np.int64),
        "age": age.astype(np.int64),
        "education": np.array(EDUCATION, dtype=object)[education_level],
        "state": state.astype(object),
        "income": income,
        "occupation": occupation,
        "browser": browser.astype(object),
    }


ADULT_PEOPLE = 48_842  # as many people as the real Adult extract
ADULT_SIZES = {
    "age": 85, "workclass": 9, "fnlwgt": 100, "education-num": 16, "marital-status": 7, "occupation": 15,
    "relationship": 6, "race": 5, "sex": 2, "capital-gain": 100, "capital-loss": 100, "hours-per-week": 99,
    "native-country": 42, "income>50K": 2,
}
"""Columns and domain sizes of the integer-coded Adult extract (each column holds codes 0..size-1)."""
_ADULT_UNKNOWN = ("fnlwgt", "capital-gain", "capital-loss")  # no public domain declared
_ADULT_ORDERED = ("age", "education-num", "hours-per-week")
ADULT_SCHEMA: dict[str, object] = {
    "privacy_unit": None,
    "max_rows_per_unit": 1,
    "columns": {
        name: "unknown" if name in _ADULT_UNKNOWN
        else {"range": [0, size - 1]} if name in _ADULT_ORDERED
        else {"categories": list(range(size))}
        for name, size in ADULT_SIZES.items()
    },
}
"""The schema of examples/adult.yaml: one row per person, domains from the public domain file."""

ADULT_COLUMN_NOTES = {
    "age": "age in years - 16: codes 1-74 are 17-90 years (SQL compares codes: age BETWEEN 4 AND 24 is 20-40 years; "
           "GROUP BY age + 16 counts by years)",
    "workclass": "employer type: 9 coded census categories",
    "fnlwgt": "the census sampling weight, bucketed into codes 0-99; no public domain declared",
    "education-num": "schooling level - 1: codes 0-15 are levels 1-16 (8 = high-school graduate, 12 = bachelor's degree)",
    "marital-status": "7 coded categories",
    "occupation": "15 coded categories",
    "relationship": "role in the household: 6 coded categories",
    "race": "5 coded categories",
    "sex": "0 = female, 1 = male",
    "capital-gain": "bucketed into codes 0-99; no public domain declared",
    "capital-loss": "bucketed into codes 0-99; no public domain declared",
    "hours-per-week": "hours worked per week - 1: codes 0-98 are 1-99 hours (39 = 40 hours)",
    "native-country": "42 coded countries",
    "income>50K": "1 = income above $50,000 a year, 0 = not",
}
"""What each column of the Adult extract means (its codes: checked against the published means, e.g. mean
age code + 16 = 38.64 years and mean hours code + 1 = 40.42 hours on the real extract)."""

ADULT_HEADER = """# Schema of the integer-coded Adult census extract (48,842 rows, one row per person, so row-level
# privacy) and of the Adult-like data `dpsql demo --write DIR` generates with the same columns and codes
# (dpsql.demo.adult_schema_text() writes this file; a test keeps the two equal). Domain sizes come from the
# public domain file published with the extract, never from the rows. Every column holds codes 0..size-1,
# not the census values: the comment above each column says what its codes mean.
"""


def adult_schema_text() -> str:
    """examples/adult.yaml: :data:`ADULT_SCHEMA` with a comment on what each column's codes mean."""
    lines = [ADULT_HEADER.rstrip("\n"), "privacy_unit: null", "max_rows_per_unit: 1", "columns:"]
    for name, spec in ADULT_SCHEMA["columns"].items():  # type: ignore[union-attr]
        lines.append(f"  # {ADULT_COLUMN_NOTES[name]}")
        if spec == "unknown":
            lines.append(f"  {name}: unknown")
        else:
            ((kind, values),) = spec.items()
            lines.append(f"  {name}: {{{kind}: [{', '.join(str(v) for v in values)}]}}")
    return "\n".join(lines) + "\n"


def generate_adult(people: int = ADULT_PEOPLE, seed: int = 0) -> dict[str, np.ndarray]:
    """An Adult-like table with the real extract's columns and codes (``ADULT_SIZES``), one row per
    person: skewed marginals and the usual dependences (income on education, age, sex and hours;
    relationship on sex and marital status; occupation on education)."""
    rng = np.random.default_rng(seed)
    sex = (rng.random(people) < 0.67).astype(np.int64)  # 1 = male, as in the extract
    age = np.clip(rng.gamma(5.0, 4.5, people) + 1, 1, 74).astype(np.int64)
    education = np.clip(np.round(rng.normal(9.5, 2.5, people)), 0, 15).astype(np.int64)
    hours = np.clip(np.round(rng.normal(39 + 4 * sex, 11, people)), 0, 98).astype(np.int64)
    married = rng.random(people) < np.clip(0.15 + age / 60, 0, 0.8)
    marital = np.where(married, 2, rng.choice([0, 3, 4, 5, 6], people, p=[0.55, 0.2, 0.1, 0.1, 0.05]))
    relationship = np.where(married, np.where(sex == 1, 0, 5), rng.choice([1, 2, 3, 4], people, p=[0.45, 0.1, 0.35, 0.1]))
    score = -6.4 + 0.35 * education + 0.04 * np.minimum(age, 40) + 0.6 * sex + 0.03 * (hours - 40) + 0.5 * married
    income = (rng.random(people) < 1 / (1 + np.exp(-score))).astype(np.int64)
    occupation = np.clip(education - 2 + rng.integers(-3, 4, people), 0, 14)
    return {
        "age": age,
        "workclass": np.minimum(rng.zipf(1.9, people) - 1, 8),
        "fnlwgt": np.minimum(rng.zipf(1.5, people) - 1, 99),
        "education-num": education,
        "marital-status": marital.astype(np.int64),
        "occupation": occupation.astype(np.int64),
        "relationship": relationship.astype(np.int64),
        "race": rng.choice(5, people, p=[0.855, 0.096, 0.031, 0.01, 0.008]),
        "sex": sex,
        "capital-gain": np.where(rng.random(people) < 0.92, 0, rng.integers(1, 100, people)),
        "capital-loss": np.where(rng.random(people) < 0.95, 0, rng.integers(1, 100, people)),
        "hours-per-week": hours,
        "native-country": np.minimum(rng.zipf(2.2, people) - 1, 41),
        "income>50K": income,
    }


def write_files(directory: str | Path, seed: int = 0, people: int = ADULT_PEOPLE) -> list[Path]:
    """Write the README tour's files into ``directory``: ``adult.csv`` (:func:`generate_adult`) and
    ``adult.yaml`` (:data:`ADULT_SCHEMA`, the schema of examples/adult.yaml). Returns their paths."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    data, schema = folder / "adult.csv", folder / "adult.yaml"
    database = duckdb.connect()
    try:
        database.register("adult", generate_adult(people, seed))
        database.execute(f"COPY adult TO '{str(data).replace(chr(39), chr(39) * 2)}' (HEADER, DELIMITER ',')")
    finally:
        database.close()
    header = f"# Adult-like demo data written by 'dpsql demo --write' (seed {seed}); the same schema as examples/adult.yaml\n"
    schema.write_text(header + adult_schema_text(), encoding="utf-8")
    return [data, schema]


@dataclass(frozen=True)
class Stop:
    title: str
    sql: str
    epsilon: float


TOUR = (
    Stop("People by sex and race, aged 20-40 (the issue's example)",
         "SELECT sex, race, COUNT(*) AS n FROM census WHERE age BETWEEN 20 AND 40 GROUP BY sex, race", 0.3),
    Stop("Income bins in 2022, every bin shown even when empty",
         "SELECT income, COUNT(*) AS n FROM census WHERE wave = 2022 GROUP BY income", 0.3),
    Stop("Occupation (NULL is its own cell) for graduates",
         "SELECT occupation, COUNT(*) AS n FROM census WHERE education IN ('bachelor', 'master', 'doctorate') "
         "GROUP BY occupation ORDER BY n DESC", 0.2),
    Stop("The three largest states among people over 65 (ORDER BY / LIMIT are free post-processing)",
         "SELECT state, COUNT(*) AS n FROM census WHERE age > 65 GROUP BY state ORDER BY n DESC LIMIT 3", 0.2),
)


def load(connection: dpsql.Connection, persons: int, seed: int) -> dict[str, np.ndarray]:
    columns = generate_census(persons, seed)
    connection.register("census", columns, schema=DEMO_SCHEMA)
    return columns


def _exact(columns: dict[str, np.ndarray], sql: str) -> dict[tuple, float]:
    """DuckDB's own answer on the raw table's rows inside the schema's domains (the rows dpsql counts;
    income shown by bin), for the tour's comparison only."""
    database = duckdb.connect()
    database.register("raw", columns)
    labels = " ".join(
        f"WHEN income >= {low} AND income < {high} THEN '[{low}, {high})'"
        for low, high in zip(INCOME_EDGES, INCOME_EDGES[1:])
    )
    low_age, high_age = DEMO_SCHEMA["columns"]["age"]["range"]  # type: ignore[index]
    in_domain = f"age BETWEEN {low_age} AND {high_age} AND income >= {INCOME_EDGES[0]} AND income < {INCOME_EDGES[-1]}"
    database.execute(f"CREATE VIEW census AS SELECT * REPLACE (CASE {labels} END AS income) FROM raw WHERE {in_domain}")
    rows = database.execute(sql).fetchall()
    database.close()
    return {row[:-1]: float(row[-1]) for row in rows}


def _format_row(row: tuple, error: tuple, truth: float | None) -> str:
    keys = ", ".join("NULL" if v is None else str(v) for v in row[:-1]) or "(all)"
    true_text = "" if truth is None else f"   exact {truth:8.0f}"
    return f"  {keys:<28} {row[-1]:10.1f} ± {error[-1]:6.1f}{true_text}"


def tour(persons: int = 20_000, seed: int = 0, out: Callable[[str], None] = print) -> dpsql.Connection:
    """Generate the table, then run the tour's statements and show what each costs and returns."""
    connection = dpsql.connect(budget=dpsql.Budget(epsilon=1.0, delta=1e-6))
    started = time.perf_counter()
    columns = load(connection, persons, seed)
    out(
        f"Generated a census-like table: {len(columns['person_id']):,} rows, {persons:,} people "
        f"(1 to {MAX_WAVES_PER_PERSON} survey waves each; contribution bound {DEMO_SCHEMA['max_rows_per_unit']} "
        f"rows per person) in {time.perf_counter() - started:.2f} s. Budget: epsilon = 1.0.\n"
        "Each released count is shown ± its standard error, beside DuckDB's exact answer on the rows inside\n"
        "the schema's domains (shown for this synthetic demo only; rows outside them are never counted).\n"
    )
    cursor = connection.cursor()
    explanation = ""
    for stop in TOUR:
        out(f"-- {stop.title} (epsilon = {stop.epsilon})\n{stop.sql}")
        started = time.perf_counter()
        cursor.execute(stop.sql, epsilon=stop.epsilon)
        elapsed = time.perf_counter() - started
        exact = _exact(columns, _without_post_processing(stop.sql))
        for row, error in zip(cursor.fetchall(), cursor.errors):
            out(_format_row(row, error, exact.get(tuple(row[:-1]), 0.0)))
        out(f"  ({cursor.rowcount} rows in {elapsed * 1000:.0f} ms; budget left: epsilon = {connection.budget_remaining():.2f})\n")
        explanation = explanation or cursor.explanation
    out("-- A condition on a column with no public domain is refused (GROUP BY on it selects keys privately):")
    try:
        cursor.execute("SELECT COUNT(*) FROM census WHERE browser = 'lynx'", epsilon=0.1)
    except dpsql.NotSupportedError as error:
        out(f"  NotSupportedError: {error}\n")
    out("-- Asking for more than is left is refused before any data is read:")
    try:
        cursor.execute("SELECT COUNT(*) FROM census", epsilon=0.5)
    except dpsql.BudgetExceededError as error:
        out(f"  BudgetExceededError: {error}\n")
    out("-- How the first statement was answered (cursor.explanation):")
    out("  " + explanation.replace("\n", "\n  "))
    return connection


def _without_post_processing(sql: str) -> str:
    """The statement without ORDER BY / LIMIT, so the exact column shows every released cell's truth."""
    upper = sql.upper()
    cut = min((upper.find(k) for k in (" ORDER BY ", " LIMIT ") if k in upper), default=len(sql))
    return sql[:cut]
