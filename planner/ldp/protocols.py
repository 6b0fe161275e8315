"""Classic LDP protocols as workload factorizations (MATH.md §8, seeds 000 and 002).

Protocols with a small output space (randomized response, Hadamard response, hierarchical, Fourier)
return a dense `Q` with the optimal reconstruction `V` for the workload (as seed 000 evaluates them).
The *item-set* protocols — unary encoding / RAPPOR, optimized local hashing, subset selection — have
`2ⁿ`, `gⁿ·g` or `C(n, k)` outputs; each report supports a set of items and the standard estimator is
`x̂ = Σ_reports (support − q) / (p − q)`, answers `W x̂`. Their variances come in closed form from four
support probabilities, and a dense `(Q, V)` is attached only when the output space has at most
`DENSE_OUTPUT_LIMIT` elements (used by tests to check the closed forms).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from planner.ldp.errors import WorkloadNotSupportedError
from planner.ldp.factorization import Factorization, as_workload_matrix, check_epsilon, factorize

DENSE_OUTPUT_LIMIT = 4096
"""Item-set protocols get a dense `Q` and `V` only up to this many outputs."""


def _inputs(workload: np.ndarray, epsilon: float) -> tuple[np.ndarray, float]:
    return as_workload_matrix(workload), check_epsilon(epsilon)


def randomized_response_matrix(num_items: int, epsilon: float) -> np.ndarray:
    """`Q = ((e^ε−1) I + 11ᵀ) / (e^ε + k − 1)`: report the truth w.p. `e^ε/(e^ε+k−1)`, else another item."""
    return (math.expm1(epsilon) * np.eye(num_items) + 1.0) / (math.exp(epsilon) + num_items - 1)


def randomized_response(workload: np.ndarray, epsilon: float) -> Factorization:
    """k-ary randomized response (Warner; k-RR); histogram variance `N (n−1)(2e^ε+n−2)/(e^ε−1)²`."""
    W, epsilon = _inputs(workload, epsilon)
    return factorize(randomized_response_matrix(W.shape[1], epsilon), W, epsilon, "randomized response")


def hadamard_matrix(order: int) -> np.ndarray:
    """Sylvester's ±1 Hadamard matrix, `H[i, j] = (−1)^popcount(i & j)`, `order` a power of 2."""
    indices = np.arange(order)
    parity = np.zeros((order, order), dtype=np.int64)
    bits = indices[:, None] & indices[None, :]
    while np.any(bits):
        parity ^= bits & 1
        bits >>= 1
    return 1.0 - 2.0 * parity


def hadamard_response(workload: np.ndarray, epsilon: float) -> Factorization:
    """Hadamard response (Acharya, Sun, Zhang): `K` = smallest power of 2 above `n`; type `u` owns
    the `K/2` outputs where row `u+1` of `H_K` is +1 and reports one of them w.p. `e^ε/(e^ε+1)`."""
    W, epsilon = _inputs(workload, epsilon)
    num_types = W.shape[1]
    order = 1 << num_types.bit_length()  # smallest power of two > num_types
    owned = hadamard_matrix(order)[1 : num_types + 1].T > 0  # outputs × types
    Q = np.where(owned, math.exp(epsilon), 1.0) / (order / 2 * (math.exp(epsilon) + 1))
    return factorize(Q, W, epsilon, "Hadamard response")


