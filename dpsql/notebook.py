"""Notebook displays and plots of released results and of the budget spent (matplotlib optional).

* :func:`result_html`: a result as an HTML table of ``value ± stderr`` cells with a one-line
  summary (cost and strategy) — what Jupyter shows for a cursor or a batch result set; EXPLAIN
  results are shown section by section instead.
* :func:`plot_result`: released values with confidence intervals, one bar per row.
* :func:`plot_budget`: the (ε, δ) spent over time, one step per charge, against the budget.

Everything here reads released values and public metadata only: free of privacy cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from dpsql.accountant import Budget, Cost, spent_of
from dpsql.errors import ProgrammingError
from dpsql.frame_source import HTML_ROWS, FrameSource, error_columns, escape, interval_half_width, optional_module

EXPLAIN_COLUMNS = ("section", "name", "value", "detail")
_STYLE = "border-collapse:collapse;font-family:monospace;font-size:90%"
_CELL = "padding:2px 8px;text-align:right;border-bottom:1px solid #ddd"


def summary_line(explanation: str | None) -> str | None:
    """The cost and the strategy of a statement, in one line, from its explanation text."""
    if not explanation:
        return None
    lines = [line.strip() for line in explanation.splitlines()]
    picked = [next((line for line in lines if line.startswith(prefix)), None) for prefix in ("cost:", "strategy:")]
    found = [line for line in picked if line]
    return "; ".join(found) if found else None


def _is_explain(source: FrameSource) -> bool:
    return tuple(str(d[0]) for d in source.description) == EXPLAIN_COLUMNS


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4g}"
    return escape(value)


def _shown(count: int) -> list[int | None]:
    """Row indices to show (None marks the elided middle) when a result has more than HTML_ROWS rows."""
    if count <= HTML_ROWS:
        return list(range(count))
    half = HTML_ROWS // 2
    return [*range(half), None, *range(count - half, count)]


def result_html(source: FrameSource) -> str:
    """An HTML table: keys as they are, released values as ``value ± stderr``, then the summary."""
    if _is_explain(source):
        return explain_html(source)
    names = [str(d[0]) for d in source.description]
    carrying = set() if source.errors_shown else set(error_columns(source.errors, len(names)))
    header = "".join(f"<th style='{_CELL}'>{escape(n)}</th>" for n in names)
    body = []
    for index in _shown(len(source.rows)):
        if index is None:
            body.append(f"<tr><td colspan='{len(names)}' style='{_CELL};text-align:center'>…</td></tr>")
            continue
        row, error = source.rows[index], source.errors[index]
        cells = []
        for column, value in enumerate(row):
            text = _format(value)
            if column in carrying and error[column] is not None:
                text += f" <span style='color:#888'>± {_format(error[column])}</span>"
            cells.append(f"<td style='{_CELL}'>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    summary = summary_line(source.explanation)
    footer = [f"{len(source.rows)} row(s); ± is one standard error"]
    if summary:
        footer.append(escape(summary))
    return (
        f"<table style='{_STYLE}'><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"<div style='font-size:85%;color:#555'>{'<br>'.join(footer)}</div>"
    )


def explain_html(source: FrameSource) -> str:
    """EXPLAIN rows grouped by section: statements, cost, strategy, groups, queries, errors."""
    sections: dict[str, list[Sequence[object]]] = {}
    for row in source.rows:
        sections.setdefault(str(row[0]), []).append(row)
    parts = []
    for section, rows in sections.items():
        items = "".join(
            f"<tr><td style='{_CELL};text-align:left'>{escape(name)}</td><td style='{_CELL}'>"
            f"{'' if value is None else _format(value)}</td><td style='{_CELL};text-align:left'>"
            f"{'' if detail is None else escape(detail)}</td></tr>"
            for _, name, value, detail in rows
        )
        parts.append(f"<tr><th colspan='3' style='text-align:left;padding-top:6px'>{escape(section)}</th></tr>{items}")
    return f"<table style='{_STYLE}'>{''.join(parts)}</table><div style='font-size:85%;color:#555'>EXPLAIN: nothing was read or charged</div>"


def _row_label(row: Sequence[object], keys: Sequence[int]) -> str:
    return ", ".join(escape(row[k]) if row[k] is not None else "(all)" for k in keys) or "(total)"


MAX_BARS = 30
"""Up to this many rows a plot draws bars; beyond, points with their intervals (a line and a band over one
numeric key column), so a chart of 85 ages stays as wide as a page."""
MAX_WIDTH = 12.0  # inches: no figure grows wider
PANEL_HEIGHT = 2.8  # inches per released column


def plot_result(source: FrameSource, level: float = 0.95, ax: Any = None) -> Any:
    """The released values with their ``level`` confidence intervals (value ± z·stderr), one panel per
    released column — each column keeps its own unit on its own axis (hours beside ages would not share
    one) — over the rows, labelled by their key columns. Up to :data:`MAX_BARS` rows as bars; more as
    points with intervals: a line and a band over a single numeric key (ages, hours), else one row per
    line with its label. Returns the Axes, or a list of Axes (one per released column) when there are
    several; ``ax`` may give them likewise."""
    z = interval_half_width(level)
    pyplot = optional_module("matplotlib.pyplot", "plot()")
    names = [str(d[0]) for d in source.description]
    released = error_columns(source.errors, len(names))
    if not released:
        raise ProgrammingError("plot(): the result has no released values with standard errors to plot")
    keys = [c for c in range(len(names)) if c not in released]
    count = len(source.rows)
    numeric_key = len(keys) == 1 and count > 0 and all(_is_number(row[keys[0]]) for row in source.rows)
    layout = "bars" if count <= MAX_BARS else "line" if numeric_key else "points"
    axes = _panels(pyplot, ax, len(released), layout, count)
    labels = [_row_label(row, keys) for row in source.rows]
    for axis, column in zip(axes, released):
        values = [math.nan if row[column] is None else float(row[column]) for row in source.rows]  # type: ignore[arg-type]
        spreads = [0.0 if e[column] is None else z * float(e[column]) for e in source.errors]  # type: ignore[arg-type]
        if layout == "bars":
            axis.bar(range(count), values, 0.8, yerr=spreads, capsize=3)
            many = count > 6
            axis.set_xticks(list(range(count)), labels, rotation=45 if many else 0, ha="right" if many else "center")
            axis.axhline(0, color="black", linewidth=0.5)
        elif layout == "line":
            x = [float(row[keys[0]]) for row in source.rows]  # type: ignore[arg-type]
            axis.plot(x, values, marker=".", linewidth=1)
            axis.fill_between(x, [v - s for v, s in zip(values, spreads)], [v + s for v, s in zip(values, spreads)], alpha=0.3, linewidth=0)
        else:
            axis.errorbar(values, range(count), xerr=spreads, fmt="o", markersize=3, capsize=2)
            axis.set_yticks(list(range(count)), labels, fontsize=7)
            axis.invert_yaxis()
        value_label = f"{names[column]} ({level:.0%} interval)"
        (axis.set_xlabel if layout == "points" else axis.set_ylabel)(value_label)
    key_label = ", ".join(names[k] for k in keys)
    if layout == "points":
        axes[0].set_ylabel(key_label)
    else:
        axes[-1].set_xlabel(key_label)
    axes[0].figure.tight_layout()
    return axes[0] if len(axes) == 1 else axes


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _panels(pyplot: Any, ax: Any, panels: int, layout: str, rows: int) -> list[Any]:
    """The Axes to draw on: the caller's (one per released column), or a new figure sized for the rows."""
    if ax is not None:
        given = list(ax) if isinstance(ax, (list, tuple)) else [ax]
        if len(given) != panels:
            raise ProgrammingError(f"plot(ax=…) needs {panels} Axes, one per released column, got {len(given)}")
        return given
    if layout == "points":  # rows down the page, one panel per column side by side
        height = min(max(3.5, 0.16 * rows + 1.0), 24.0)
        _, drawn = pyplot.subplots(1, panels, figsize=(min(MAX_WIDTH, 4.5 * panels + 1.5), height), sharey=True, squeeze=False)
    else:
        width = min(MAX_WIDTH, max(4.0, 0.4 * rows + 1.5)) if layout == "bars" else 8.0
        _, drawn = pyplot.subplots(panels, 1, figsize=(width, PANEL_HEIGHT * panels + 0.6), sharex=True, squeeze=False)
    return list(drawn.ravel())


