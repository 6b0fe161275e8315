"""Item-set randomizers: protocols whose report supports a set of items (Wang et al. 2017's "pure" protocols).

Unary encoding (one bit per item, RAPPOR / OUE), optimized local hashing (a random hash into `g`
buckets, randomized response on the bucket) and subset selection (`k` items, the true one favoured)
have `2ⁿ`, `2^52·g` and `C(n, k)` outputs, too many for a dense strategy matrix. Each scheme here
randomizes one value in plain Python and tells the server which items a report supports; the
standard estimator is `x̂ = (Σ supports − N q) / (p − q)`, with variances from `SupportProbabilities`.
"""

from __future__ import annotations

import hashlib
import math
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.ldp.errors import MechanismFormatError

HASH_SEED_BITS = 52
"""Local-hashing seeds stay below 2^53 so every JSON implementation reads them exactly."""


@dataclass(frozen=True)
class SupportProbabilities:
    """How often one report supports items, for a user of type `u`.

    `true_item`: `p = P(u supported)`; `other_item`: `q = P(i supported)`, `i ≠ u`;
    `true_and_other`: `P(u and j supported)`; `two_others`: `P(i and j supported)`, `i ≠ j`, both `≠ u`.
    """

    true_item: float
    other_item: float
    true_and_other: float
    two_others: float

    @classmethod
    def independent(cls, p: float, q: float) -> SupportProbabilities:
        """Items supported independently (unary encoding, local hashing with a random hash)."""
        return cls(p, q, p * q, q * q)

    def query_second_moments(self, W: np.ndarray) -> np.ndarray:
        """`S[i, u] = E[(W_i (b − q1))²] / (p − q)²` for the support vector `b` of a type-`u` report.

        `E[(b − q1)(b − q1)ᵀ] = (r₂−q²) 11ᵀ + (q−r₂) I + (r₁−r₂−q(p−q))(e_u1ᵀ + 1e_uᵀ) + (p−q−2r₁+2r₂) e_ue_uᵀ`.
        """
        p, q, r1, r2 = self.true_item, self.other_item, self.true_and_other, self.two_others
        row_sums = W.sum(axis=1, keepdims=True)
        quadratic = (
            (q - r2) * (W**2).sum(axis=1, keepdims=True)
            + (r2 - q * q) * row_sums**2
            + 2 * (r1 - r2 - q * (p - q)) * W * row_sums
            + (p - q - 2 * r1 + 2 * r2) * W**2
        )
        return quadratic / (p - q) ** 2


def comb(n: int, k: int) -> int:
    """Binomial coefficient, 0 outside `0 ≤ k ≤ n`."""
    return math.comb(n, k) if 0 <= k <= n else 0


class ItemSetScheme(ABC):
    """A client randomizer whose reports support sets of items."""

    kind: str
    num_types: int
    epsilon: float

    @property
    @abstractmethod
    def support(self) -> SupportProbabilities: ...

    @abstractmethod
    def randomize(self, value: int, rng: random.Random) -> Any:
        """The JSON-able report of a user of type `value`."""

    @abstractmethod
    def supported_items(self, report: Any) -> list[int]:
        """The items `report` supports; `MechanismFormatError` if it is not a report of this scheme."""

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The scheme's parameters besides kind, size and ε, for JSON."""

    def _item_list(self, report: Any, size: int | None = None) -> list[int]:
        if not isinstance(report, list) or not all(_is_index(item, self.num_types) for item in report):
            raise MechanismFormatError(f"a {self.kind} report must be a list of item indices in [0, {self.num_types})")
        if len(set(report)) != len(report) or (size is not None and len(report) != size):
            raise MechanismFormatError(f"a {self.kind} report must list {size or 'distinct'} distinct items")
        return list(report)


