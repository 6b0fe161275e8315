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

from dpsql.sql.kinds import item_kind, kind_of
from dpsql.sql.kinds.counts import ROWS
from dpsql.sql.parse import SelectItem

Vector = tuple[str, ...]


def item_vector(item: SelectItem) -> Vector | None:
    """The data vector a checked SELECT item is measured over, as its kind says (None for a group key)."""
    kind = item_kind(item)
    return None if kind is None else kind.vector(item)


def node_vector(node: exp.Expression) -> Vector:
    """The data vector of an aggregate call of the SQL text (as :func:`item_vector` for its checked item)."""
    inner = node.this if isinstance(node, exp.Filter) else node
    kind = kind_of(inner)
    return ROWS if kind is None else kind.node_vector(inner.this if isinstance(inner, exp.WithinGroup) else inner)


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
