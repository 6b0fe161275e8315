"""The one SQL statement of a GROUP BY over a column with no public domain (an *unknown key*):
contribution bounding per key, then per-key distinct units and the counts over the bounded rows.

It is :class:`~dpsql.sql.bounded.BoundedAggregation` with two more bounds, applied per unit before
its ``max_rows_per_unit`` window, each a random choice that depends on the unit's own rows only::

    DENSE_RANK() OVER (PARTITION BY unit ORDER BY HASH(HASH(unit, key, <salt>)), key) <= max_groups_per_unit
    ROW_NUMBER() OVER (PARTITION BY unit, key ORDER BY HASH(HASH(unit, key, <cells>, <salt>))) <= max_rows_per_group

The first keeps at most ``k`` keys per unit (distinct keys never share a rank, because the key
itself breaks hash ties); the second at most ``r`` rows per unit and key. The aggregation then
counts, over the same bounded rows, ``COUNT(*)`` per cell of the statement's domain and
``COUNT(DISTINCT unit)`` per key (``GROUPING SETS`` when the statement also groups by declared
columns). Without a privacy unit each row is a unit, and both bounds are 1 by the schema's rules.

The key enters as its raw value; NULL is a key like any other. While the key's domain is unknown
it has no domain test (every key of the data is counted); once a key set has been released, the
column carries that set as its categories and rows with other keys are dropped before bounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from dpsql.sql.bounded import COUNT_NAME, GROUPING_NAME, UNIT_NAME, BoundedAggregation, salted_order_key

UNITS_NAME = "units"
KEY_RANK_NAME = "key_in_unit"
ROW_IN_KEY_NAME = "row_in_key"


@dataclass(frozen=True)
class KeyHistogram:
    """What the statement returns, keyed by the raw key values found in the bounded rows.

    ``counts[i]`` is the dense count table of key ``keys[i]`` over the other attributes of the
    domain (in domain order, the key's axis removed); ``units[i]`` its number of distinct units.
    """

    keys: tuple[object, ...]
    units: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True)
class KeyBoundedAggregation(BoundedAggregation):
    """A :class:`BoundedAggregation` over one domain (``marginals[0]``, the key among its attributes)
    that also bounds keys per unit and rows per key, and counts distinct units per key."""

    key_column: str = ""
    max_groups_per_unit: int = 1
    max_rows_per_group: int = 1

    # -- the statement ---------------------------------------------------------------------------------
    def _in_domain(self, name: str) -> exp.Expression:
        if name == self.key_column and not self.columns[name].is_known:
            return exp.true()  # no public domain yet: every key of the data takes part in selection
        return super()._in_domain(name)

    def _counted_references(self) -> list[exp.Expression]:
        references = super()._counted_references()
        return references + [exp.column(UNIT_NAME)] if self.privacy_unit is not None else references

    def _bounded(self, kept: exp.Select) -> exp.Select:
        unit, key = exp.column(UNIT_NAME), exp.column(self.alias(self.key_column))
        key_rank = exp.Window(
            this=exp.DenseRank(),
            partition_by=[unit],
            order=exp.Order(
                expressions=[
                    exp.Ordered(this=salted_order_key([unit.copy(), key.copy()], self.salt)),
                    exp.Ordered(this=key.copy()),
                ]
            ),
        )
        cells = [exp.column(self.alias(c)) for c in self.counted_columns]
        row_in_key = exp.Window(
            this=exp.RowNumber(),
            partition_by=[unit.copy(), key.copy()],
            order=exp.Order(expressions=[exp.Ordered(this=salted_order_key([unit.copy(), key.copy(), *cells], self.salt))]),
        )
        ranked = kept.select(exp.alias_(key_rank, KEY_RANK_NAME), exp.alias_(row_in_key, ROW_IN_KEY_NAME))
        within = exp.and_(
            exp.column(KEY_RANK_NAME) <= exp.Literal.number(self.max_groups_per_unit),
            exp.column(ROW_IN_KEY_NAME) <= exp.Literal.number(self.max_rows_per_group),
        )
        return super()._bounded(exp.select(*self._counted_references()).from_(ranked.subquery("ranked")).where(within))

    def _aggregate(self, kept: exp.Select) -> exp.Select:
        counted = [exp.column(self.alias(c)) for c in self.counted_columns]
        key = exp.column(self.alias(self.key_column))
        units = exp.Count(this=exp.Distinct(expressions=[exp.column(UNIT_NAME)])) if self.privacy_unit else exp.Count(this=exp.Star())
        query = exp.select(*counted).from_(kept.subquery("bounded"))
        if len(counted) > 1:
            query = query.select(exp.alias_(exp.func("GROUPING", *counted), GROUPING_NAME))
        query = query.select(exp.alias_(exp.Count(this=exp.Star()), COUNT_NAME), exp.alias_(units, UNITS_NAME))
        if len(counted) == 1:
            return query.group_by(key)
        sets = [exp.Tuple(expressions=[c.copy() for c in counted]), exp.Tuple(expressions=[key.copy()])]
        return query.group_by(exp.GroupingSets(expressions=sets))

    # -- reading the result ----------------------------------------------------------------------------
    def key_histogram(self, result: Mapping[str, np.ndarray]) -> KeyHistogram:
        """Per key of the bounded rows: its distinct units and its count table over the other attributes.
        Rows whose value of a declared column lies outside its domain are dropped (as in
        :meth:`BoundedAggregation.marginal_arrays`)."""
        attributes = self.counted_columns
        others = [c for c in attributes if c != self.key_column]
        counts = np.asarray(np.ma.filled(result[COUNT_NAME], 0), dtype=np.int64)
        units = np.asarray(np.ma.filled(result[UNITS_NAME], 0), dtype=np.int64)
        keys = _raw_values(result[self.alias(self.key_column)])
        if others:
            ids = np.asarray(np.ma.filled(result[GROUPING_NAME], -1))
            full, per_key = ids == 0, ids == self.grouping_id((self.key_column,))
        else:
            full = per_key = np.ones(len(counts), dtype=bool)
        cells = {c: self._cells_of(c, result[self.alias(c)]) for c in others}
        for column in others:
            full &= cells[column][1]
        found = tuple(dict.fromkeys(keys[i] for i in np.flatnonzero(per_key)))
        index = {key: position for position, key in enumerate(found)}
        key_units = np.zeros(len(found), dtype=np.int64)
        for row in np.flatnonzero(per_key):
            key_units[index[keys[row]]] = units[row]
        table = np.zeros((len(found), *(self.columns[c].size for c in others)), dtype=np.int64)
        rows = np.flatnonzero(full)
        positions = np.array([index[keys[row]] for row in rows], dtype=np.int64)
        np.add.at(table, (positions, *(cells[c][0][rows] for c in others)), counts[rows])
        if self.privacy_unit is None:  # a row is a unit; declared values may have been tested on the result only
            key_units = table.reshape(len(found), -1).sum(axis=1)
        present = np.flatnonzero(key_units > 0)
        return KeyHistogram(tuple(found[i] for i in present), key_units[present], table[present])


def _raw_values(returned: np.ndarray) -> list[object]:
    """Python values of a result column (NULL as None; numpy scalars as Python scalars)."""
    missing = np.ma.getmaskarray(returned)
    values = np.ma.getdata(returned)
    return [None if gone or _is_nan(value) else _python(value) for value, gone in zip(values, missing)]


def _python(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def _is_nan(value: object) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and bool(np.isnan(value)))
