"""What opening a ledger, a budget check and a charge cost as its history grows: before and after the
constant-time open.

Before (``--baseline-commit``, format 2), opening a ledger re-chained and re-summed its whole history;
after (format 3), it checks the digest of the running totals, the last charge's link and the directory
registry's checkpoint, and a charge also moves that checkpoint forward. Both implementations run side by
side in this process on the same history: the baseline is ``dpsql/accountant.py`` and
``dpsql/ledger_format.py`` as they were at the baseline commit (read with ``git show``, so the
repository's history must be at hand), the current one is the working tree's.

Each baseline ledger is filled with N past charges by one bulk insert (chained and totalled with the
baseline's own functions); the current ledger is a copy of it, upgraded to format 3 by its first open
(which checks the whole history once: ``upgrade_ms``). Then each is timed: opening the file (median of
``--opens``), ``check`` (median of ``--repeats`` calls) and ``charge`` (median, fsynced as in production).

    python benchmarks/ledger.py [--charges 10000 100000] [--opens 5] [--repeats 15]

Prints a table and writes benchmarks/results/ledger.csv.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

from results_io import print_table, write_csv

from dpsql.accountant import Budget, Cost, Ledger

REPOSITORY = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "18a1091"  # main before the constant-time open and the registry's checkpoints
BUDGET = Budget(epsilon=1e6, delta=1e-6)
COST = Cost.pure(0.001)


def baseline_source(commit: str, path: str) -> str:
    try:
        return subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPOSITORY, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        sys.exit(f"cannot read {path} at {commit} with git: {error}")


def baseline_module(commit: str) -> types.ModuleType:
    """The accountant module as it was at ``commit``, on the ledger format module of that commit."""
    ledger_format = types.ModuleType("baseline_ledger_format")
    sys.modules[ledger_format.__name__] = ledger_format
    exec(compile(baseline_source(commit, "dpsql/ledger_format.py"), f"{commit}:dpsql/ledger_format.py", "exec"), ledger_format.__dict__)
    module = types.ModuleType("baseline_accountant")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the source runs
    module.ledger_format = ledger_format  # type: ignore[attr-defined]
    source = baseline_source(commit, "dpsql/accountant.py").replace("from dpsql import ledger_format\n", "")
    exec(compile(source, f"{commit}:dpsql/accountant.py", "exec"), module.__dict__)
    return module


def filled_baseline(module: types.ModuleType, path: Path, charges: int) -> None:
    """A baseline ledger with ``charges`` past charges, chained and totalled as the baseline does."""
    ledger = module.Ledger(path, module.Budget(BUDGET.epsilon, BUDGET.delta))
    now = datetime.now(UTC).isoformat()
    head, rows = module.ledger_format.genesis(ledger.ledger_id), []
    for index in range(charges):
        fields = (now, "laplace", COST.epsilon, COST.rho, 0.0, 0.0, f"SELECT {index}")
        head = module.ledger_format.chained(head, fields)
        rows.append((*fields, head))
    totals = module.Totals(charges, Fraction(COST.rho) * charges, Fraction(COST.epsilon) * charges)
    with ledger._transaction():
        ledger._db.executemany(f"INSERT INTO charges ({module.ledger_format.CHARGE_COLUMNS}, chain) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        ledger._write_totals(totals, head)
    ledger.close()


def median_seconds(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(name: str, open_ledger: Callable[[], object], charges: int, opens: int, repeats: int) -> dict[str, object]:
    opened = median_seconds(lambda: open_ledger().close(), opens)  # type: ignore[attr-defined]
    ledger = open_ledger()
    check = median_seconds(lambda: ledger.check(COST), repeats)  # type: ignore[attr-defined]
    charge = median_seconds(lambda: ledger.charge(COST, "SELECT 1"), max(3, repeats // 3))  # type: ignore[attr-defined]
    ledger.close()  # type: ignore[attr-defined]
    return {"past_charges": charges, "ledger": name, "open_ms": 1e3 * opened, "check_ms": 1e3 * check, "charge_ms": 1e3 * charge}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--opens", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--baseline-commit", default=BASELINE_COMMIT)
    arguments = parser.parse_args()
    baseline = baseline_module(arguments.baseline_commit)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for charges in arguments.charges:
            (Path(directory) / "before").mkdir(exist_ok=True)
            (Path(directory) / "after").mkdir(exist_ok=True)
            old_path, new_path = Path(directory) / "before" / f"{charges}.ledger", Path(directory) / "after" / f"{charges}.ledger"
            filled_baseline(baseline, old_path, charges)
            shutil.copy2(old_path, new_path)
            started = time.perf_counter()
            Ledger(new_path, None).close()  # format 2 -> 3: the whole history checked once
            upgraded = time.perf_counter() - started
            before = measure(f"before ({arguments.baseline_commit}: re-check all)", lambda: baseline.Ledger(old_path, None), charges, arguments.opens, arguments.repeats)
            after = measure("after (constant-time open)", lambda: Ledger(new_path, None), charges, arguments.opens, arguments.repeats)
            after["upgrade_ms"] = 1e3 * upgraded
            after["open_speedup"] = before["open_ms"] / after["open_ms"]  # type: ignore[operator]
            before["open_speedup"], before["upgrade_ms"] = 1.0, ""
            rows += [before, after]
    columns = ["past_charges", "ledger", "open_ms", "open_speedup", "check_ms", "charge_ms", "upgrade_ms"]
    print_table(rows, columns, lambda v: f"{v:.3f}" if isinstance(v, float) else str(v))
    path = write_csv("ledger.csv", rows, columns)
    print(
        f"\nmedians of {arguments.opens} opens, {arguments.repeats} checks and {max(3, arguments.repeats // 3)} fsynced charges "
        f"per ledger; upgrade_ms: the one-time format upgrade (whole history checked); written to {path}"
    )


if __name__ == "__main__":
    main()
