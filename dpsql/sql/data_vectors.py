"""Which data vector each aggregate of a statement is measured over, and how a request splits into parts.

One measurement (one plan, one noise draw) is over one data vector: the histogram of the bounded rows over
the group cells (``COUNT``, ``COUNT(column)``, quantiles' CDFs), extended by the moment cells of ONE
aggregated value (``SUM``/``AVG``/``VARIANCE``/``STDDEV`` of a column or a bounded expression, beside which
the counts are free: they are the cells' totals), or the (unit, group cell) pairs of ``COUNT(DISTINCT unit)``.
A statement asking for aggregates over several vectors — ``SUM(age), SUM(income)``; ``COUNT(DISTINCT pid),
COUNT(*)`` — is *composed*: :func:`dpsql.sql.split.bind` gives each vector a private core of its own (the same
GROUP BY) and joins their released rows on the group keys in the public shell; the pipeline plans each part
(:func:`parts`) at a share of the statement's budget chosen by ``planner.composition_shares`` (the shares that
minimise the statement's total expected error), and charges the statement once.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from dpsql.sql.parse import AGGREGATES, Aggregate, Count, Quantile, SelectItem

Vector = tuple[str, ...]
ROWS: Vector = ("rows",)
PAIRS: Vector = ("pairs",)


def item_vector(item: SelectItem) -> Vector | None:
    """The data vector a checked SELECT item is measured over (None for a group key)."""
    if isinstance(item, Aggregate):
        return ("moments", item.column.lower())
    if isinstance(item, Count) and item.distinct:
        return PAIRS
    return ROWS if isinstance(item, (Count, Quantile)) else None


def node_vector(node: exp.Expression) -> Vector:
    """The data vector of an aggregate call of the SQL text (as :func:`item_vector` for its checked item)."""
    inner = node.this if isinstance(node, (exp.Filter, exp.WithinGroup)) else node
    if isinstance(inner, exp.Count) and isinstance(inner.this, exp.Distinct):
        return PAIRS
    if type(inner) in AGGREGATES and inner.this is not None:
        argument = inner.this
        copy = argument.copy()
        for column in copy.find_all(exp.Column):
            for part in ("table", "db", "catalog"):
                column.set(part, None)
        return ("moments", (copy.name if isinstance(copy, exp.Column) else copy.sql(dialect="duckdb")).lower())
    return ROWS


def assigned(vectors: Sequence[Vector | None]) -> list[Vector | None]:
    """Each aggregate's part: its vector, except that counts and quantiles over rows ride with the first
    aggregated value (its moment cells' totals are the counts)."""
    first = next((v for v in vectors if v is not None and v[0] == "moments"), None)
    return [first if v == ROWS and first is not None else v for v in vectors]


def composed(vectors: Sequence[Vector | None]) -> bool:
    """Whether aggregates over these vectors need more than one measurement."""
    return len({v for v in assigned(vectors) if v is not None}) > 1


def parts(statements: Sequence[Sequence[SelectItem]]) -> list[list[int]]:
    """The statements (by index; each given by its SELECT items, every branch's) grouped into parts of one data
    vector each, in order of first appearance; a statement over no vector joins the first part."""
    per_statement = []
    for items in statements:
        found = {v for v in assigned([item_vector(i) for i in items]) if v is not None}
        per_statement.append(found)
    every = assigned([v for found in per_statement for v in sorted(found)])
    first_value = next((v for v in every if v is not None and v[0] == "moments"), None)
    groups: dict[Vector | None, list[int]] = {}
    for index, found in enumerate(per_statement):
        key = next(iter(found)) if len(found) == 1 else None
        if key == ROWS and first_value is not None:
            key = first_value
        groups.setdefault(key, []).append(index)
    if None in groups and len(groups) > 1:  # no vector (keys only), or several (refused by the part's compile)
        loose = groups.pop(None)
        first = next(iter(groups))
        groups[first] = sorted(groups[first] + loose)
    return list(groups.values())
