"""Guard the headline figures: re-measure them (about two minutes on a 2-core machine), compare each with
the value recorded in ``results/regress.json``, print a table, and exit with status 1 when any figure is
worse than recorded by more than its tolerance (times: 1.5×, accuracy ratios: 1 %).

    python benchmarks/regress.py            # measure and compare; exit 1 if a figure got worse
    python benchmarks/regress.py --record   # measure and record (when a change moves a figure on purpose)
    python benchmarks/regress.py --only plan  # the figures whose name contains "plan"

A figure is one line of :data:`FIGURES`: a name, a function returning the number, its unit and its
tolerance (``TIME`` or ``RATIO``; ``higher_is_better=True`` for speed-ups). Times are CPU seconds of one
core where the figure is the library's own work (a new process's with the bytecode caches an install has), the fastest of several cold runs (the one least
disturbed by other jobs); the latency figures are wall-clock ratios to DuckDB's exact query measured in
the same run. A figure that looks worse than allowed is measured again (``RETRIES`` times at most) and
judged on its best value: a busy moment passes, a regression stays. Figures without a recorded value
are reported as "new" (record them); a recorded figure no longer measured is listed as "dropped".
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"  # DuckDB keeps its own threads; numpy's are pinned for every figure

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import cache, partial  # noqa: E402
from pathlib import Path  # noqa: E402

from results_io import RESULTS, print_table  # noqa: E402

RECORD = RESULTS / "regress.json"
TIME = 1.5  # a time may grow by this factor before it counts as worse
RATIO = 1.01  # an accuracy ratio may grow by 1 %
STARTUP_RUNS = 5
FRESH_RUNS = 3
RETRIES = 2  # a figure that looks worse is measured again, at most this many times, and judged on its best
LATENCY_ROWS, LATENCY_EVENT_ROWS, LATENCY_REPEATS = 1_000_000, 500_000, 5
SMALL_ROWS, SMALL_REPEATS = 10_000, 30
FIRST_ROWS = 5_000_000
FINE_ROWS = 200_000
SERVE_PERSONS, SERVE_REPEATS = 5_000, 10


@dataclass(frozen=True)
class Figure:
    name: str
    measure: Callable[[], float]
    unit: str
    tolerance: float  # allowed factor (> 1) in the worse direction
    higher_is_better: bool = False

    def allowed(self, recorded: float) -> float:
        return recorded / self.tolerance if self.higher_is_better else recorded * self.tolerance

    def is_worse(self, measured: float, recorded: float) -> bool:
        limit = self.allowed(recorded)
        return measured < limit if self.higher_is_better else measured > limit


# -- how figures are measured -------------------------------------------------------------------------


def planning_seconds(case_name: str, privacy_name: str) -> float:
    """``benchmarks/planning.py``'s row: cold plan + answer, CPU seconds, the fastest of its repeats
    (the run least disturbed by other jobs on a shared machine)."""
    import planning

    case = next(c for c in planning.CASES if c.name == case_name)
    privacy = next(p for p in case.privacies if str(p) == privacy_name)
    return float(planning.time_case(case, privacy)["fastest_s"])


def accuracy_ratio(row_name: str, laplace: bool) -> float:
    """``benchmarks/accuracy.py``'s row: the planner's choice, expected error ÷ SVD bound (ε = ρ = 1)."""
    import accuracy
    from planner import Privacy

    row = next(r for r in accuracy.ROWS if r.name == row_name)
    return accuracy.planned_ratio(row, Privacy.laplace(1.0) if laplace else Privacy.zcdp(1.0))


def startup_seconds(*arguments: str, runs: int = STARTUP_RUNS) -> float:
    """CPU seconds of a fresh interpreter running ``python ARGUMENTS`` (the fastest of ``runs`` runs), with the
    bytecode caches an installed package has (``PYTHONDONTWRITEBYTECODE`` dropped: compiling every module from
    source adds about 0.4 s a process that no user's install pays)."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    spent = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, *arguments], check=True, stdout=subprocess.DEVNULL, env=environment)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(spent)


@cache
def _latency_table() -> object:
    import duckdb
    import latency

    database = duckdb.connect()
    latency.generate(database, LATENCY_ROWS)
    latency.generate_events(database, LATENCY_EVENT_ROWS)
    return database


def latency_ratio(setting: str) -> float:
    """``benchmarks/latency.py``'s ratio dpsql ÷ DuckDB's exact query for one of its settings, on its
    tables of ``LATENCY_ROWS`` (census) and ``LATENCY_EVENT_ROWS`` (events) rows, generated once per run."""
    import latency

    _, table, schema, query = next(c for c in latency.CASES if c[0] == setting)
    return float(latency.measure(_latency_table(), setting, table, schema, query, LATENCY_REPEATS)["ratio"])


@cache
def _small_table() -> object:
    import duckdb
    import latency

    database = duckdb.connect()
    latency.generate(database, SMALL_ROWS)
    return database


def small_latency_ratio(setting: str) -> float:
    """``benchmarks/latency.py``'s ratio dpsql ÷ DuckDB's exact query on its census table of ``SMALL_ROWS``
    rows, where a statement's own overhead (parsing, planning, noise, GLS, the ledger) is most of its
    time: the figure behind the small-table comparison with SmartNoise SQL."""
    import latency

    _, table, schema, query = next(c for c in latency.CASES if c[0] == setting)
    return float(latency.measure(_small_table(), setting, table, schema, query, SMALL_REPEATS)["ratio"])


@cache
def _first_table() -> object:
    import duckdb
    import latency

    database = duckdb.connect()
    latency.generate(database, FIRST_ROWS)
    return database


def first_statement_ratio() -> float:
    """``benchmarks/latency.py``'s first statement after ``register()`` (person-level, k = 3: it bounds each
    unit's rows) ÷ DuckDB doing the same bounding itself, on ``FIRST_ROWS`` census rows, wall seconds."""
    import latency

    _, table, schema, query = next(c for c in latency.CASES if c[0] == "person-level (k=3)")
    return float(latency.first_statement(_first_table(), "person-level (k=3)", table, schema, query)["ratio"])


@cache
def _fine_table() -> object:
    import duckdb
    import fine_domains

    database = duckdb.connect()
    fine_domains.generate(database, FINE_ROWS)
    return database


def fine_domain_seconds(case: str, kind: str) -> float:
    """``benchmarks/fine_domains.py``'s cold ``kind`` (99 quantiles, or a batch of 100 range counts) over
    ``case``'s income domain (CPU s)."""
    import fine_domains

    return float(fine_domains.dpsql_run(_fine_table(), fine_domains.CASES[case], kind)[2])


FRESH_STATEMENT = """import duckdb, dpsql, sys
connection = dpsql.connect(duckdb.connect(sys.argv[1]), budget=dpsql.Budget(epsilon=1e9), reuse=False)
connection.register("t", None, schema={schema!r})
connection.cursor().execute({sql!r}, epsilon=1.0).fetchall()
"""


@cache
def _fine_file() -> str:
    """A DuckDB file holding ``benchmarks/fine_domains.py``'s table of ``FINE_ROWS`` rows (removed at exit)."""
    import atexit
    import shutil
    import tempfile

    import duckdb
    import fine_domains

    folder = tempfile.mkdtemp(prefix="dpsql-regress-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = str(Path(folder) / "fine.duckdb")
    with duckdb.connect(path) as database:
        fine_domains.generate(database, FINE_ROWS)
    return path


def fresh_quantiles_seconds(case: str) -> float:
    """What a user meets: CPU seconds of a new interpreter that imports dpsql, connects to a DuckDB file,
    registers ``benchmarks/fine_domains.py``'s table with ``case``'s income domain and runs its 99
    quantiles — imports, planning and the read included (the fastest of ``FRESH_RUNS`` runs)."""
    import fine_domains

    schema = {"privacy_unit": None, "columns": {"income": fine_domains.CASES[case], "g": {"range": [0, 1]}}}
    statement = FRESH_STATEMENT.format(schema=schema, sql=fine_domains.quantile_sql())
    return startup_seconds("-c", statement, _fine_file(), runs=FRESH_RUNS)


def fresh_count_seconds() -> float:
    """What a user meets first: CPU seconds of a new interpreter that imports dpsql, connects to the DuckDB file
    of ``fresh_quantiles_seconds`` and runs one grouped COUNT — imports, planning and the read included (the
    fastest of ``FRESH_RUNS`` runs)."""
    schema = {"privacy_unit": None, "columns": {"g": {"range": [0, 1]}}}
    statement = FRESH_STATEMENT.format(schema=schema, sql="SELECT g, COUNT(*) FROM t GROUP BY g")
    return startup_seconds("-c", statement, _fine_file(), runs=FRESH_RUNS)


def wide_batch_seconds(width: int = 70, rows: int = 20_000) -> float:
    """A batch over ``width`` binary columns (more than one ``GROUPING()`` takes): x0 with every other column,
    and the total, through SQL (CPU s of a fresh connection's first run, DuckDB's threads included)."""
    import duckdb

    import dpsql

    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT " + ", ".join(f"CAST(hash(i * {k + 3}) % 2 AS BIGINT) AS x{k}" for k in range(width)) + f" FROM range({rows}) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6), reuse=False)
    connection.register("t", None, schema={"privacy_unit": None, "columns": {f"x{k}": {"categories": [0, 1]} for k in range(width)}})
    statements = [f"SELECT x0, x{k}, COUNT(*) FROM t GROUP BY x0, x{k}" for k in range(1, width)] + ["SELECT COUNT(*) FROM t"]
    started = time.process_time()
    connection.workload(statements, epsilon=1.0)
    return time.process_time() - started


