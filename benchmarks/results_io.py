"""What every benchmark script does with its rows: print them as an aligned table, write them as CSV."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

Row = dict[str, object]


def previous_rows(name: str) -> list[dict[str, str]]:
    """The rows of ``results/<name>`` as the previous run wrote them (none if it was never written): what a
    benchmark prints beside each new figure."""
    path = RESULTS / name
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def number_text(value: object) -> str:
    """Floats to four decimals, empty cells as a dash."""
    if isinstance(value, float):
        return f"{value:.4f}"
    return "—" if value == "" else str(value)


def print_table(rows: Sequence[Row], columns: Sequence[str], text: Callable[[object], str] = str) -> None:
    widths = {c: max(len(c), *(len(text(r[c])) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(text(row[c]).ljust(widths[c]) for c in columns))


def write_csv(name: str, rows: Sequence[Row], columns: Sequence[str] | None = None) -> Path:
    """``results/<name>`` with one line per row (columns: those given, else the first row's keys)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns if columns is not None else rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path