def _is_index(value: Any, bound: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < bound


@dataclass(frozen=True)
class UnaryEncoding(ItemSetScheme):
    """One bit per item; the true item's bit is 1 w.p. `p`, every other bit w.p. `q`.
    Optimized (OUE): `p = 1/2`, `q = 1/(e^ε+1)`; basic RAPPOR: `p = e^{ε/2}/(e^{ε/2}+1) = 1 − q`.
    Reports list the items whose bit is 1."""

    num_types: int
    epsilon: float
    optimized: bool = True
    kind = "unary encoding"

    @property
    def support(self) -> SupportProbabilities:
        if self.optimized:
            return SupportProbabilities.independent(0.5, 1 / (math.exp(self.epsilon) + 1))
        keep = math.exp(self.epsilon / 2) / (math.exp(self.epsilon / 2) + 1)
        return SupportProbabilities.independent(keep, 1 - keep)

    def randomize(self, value: int, rng: random.Random) -> list[int]:
        p, q = self.support.true_item, self.support.other_item
        return [item for item in range(self.num_types) if rng.random() < (p if item == value else q)]

    def supported_items(self, report: Any) -> list[int]:
        return self._item_list(report)

    def parameters(self) -> dict[str, Any]:
        return {"optimized": self.optimized}


def bucket_of(seed: int, item: int, buckets: int) -> int:
    """The local-hashing hash `h_seed(item) ∈ [0, buckets)` (BLAKE2b, reproducible on any client)."""
    digest = hashlib.blake2b(f"{seed}:{item}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % buckets


def local_hashing_buckets(epsilon: float) -> int:
    """`g = ⌈e^ε + 1⌉` hash buckets (docs/math.md §8)."""
    return math.ceil(math.exp(epsilon) + 1)


@dataclass(frozen=True)
class LocalHashing(ItemSetScheme):
    """Optimized local hashing: pick a random hash seed, report `[seed, bucket]` where the bucket is
    `h_seed(value)` w.p. `p = e^ε/(e^ε+g−1)`, else one of the other `g − 1` uniformly. A report
    supports every item hashing to its bucket (`q = 1/g` for a random hash)."""

    num_types: int
    epsilon: float
    buckets: int
    kind = "local hashing"

    @property
    def support(self) -> SupportProbabilities:
        boost = math.exp(self.epsilon)
        return SupportProbabilities.independent(boost / (boost + self.buckets - 1), 1 / self.buckets)

    def randomize(self, value: int, rng: random.Random) -> list[int]:
        seed = rng.getrandbits(HASH_SEED_BITS)
        true_bucket = bucket_of(seed, value, self.buckets)
        if rng.random() < self.support.true_item:
            return [seed, true_bucket]
        other = rng.randrange(self.buckets - 1)
        return [seed, other if other < true_bucket else other + 1]

    def supported_items(self, report: Any) -> list[int]:
        if (
            not isinstance(report, list) or len(report) != 2
            or not _is_index(report[0], 2**HASH_SEED_BITS) or not _is_index(report[1], self.buckets)
        ):
            raise MechanismFormatError(
                f"a local hashing report must be [seed, bucket] with 0 ≤ seed < 2^{HASH_SEED_BITS}, 0 ≤ bucket < {self.buckets}"
            )
        seed, bucket = report
        return [item for item in range(self.num_types) if bucket_of(seed, item, self.buckets) == bucket]

    def parameters(self) -> dict[str, Any]:
        return {"buckets": self.buckets}


@dataclass(frozen=True)
class SubsetSelection(ItemSetScheme):
    """Report `k` distinct items; a subset containing the true item is `e^ε` times likelier."""

    num_types: int
    epsilon: float
    subset_size: int
    kind = "subset selection"

    @property
    def support(self) -> SupportProbabilities:
        n, k, boost = self.num_types, self.subset_size, math.exp(self.epsilon)
        normalizer = comb(n - 1, k - 1) * boost + comb(n - 1, k)
        return SupportProbabilities(
            true_item=comb(n - 1, k - 1) * boost / normalizer,
            other_item=(comb(n - 2, k - 2) * boost + comb(n - 2, k - 1)) / normalizer,
            true_and_other=comb(n - 2, k - 2) * boost / normalizer,
            two_others=(comb(n - 3, k - 3) * boost + comb(n - 3, k - 2)) / normalizer,
        )

    def randomize(self, value: int, rng: random.Random) -> list[int]:
        others = [item for item in range(self.num_types) if item != value]
        if rng.random() < self.support.true_item:
            return sorted(rng.sample(others, self.subset_size - 1) + [value])
        return sorted(rng.sample(others, self.subset_size))

    def supported_items(self, report: Any) -> list[int]:
        return self._item_list(report, self.subset_size)

    def parameters(self) -> dict[str, Any]:
        return {"subset_size": self.subset_size}


def scheme_from_parameters(kind: str, num_types: int, epsilon: float, parameters: dict[str, Any]) -> ItemSetScheme:
    """Rebuild a scheme from its JSON fields, checking them."""
    try:
        if kind == UnaryEncoding.kind:
            optimized = parameters["optimized"]
            if not isinstance(optimized, bool):
                raise TypeError("optimized must be true or false")
            return UnaryEncoding(num_types, epsilon, optimized)
        if kind == LocalHashing.kind:
            buckets = parameters["buckets"]
            if not _is_index(buckets, 2**31) or buckets < 2:
                raise TypeError("buckets must be an integer ≥ 2")
            return LocalHashing(num_types, epsilon, buckets)
        if kind == SubsetSelection.kind:
            size = parameters["subset_size"]
            if not _is_index(size, num_types) or size < 1:
                raise TypeError(f"subset_size must be an integer in [1, {num_types})")
            return SubsetSelection(num_types, epsilon, size)
    except (KeyError, TypeError) as error:
        raise MechanismFormatError(f"bad {kind} parameters: {error}") from None
    raise MechanismFormatError(f"unknown mechanism kind {kind!r}")
