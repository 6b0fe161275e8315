"""What a budget check and a charge cost as a ledger's history grows: before and after issue 17.

Before, every check and charge re-read and re-summed all past charges (inside the write lock, for a
charge); after, both read the one-row running totals, and opening a ledger verifies the whole history
once. Both implementations run side by side in this process on ledgers of the same length: the
baseline is ``dpsql/accountant.py`` as it was at ``--baseline-commit`` (read with ``git show``, so the
repository's history must be at hand), the current one is the working tree's.

Each ledger is filled with N past charges (the baseline's by one bulk insert, as it has no faster
path; the current one through ``Ledger.charge`` itself, with fsync off while filling), then timed:
``check`` (median of ``--repeats`` calls), ``charge`` (median, fsynced as in production) and opening
the file (which the current ledger spends verifying the history).

    python benchmarks/ledger.py [--charges 1000 100000] [--repeats 15]

Prints a table and writes benchmarks/results/ledger.csv.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from results_io import print_table, write_csv

from dpsql.accountant import Budget, Cost, Ledger

REPOSITORY = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "43b9496"  # main before issue 17
BUDGET = Budget(epsilon=1e6, delta=1e-6)
COST = Cost.pure(0.001)


def baseline_module(commit: str) -> types.ModuleType:
    """The accountant module as it was at ``commit``."""
    try:
        source = subprocess.run(
            ["git", "show", f"{commit}:dpsql/accountant.py"], cwd=REPOSITORY, check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        sys.exit(f"cannot read the baseline accountant at {commit} with git: {error}")
    module = types.ModuleType("baseline_accountant")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the source runs
    exec(compile(source, f"{commit}:dpsql/accountant.py", "exec"), module.__dict__)
    return module


def filled_baseline(module: types.ModuleType, path: Path, charges: int) -> None:
    ledger = module.Ledger(path, module.Budget(BUDGET.epsilon, BUDGET.delta))
    now = datetime.now(UTC).isoformat()
    rows = [(now, "laplace", COST.epsilon, COST.rho, 0.0, 0.0, f"SELECT {i}") for i in range(charges)]
    with ledger._transaction():
        ledger._db.executemany(
            "INSERT INTO charges (at, mechanism, epsilon, rho, approximate_epsilon, delta, statement) VALUES (?, ?, ?, ?, ?, ?, ?)", rows
        )
    ledger.close()


def filled_current(path: Path, charges: int) -> None:
    ledger = Ledger(path, BUDGET)
    ledger._db.execute("PRAGMA synchronous=OFF")  # filling only; the timed ledger is reopened with FULL
    for i in range(charges):
        ledger.charge(COST, f"SELECT {i}")
    ledger.close()


def median_seconds(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(name: str, open_ledger: Callable[[], object], charges: int, repeats: int) -> dict[str, object]:
    started = time.perf_counter()
    ledger = open_ledger()
    opened = time.perf_counter() - started
    check = median_seconds(lambda: ledger.check(COST), repeats)  # type: ignore[attr-defined]
    charge = median_seconds(lambda: ledger.charge(COST, "SELECT 1"), max(3, repeats // 3))  # type: ignore[attr-defined]
    ledger.close()  # type: ignore[attr-defined]
    return {"past_charges": charges, "ledger": name, "check_ms": 1e3 * check, "charge_ms": 1e3 * charge, "open_ms": 1e3 * opened}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--baseline-commit", default=BASELINE_COMMIT)
    arguments = parser.parse_args()
    baseline = baseline_module(arguments.baseline_commit)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for charges in arguments.charges:
            old_path, new_path = Path(directory) / f"before-{charges}.ledger", Path(directory) / f"after-{charges}.ledger"
            filled_baseline(baseline, old_path, charges)
            filled_current(new_path, charges)
            rows.append(measure(f"before ({arguments.baseline_commit}: re-sum)", lambda: baseline.Ledger(old_path, None), charges, arguments.repeats))
            rows.append(measure("after (running totals)", lambda: Ledger(new_path, None), charges, arguments.repeats))
            before, after = rows[-2], rows[-1]
            after["check_speedup"] = before["check_ms"] / after["check_ms"]  # type: ignore[operator]
            before["check_speedup"] = 1.0
    columns = ["past_charges", "ledger", "check_ms", "charge_ms", "open_ms", "check_speedup"]
    print_table(rows, columns, lambda v: f"{v:.3f}" if isinstance(v, float) else str(v))
    path = write_csv("ledger.csv", rows, columns)
    print(f"\nmedians of {arguments.repeats} checks and {max(3, arguments.repeats // 3)} fsynced charges per ledger; written to {path}")


if __name__ == "__main__":
    main()