def _field(record: object, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)


def _charge(record: object) -> tuple[datetime, str, Cost]:
    """A ledger history record (``Connection.budget_history()``'s :class:`~dpsql.accountant.Charge`, or a
    mapping with ``at``/``time``, ``statement``, ``epsilon``, ``rho``, ``delta`` and optionally
    ``approximate_epsilon``, ``mechanism``) as a time, a label and a cost."""
    at = _field(record, "time") if _field(record, "at") is None else _field(record, "at")
    when = datetime.fromisoformat(at) if isinstance(at, str) else at
    if not isinstance(when, datetime):
        raise ProgrammingError(f"a budget history record needs its time in 'at' (or 'time'), got {at!r}")
    epsilon, rho = _field(record, "epsilon"), _field(record, "rho")
    if rho is None:
        rho = 0.0 if epsilon is None else epsilon**2 / 2
    mechanism = _field(record, "mechanism") or ("laplace" if epsilon is not None else "gaussian")
    cost = Cost(mechanism, float(rho), epsilon, float(_field(record, "approximate_epsilon") or 0.0), float(_field(record, "delta") or 0.0))
    return when, str(_field(record, "statement") or ""), cost


def spent_over_time(records: Iterable[object], budget: Budget) -> list[tuple[datetime, str, float]]:
    """After each charge (in time order): its time, its statement and the ε spent so far, composed as
    the ledger composes it (``dpsql.accountant.spent_of``)."""
    charges = sorted((_charge(r) for r in records), key=lambda c: c[0])
    return [(when, statement, spent_of([c for _, _, c in charges[: i + 1]], budget).epsilon) for i, (when, statement, _) in enumerate(charges)]


