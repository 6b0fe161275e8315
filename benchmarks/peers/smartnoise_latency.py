"""SmartNoise SQL's time for one statement on a small table (its pandas reader), for ``benchmarks/latency.py``.

Run by ``latency.py`` in a separate environment that has ``smartnoise-sql`` (never a dpsql dependency):
``python smartnoise_latency.py DATA.csv MAX_IDS EPSILON REPEATS STATEMENT...`` reads the table (columns
person_id, sex, race, age, income), opens one private reader on it and times ``reader.execute(statement)``
``REPEATS`` times after one warm-up, for each statement. ``MAX_IDS`` 0 means row-level privacy (one row =
one unit), else the person-level bound (SmartNoise samples at most that many rows per ``person_id``).
Prints one JSON line per statement ``{"statement", "median_s", "cold_s", "rows"}`` and a last line with
SmartNoise's version.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from importlib.metadata import version

import pandas as pd
import snsql

TABLE = "census.census"  # SmartNoise names a table schema.table; latency.py's statements say FROM census


def metadata(max_ids: int, rows: int) -> dict:
    """The table described as dpsql's schema describes it: sex and race categorical, age in [17, 90],
    income in [0, 1,000,000); keys are public (no censoring of rare groups, as with dpsql's domains)."""
    table: dict = {
        "rows": rows,
        "censor_dims": False,
        "sex": {"type": "string"},
        "race": {"type": "int"},
        "age": {"type": "int", "lower": 17, "upper": 90},
        "income": {"type": "int", "lower": 0, "upper": 999_999},
    }
    if max_ids:
        table.update(max_ids=max_ids, person_id={"type": "int", "private_id": True})
    else:
        table.update(row_privacy=True, person_id={"type": "int"})
    return {"Census": {"census": {"census": table}}}


def main(path: str, max_ids: int, epsilon: float, repeats: int, statements: list[str]) -> None:
    frame = pd.read_csv(path)
    reader = snsql.from_df(frame, privacy=snsql.Privacy(epsilon=epsilon, delta=1e-6), metadata=metadata(max_ids, len(frame)))
    for statement in statements:
        query = statement.replace("FROM census", f"FROM {TABLE}")
        started = time.perf_counter()
        reader.execute(query)
        cold = time.perf_counter() - started
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            reader.execute(query)
            times.append(time.perf_counter() - started)
        print(json.dumps({"statement": statement, "median_s": statistics.median(times), "cold_s": cold, "rows": len(frame)}))
    print(json.dumps({"smartnoise-sql": version("smartnoise-sql")}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