def in_list_seconds(items: int = 10_000) -> float:
    """A COUNT with a WHERE of ``items`` values IN a range column of 10⁵ values (CPU s, cold)."""
    import duckdb

    import dpsql

    database = duckdb.connect()
    database.execute("CREATE TABLE t AS SELECT i % 100000 AS v FROM range(200000) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6), reuse=False)
    connection.register("t", None, schema={"privacy_unit": None, "columns": {"v": {"range": [0, 99_999]}}})
    sql = "SELECT COUNT(*) FROM t WHERE v IN (" + ", ".join(str(7 * i) for i in range(items)) + ")"
    started = time.process_time()
    connection.cursor().execute(sql, epsilon=1.0).fetchall()
    return time.process_time() - started


def many_keys_seconds(rows: int = 1_000_000, keys: int = 150_000) -> float:
    """The first ``GROUP BY`` of a column without declared domain holding ``keys`` distinct values over ``rows``
    persons (one row each): the statement that selects its keys (CPU s, the table's bounding included)."""
    import duckdb

    import dpsql

    database = duckdb.connect()
    database.execute(f"CREATE TABLE t AS SELECT i AS person, 'k' || CAST(hash(i) % {keys} AS VARCHAR) AS key FROM range({rows}) t(i)")
    connection = dpsql.connect(database, budget=dpsql.Budget(epsilon=1e6, delta=1e-5))
    connection.register("t", None, schema={"privacy_unit": "person", "max_rows_per_unit": 1, "columns": {}})
    started = time.process_time()
    connection.cursor().execute("SELECT key, COUNT(*) FROM t GROUP BY key", epsilon=1.0).fetchall()
    return time.process_time() - started


def serve_wire_ms() -> float:
    """``benchmarks/serve.py``'s median wire time (served − in-process, ms) of its first statement over
    ``SERVE_REPEATS`` repetitions on the demo census of ``SERVE_PERSONS`` persons."""
    import serve

    from dpsql import demo

    columns = demo.generate_census(SERVE_PERSONS, seed=0)
    with serve.served(columns) as (host, port, _):
        rows = serve.latency_rows(columns, host, port, SERVE_REPEATS)
    return float(rows[0]["wire_ms"])


# -- the figures: one line each -----------------------------------------------------------------------

ZCDP, PURE = "1-zCDP (Gaussian)", "1-DP (Laplace)"
FIGURES: list[Figure] = [
    Figure("import dpsql (s CPU)", partial(startup_seconds, "-c", "import dpsql"), "s", TIME),
    Figure("dpsql --help (s CPU)", partial(startup_seconds, "-m", "dpsql.cli", "--help"), "s", TIME),
    Figure("plan+answer: all 2-way marginals, Adult, zCDP", partial(planning_seconds, "all 2-way marginals, Adult", ZCDP), "s", TIME),
    Figure("plan+answer: all 2-way marginals, Adult, pure DP", partial(planning_seconds, "all 2-way marginals, Adult", PURE), "s", TIME),
    Figure("plan+answer: all 3-way marginals, Adult, zCDP", partial(planning_seconds, "all 3-way marginals, Adult", ZCDP), "s", TIME),
    Figure("plan+answer: all 3-way marginals, Adult, pure DP", partial(planning_seconds, "all 3-way marginals, Adult", PURE), "s", TIME),
    Figure("plan+answer: all 3-way marginals, 16 binary, zCDP", partial(planning_seconds, "all 3-way marginals, 16 binary", ZCDP), "s", TIME),
    Figure("plan+answer: all 3-way marginals, 16 binary, pure DP", partial(planning_seconds, "all 3-way marginals, 16 binary", PURE), "s", TIME),
    Figure("plan+answer: all 2-way marginals, 100 binary, zCDP", partial(planning_seconds, "all 2-way marginals, 100 binary", ZCDP), "s", TIME),
    Figure("plan+answer: all 3-way marginals, 30 of size 4, zCDP", partial(planning_seconds, "all 3-way marginals, 30 of size 4", ZCDP), "s", TIME),
    Figure("plan+answer: all ranges (8.4 M), n = 4096, zCDP", partial(planning_seconds, "all ranges (8.4 M), n = 4096", ZCDP), "s", TIME),
    Figure("plan+answer: all ranges (8.4 M), n = 4096, pure DP", partial(planning_seconds, "all ranges (8.4 M), n = 4096", PURE), "s", TIME),
    Figure("accuracy: all 2-way marginals, Adult, zCDP", partial(accuracy_ratio, "all 2-way marginals, Adult", False), "× bound", RATIO),
    Figure("accuracy: all 2-way marginals, Adult, pure DP", partial(accuracy_ratio, "all 2-way marginals, Adult", True), "× bound", RATIO),
    Figure("accuracy: all 2-way marginals, 16 binary, zCDP", partial(accuracy_ratio, "all 2-way marginals, 16 binary", False), "× bound", RATIO),
    Figure("accuracy: all 2-way marginals, 16 binary, pure DP", partial(accuracy_ratio, "all 2-way marginals, 16 binary", True), "× bound", RATIO),
    Figure("accuracy: all range queries, n = 1024, zCDP", partial(accuracy_ratio, "all range queries, n = 1024", False), "× bound", RATIO),
    Figure("accuracy: all range queries, n = 1024, pure DP", partial(accuracy_ratio, "all range queries, n = 1024", True), "× bound", RATIO),
    Figure("accuracy: prefix, n = 1024, zCDP", partial(accuracy_ratio, "prefix, n = 1024", False), "× bound", RATIO),
    Figure("accuracy: prefix, n = 1024, pure DP", partial(accuracy_ratio, "prefix, n = 1024", True), "× bound", RATIO),
    Figure("latency ÷ DuckDB: row-level (1 M rows)", partial(latency_ratio, "row-level"), "×", TIME),
    Figure("latency ÷ DuckDB: person-level k=3 (1 M rows)", partial(latency_ratio, "person-level (k=3)"), "×", TIME),
    Figure("latency ÷ DuckDB: person-level k=3, no WHERE (1 M rows)", partial(latency_ratio, "person-level (k=3), no WHERE"), "×", TIME),
    Figure("latency ÷ DuckDB: person-level k=3, events (0.5 M rows)", partial(latency_ratio, "person-level (k=3), events"), "×", TIME),
    Figure("latency ÷ DuckDB: row-level (10 k rows)", partial(small_latency_ratio, "row-level"), "×", TIME),
    Figure("latency ÷ DuckDB: person-level k=3 (10 k rows)", partial(small_latency_ratio, "person-level (k=3)"), "×", TIME),
    Figure("first statement ÷ DuckDB bounding: person-level k=3 (5 M rows)", first_statement_ratio, "×", TIME),
    Figure("99 quantiles, cold: 1,024 bins (s CPU)", partial(fine_domain_seconds, "bins: 1,024", "quantiles"), "s", TIME),
    Figure("one COUNT, new process: import, connect, register, answer (s CPU)", fresh_count_seconds, "s", TIME),
    Figure("99 quantiles, new process: 1,024 bins (s CPU)", partial(fresh_quantiles_seconds, "bins: 1,024"), "s", TIME),
    Figure("99 quantiles, new process: range [0, 500000] (s CPU)", partial(fresh_quantiles_seconds, "range: [0, 500000]"), "s", TIME),
    Figure("99 quantiles, cold: range [0, 500000] (s CPU)", partial(fine_domain_seconds, "range: [0, 500000]", "quantiles"), "s", TIME),
    Figure("100 range counts, cold: range [0, 500000] (s CPU)", partial(fine_domain_seconds, "range: [0, 500000]", "ranges"), "s", TIME),
    Figure("batch over 70 binary columns, 70 statements (s CPU)", wide_batch_seconds, "s", TIME),
    Figure("10,000-item IN list (s CPU)", in_list_seconds, "s", TIME),
    Figure("GROUP BY a column of 150,000 undeclared keys, first statement (s CPU)", many_keys_seconds, "s", TIME),
    Figure("serve: wire time per statement (ms)", serve_wire_ms, "ms", TIME),
]


# -- running them -------------------------------------------------------------------------------------


def git_head() -> str:
    found = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=RESULTS)
    return found.stdout.strip() or "unknown"


