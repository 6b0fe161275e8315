"""Aggregate kinds: one module per kind, registered by the sqlglot expression types it answers.

Each kind (:mod:`.counts`, :mod:`.moments`, :mod:`.quantiles`) is a :class:`Kind` that owns, for its SELECT
items: reading a call of the statement into a checked item with the refusals the statement alone decides
(``parse``), and the data vector that item is measured over (``vector``, ``dpsql.sql.data_vectors``). The
statement checker and the composition of a statement into parts dispatch through :func:`kind_of` and
:func:`item_kind` instead of testing types, so a new aggregate kind is one module added to :data:`KINDS`.
The later stages (compile, SQL weights, release, EXPLAIN) still dispatch on the item types; moving them onto
kinds is the next step of this protocol (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from dpsql.sql.kinds import counts, moments, quantiles
from dpsql.sql.parse import SelectItem

ColumnOf = Callable[[exp.Expression, str], str]
Vector = tuple[str, ...]


@dataclass(frozen=True)
class Kind:
    """One aggregate kind: the sqlglot types it answers, the checked item types it makes, how it reads a call,
    and the data vector an item is measured over."""

    name: str
    expressions: tuple[type[exp.Expression], ...]
    items: tuple[type, ...]
    parse: Callable[[exp.Expression, str | None, ColumnOf], SelectItem]
    vector: Callable[[SelectItem], Vector]
    node_vector: Callable[[exp.Expression], Vector]


KINDS: tuple[Kind, ...] = tuple(
    Kind(m.NAME, m.EXPRESSIONS, m.ITEMS, m.parse, m.vector, m.node_vector) for m in (counts, moments, quantiles)
)
_BY_EXPRESSION = {t: kind for kind in KINDS for t in kind.expressions}
_BY_ITEM = {t: kind for kind in KINDS for t in kind.items}


def kind_of(node: exp.Expression) -> Kind | None:
    """The kind that answers a call of the statement, or None."""
    if isinstance(node, exp.WithinGroup):  # PERCENTILE_CONT(q) WITHIN GROUP (…); the quantiles kind refuses any other
        return _BY_EXPRESSION[exp.PercentileCont]
    return _BY_EXPRESSION.get(type(node))


def item_kind(item: SelectItem) -> Kind | None:
    """The kind of a checked SELECT item (None for a group key)."""
    return _BY_ITEM.get(type(item))


def parse_item(node: exp.Expression, name: str | None, column: ColumnOf) -> SelectItem | None:
    """A SELECT item (alias removed) read by its kind, or None when no kind answers it."""
    kind = kind_of(node)
    return None if kind is None else kind.parse(node, name, column)