def tree_levels(num_types: int, branching: int) -> list[np.ndarray]:
    """Membership matrices (nodes × types) of the levels of a `branching`-ary tree over the ordered
    types, leaves first, without the root (whose count every user shares)."""
    if branching < 2:
        raise ValueError(f"the branching factor must be at least 2, got {branching}")
    levels = []
    width = 1
    while True:
        nodes = -(-num_types // width)
        if nodes < 2 and levels:
            return levels
        levels.append((np.arange(num_types)[None, :] // width == np.arange(nodes)[:, None]).astype(float))
        if nodes < 2:
            return levels
        width *= branching


def hierarchical(workload: np.ndarray, epsilon: float, branching: int = 2) -> Factorization:
    """Hierarchical (Cormode et al., ranges): each user samples one of the `L` tree levels uniformly
    and reports her node at that level by randomized response; `Q` stacks `RR_ℓ A_ℓ / L`."""
    W, epsilon = _inputs(workload, epsilon)
    levels = tree_levels(W.shape[1], branching)
    Q = np.vstack([randomized_response_matrix(level.shape[0], epsilon) @ level for level in levels]) / len(levels)
    return factorize(Q, W, epsilon, f"hierarchical (B={branching})")


def fourier_coefficients(W: np.ndarray) -> list[int]:
    """The non-constant Fourier coefficients (subsets of the binary attributes, as bit masks) that `W`
    depends on; `W` must be over `2^d` types (d binary attributes, type index = bit vector)."""
    num_types = W.shape[1]
    if num_types < 2 or num_types & (num_types - 1):
        raise WorkloadNotSupportedError(
            f"the Fourier protocol needs 2^d user types (d binary attributes), got {num_types}"
        )
    weights = np.linalg.norm(W @ hadamard_matrix(num_types), axis=0)
    used = [mask for mask in range(1, num_types) if weights[mask] > 1e-9 * max(weights.max(), 1.0)]
    return used or [1]


def fourier(workload: np.ndarray, epsilon: float) -> Factorization:
    """Fourier (Cormode et al., marginals): each user samples one coefficient `S` the workload needs
    and reports `χ_S(x) = (−1)^|S∩x|` by binary randomized response."""
    W, epsilon = _inputs(workload, epsilon)
    coefficients = fourier_coefficients(W)
    characters = hadamard_matrix(W.shape[1])[:, coefficients].T  # coefficients × types
    agree = math.exp(epsilon) / (math.exp(epsilon) + 1)
    plus = np.where(characters > 0, agree, 1 - agree)
    Q = np.vstack([plus, 1 - plus]) / len(coefficients)
    return factorize(Q, W, epsilon, "Fourier")


@dataclass(frozen=True)
class SupportProbabilities:
    """How often one report of an item-set protocol supports items, for a user of type `u`.

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


def _item_set_factorization(
    W: np.ndarray,
    epsilon: float,
    name: str,
    support: SupportProbabilities,
    dense: tuple[np.ndarray, np.ndarray] | None,
) -> Factorization:
    """Closed-form factorization; with `dense = (Q, supports)` also the explicit `(Q, V)`."""
    if dense is None:
        return Factorization(None, None, epsilon, name, W=W, query_second_moments=support.query_second_moments(W))
    Q, supports = dense
    V = W @ ((supports - support.other_item) / (support.true_item - support.other_item)).T
    return Factorization(Q, V, epsilon, name)


def unary_encoding_support(epsilon: float, optimized: bool = True) -> SupportProbabilities:
    """OUE: `p = 1/2`, `q = 1/(e^ε+1)`; symmetric (basic one-time RAPPOR): `p = e^{ε/2}/(e^{ε/2}+1)`, `q = 1−p`."""
    if optimized:
        return SupportProbabilities.independent(0.5, 1 / (math.exp(epsilon) + 1))
    keep = math.exp(epsilon / 2) / (math.exp(epsilon / 2) + 1)
    return SupportProbabilities.independent(keep, 1 - keep)


def _unary_dense(num_types: int, support: SupportProbabilities) -> tuple[np.ndarray, np.ndarray] | None:
    if 2**num_types > DENSE_OUTPUT_LIMIT:
        return None
    bits = np.array(list(itertools.product((0.0, 1.0), repeat=num_types)))  # outputs × items
    probability_on = np.where(np.eye(num_types) > 0, support.true_item, support.other_item)  # items × types
    Q = np.exp(bits @ np.log(probability_on) + (1 - bits) @ np.log1p(-probability_on))
    return Q, bits


def unary_encoding(workload: np.ndarray, epsilon: float, optimized: bool = True) -> Factorization:
    """Unary encoding: one bit per item, each flipped independently (OUE by default; seed 002 "UE")."""
    W, epsilon = _inputs(workload, epsilon)
    support = unary_encoding_support(epsilon, optimized)
    name = "optimized unary encoding" if optimized else "RAPPOR"
    return _item_set_factorization(W, epsilon, name, support, _unary_dense(W.shape[1], support))


def rappor(workload: np.ndarray, epsilon: float) -> Factorization:
    """Basic one-time RAPPOR: unary encoding with each bit kept w.p. `e^{ε/2}/(e^{ε/2}+1)`."""
    return unary_encoding(workload, epsilon, optimized=False)


def local_hashing_buckets(epsilon: float) -> int:
    """`g = ⌈e^ε + 1⌉` hash buckets (MATH.md §8)."""
    return math.ceil(math.exp(epsilon) + 1)


def local_hashing_support(epsilon: float) -> SupportProbabilities:
    """OLH with a random hash into `g` buckets: `p = e^ε/(e^ε+g−1)`, `q = 1/g`, independent."""
    buckets = local_hashing_buckets(epsilon)
    return SupportProbabilities.independent(math.exp(epsilon) / (math.exp(epsilon) + buckets - 1), 1 / buckets)


def _local_hashing_dense(num_types: int, epsilon: float) -> tuple[np.ndarray, np.ndarray] | None:
    """All `g^n` hash functions × `g` buckets (a fully random hash family)."""
    buckets = local_hashing_buckets(epsilon)
    if buckets ** (num_types + 1) > DENSE_OUTPUT_LIMIT:
        return None
    keep = math.exp(epsilon) / (math.exp(epsilon) + buckets - 1)
    functions = np.array(list(itertools.product(range(buckets), repeat=num_types)))  # functions × items
    hashed = np.repeat(functions, buckets, axis=0)  # (function, bucket) × items
    reported = np.tile(np.arange(buckets), len(functions))[:, None]
    supports = (hashed == reported).astype(float)
    Q = np.where(supports > 0, keep, (1 - keep) / (buckets - 1)) / len(functions)
    return Q, supports


def local_hashing(workload: np.ndarray, epsilon: float) -> Factorization:
    """Optimized local hashing (Wang et al.): hash to `g` buckets, randomized response on the bucket."""
    W, epsilon = _inputs(workload, epsilon)
    return _item_set_factorization(
        W, epsilon, "optimized local hashing", local_hashing_support(epsilon), _local_hashing_dense(W.shape[1], epsilon)
    )


def _comb(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def subset_selection_support(num_types: int, subset_size: int, epsilon: float) -> SupportProbabilities:
    """Report a `k`-subset; a subset containing the true type is `e^ε` times likelier than one without."""
    n, k, boost = num_types, subset_size, math.exp(epsilon)
    normalizer = _comb(n - 1, k - 1) * boost + _comb(n - 1, k)
    return SupportProbabilities(
        true_item=_comb(n - 1, k - 1) * boost / normalizer,
        other_item=(_comb(n - 2, k - 2) * boost + _comb(n - 2, k - 1)) / normalizer,
        true_and_other=_comb(n - 2, k - 2) * boost / normalizer,
        two_others=(_comb(n - 3, k - 3) * boost + _comb(n - 3, k - 2)) / normalizer,
    )


def subset_size_candidates(num_types: int, epsilon: float) -> list[int]:
    """The subset sizes around the optimum `n/(e^ε+1)` (Ye & Barg), within `1..n−1`."""
    ideal = num_types / (math.exp(epsilon) + 1)
    return sorted({min(max(size, 1), max(num_types - 1, 1)) for size in (math.floor(ideal), math.ceil(ideal))})


def _subset_dense(num_types: int, subset_size: int, epsilon: float) -> tuple[np.ndarray, np.ndarray] | None:
    if _comb(num_types, subset_size) > DENSE_OUTPUT_LIMIT:
        return None
    supports = np.zeros((_comb(num_types, subset_size), num_types))
    for row, subset in enumerate(itertools.combinations(range(num_types), subset_size)):
        supports[row, list(subset)] = 1.0
    normalizer = _comb(num_types - 1, subset_size - 1) * math.exp(epsilon) + _comb(num_types - 1, subset_size)
    return np.where(supports > 0, math.exp(epsilon), 1.0) / normalizer, supports


def subset_selection(workload: np.ndarray, epsilon: float, subset_size: int | None = None) -> Factorization:
    """Subset selection (Ye & Barg; Wang et al.): report `k ≈ n/(e^ε+1)` items, the true one favoured.
    Without `subset_size`, the better of the two integers around the optimum for this workload."""
    W, epsilon = _inputs(workload, epsilon)
    num_types = W.shape[1]
    if num_types < 2:
        raise WorkloadNotSupportedError("subset selection needs at least 2 user types")
    sizes = subset_size_candidates(num_types, epsilon) if subset_size is None else [subset_size]
    candidates = [
        _item_set_factorization(
            W, epsilon, f"subset selection (k={size})",
            subset_selection_support(num_types, size, epsilon), _subset_dense(num_types, size, epsilon),
        )
        for size in sizes
    ]
    return min(candidates, key=lambda candidate: candidate.worst_case_variance(1))


def classic_protocols(workload: np.ndarray, epsilon: float) -> dict[str, Factorization]:
    """Every classic protocol applicable to the workload, by short name."""
    W, epsilon = _inputs(workload, epsilon)
    protocols = {
        "RR": randomized_response(W, epsilon),
        "RAPPOR": rappor(W, epsilon),
        "OUE": unary_encoding(W, epsilon),
        "OLH": local_hashing(W, epsilon),
        "HR": hadamard_response(W, epsilon),
        "SS": subset_selection(W, epsilon) if W.shape[1] >= 2 else None,
        "Hierarchical": hierarchical(W, epsilon),
    }
    num_types = W.shape[1]
    if num_types >= 2 and num_types & (num_types - 1) == 0:
        protocols["Fourier"] = fourier(W, epsilon)
    return {name: protocol for name, protocol in protocols.items() if protocol is not None}


def dense_classic_protocols(workload: np.ndarray, epsilon: float) -> list[Factorization]:
    """The classic protocols whose strategy `Q` is held densely (usable as a table mechanism)."""
    return [protocol for protocol in classic_protocols(workload, epsilon).values() if protocol.Q is not None]
