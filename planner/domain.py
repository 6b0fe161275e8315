"""The data domain: an ordered tuple of attributes, each with a finite size.

The data vector ``x`` counts rows per cell of the cross product of the attributes, in C order
(the first attribute varies slowest). Nothing in the planner ever materializes ``x`` for a large
domain: strategies work on marginals over a few attributes at a time.

>>> dom = Domain({"sex": 2, "race": 5, "age": 74}, ordered={"age"})
>>> dom.size, dom.shape(("race", "sex"))
(740, (5, 2))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, init=False)
class Domain:
    """Attribute names with their sizes; ``ordered`` marks attributes with a meaningful order
    (integer ranges, numeric bins, dates), which admit range queries and hierarchies."""

    attributes: tuple[str, ...]
    sizes: tuple[int, ...]
    ordered: frozenset[str]

    def __init__(self, sizes: Mapping[str, int], ordered: Iterable[str] = ()) -> None:
        attributes = tuple(sizes)
        size_values = tuple(sizes[name] for name in attributes)
        for name, size in zip(attributes, size_values):
            if not isinstance(name, str) or not name:
                raise ValueError(f"attribute names must be non-empty strings, got {name!r}")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"attribute {name!r} needs a positive integer size, got {size!r}")
        ordered_set = frozenset(ordered)
        unknown = ordered_set - set(attributes)
        if unknown:
            raise ValueError(f"ordered attributes {sorted(unknown)} are not in the domain {list(attributes)}")
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "sizes", size_values)
        object.__setattr__(self, "ordered", ordered_set)
        object.__setattr__(self, "_positions", {name: i for i, name in enumerate(attributes)})  # not a field
        object.__setattr__(self, "_hash", hash((attributes, size_values, ordered_set)))  # not a field: a key of many caches

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    @property
    def size(self) -> int:
        """Number of cells of the full cross-product domain (may be astronomically large)."""
        return math.prod(self.sizes)

    def __len__(self) -> int:
        return len(self.attributes)

    def __contains__(self, attribute: object) -> bool:
        return attribute in self.attributes

    def size_of(self, attribute: str) -> int:
        return self.sizes[self.index(attribute)]

    def index(self, attribute: str) -> int:
        try:
            return self._positions[attribute]
        except (KeyError, TypeError):
            raise ValueError(f"unknown attribute {attribute!r}; the domain has {list(self.attributes)}") from None

    def is_ordered(self, attribute: str) -> bool:
        self.index(attribute)
        return attribute in self.ordered

    def canonical(self, attributes: Iterable[str]) -> tuple[str, ...]:
        """The given attributes, deduplicated and sorted into domain order."""
        return tuple(sorted(set(attributes), key=self.index))

    def shape(self, attributes: Iterable[str]) -> tuple[int, ...]:
        """Sizes of the given attributes, in the order given."""
        return tuple(self.size_of(a) for a in attributes)

    def project(self, attributes: Iterable[str]) -> Domain:
        """The sub-domain on the given attributes (in domain order)."""
        kept = self.canonical(attributes)
        return Domain({a: self.size_of(a) for a in kept}, ordered=self.ordered & set(kept))

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.attributes, self.sizes))