def plot_budget(records: object, budget: Budget | None = None, ax: Any = None, label_width: int = 40) -> Any:
    """The ε spent over time, one step per charge labelled by its statement, with the budget's ε as a
    line. ``records``: a connection (``plot_budget(conn)``: its ledger's history and budget), or a history
    (``conn.budget_history()``, or records as in :func:`_charge`) with its ``budget``. Returns the Axes."""
    if budget is None and callable(getattr(records, "budget_history", None)):
        records, budget = records.budget_history(), records.budget  # type: ignore[attr-defined]
    if not isinstance(budget, Budget):
        raise ProgrammingError("plot_budget() needs a connection, plot_budget(conn), or a history and its budget, plot_budget(records, budget)")
    pyplot = optional_module("matplotlib.pyplot", "plot_budget()")
    steps = spent_over_time(records, budget)  # type: ignore[arg-type]
    if ax is None:
        _, ax = pyplot.subplots(figsize=(8, 3.5))
    if steps:
        times = [when for when, _, _ in steps]
        spent = [value for _, _, value in steps]
        ax.step(times, spent, where="post", marker="o", label="ε spent")
        for when, statement, value in steps:
            short = statement if len(statement) <= label_width else statement[: label_width - 1] + "…"
            ax.annotate(short, (when, value), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axhline(budget.epsilon, color="red", linestyle="--", label=f"budget ε = {budget.epsilon:g}")
    ax.set_ylim(0, 1.1 * max([budget.epsilon, *(value for _, _, value in steps)]))
    ax.set_ylabel("ε spent")
    ax.set_xlabel("time of charge")
    ax.legend(loc="lower right")
    ax.xaxis.set_major_formatter(optional_module("matplotlib.dates", "plot_budget()").DateFormatter("%H:%M:%S"))
    ax.figure.autofmt_xdate()
    ax.figure.tight_layout()
    return ax