def recorded() -> dict[str, float]:
    if not RECORD.exists():
        return {}
    return {name: float(entry["value"]) for name, entry in json.loads(RECORD.read_text())["figures"].items()}


def compare(figures: list[Figure], measured: dict[str, float], record: dict[str, float]) -> list[dict[str, object]]:
    rows = []
    for figure in figures:
        value, before = measured[figure.name], record.get(figure.name)
        if before is None:
            status, change, allowed = "new", "", ""
        else:
            status = "WORSE" if figure.is_worse(value, before) else "ok"
            change, allowed = f"{value / before:.3f}×", f"{'≥' if figure.higher_is_better else '≤'} {figure.allowed(before):.4g}"
        rows.append({"figure": figure.name, "unit": figure.unit, "recorded": "" if before is None else f"{before:.4g}",
                     "measured": f"{value:.4g}", "change": change, "allowed": allowed, "status": status})
    return rows


def write_record(figures: list[Figure], measured: dict[str, float]) -> None:
    kept = json.loads(RECORD.read_text())["figures"] if RECORD.exists() else {}
    kept.update({f.name: {"value": measured[f.name], "unit": f.unit} for f in figures})
    document = {"recorded_at": git_head(), "machine": f"{os.cpu_count()} cores", "figures": kept}
    RECORD.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the measured figures to results/regress.json")
    parser.add_argument("--only", help="measure only the figures whose name contains this text")
    arguments = parser.parse_args()
    figures = [f for f in FIGURES if arguments.only is None or arguments.only in f.name]
    started = time.perf_counter()
    record = recorded()
    measured, took, runs = {}, {}, {}
    for figure in figures:
        begun = time.perf_counter()
        values = [float(figure.measure())]
        while figure.name in record and figure.is_worse(values[-1], record[figure.name]) and len(values) <= RETRIES:
            values.append(float(figure.measure()))  # a busy moment of a shared machine, or a regression?
        measured[figure.name] = max(values) if figure.higher_is_better else min(values)
        took[figure.name], runs[figure.name] = time.perf_counter() - begun, len(values)
    elapsed = time.perf_counter() - started
    rows = [{**row, "runs": runs[row["figure"]], "took_s": f"{took[row['figure']]:.1f}"}
            for row in compare(figures, measured, record)]
    print(f"headline figures against {RECORD.name} (recorded at {json.loads(RECORD.read_text())['recorded_at'] if RECORD.exists() else '—'});"
          f" measured in {elapsed:.0f} s wall, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print_table(rows, list(rows[0]))
    if arguments.only is None:
        for name in sorted(set(record) - set(measured)):
            print(f"dropped: {name!r} is recorded but no longer measured")
    if arguments.record:
        write_record(figures, measured)
        print(f"recorded {len(figures)} figure(s) in {RECORD}")
        return 0
    worse = [row["figure"] for row in rows if row["status"] == "WORSE"]
    if worse:
        print(f"{len(worse)} figure(s) worse than recorded beyond their tolerance: {', '.join(worse)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
