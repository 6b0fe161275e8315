"""Classic LDP protocols as workload factorizations (docs/math.md §8, McKenna et al. 2020; Wang et al. 2017).

Protocols with a small output space (randomized response, Hadamard response, hierarchical, Fourier)
return a dense `Q` with the optimal reconstruction `V` for the workload (as McKenna et al. 2020 evaluates them).
The *item-set* protocols — unary encoding / RAPPOR, optimized local hashing, subset selection — have
very many outputs; each report supports a set of items and the standard estimator is
`x̂ = Σ_reports (support − q) / (p − q)`, answers `W x̂`. Their variances come in closed form from four
support probabilities (`planner.ldp.item_sets`, which also holds their client randomizers; the
factorization carries the scheme in `.scheme`), and a dense `(Q, V)` is attached only when the output
space has at most `DENSE_OUTPUT_LIMIT` elements (tests use it to check the closed forms).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from planner.ldp.errors import WorkloadNotSupportedError
from planner.ldp.factorization import Factorization, as_workload_matrix, check_epsilon, factorize
from planner.ldp.item_sets import (
    ItemSetScheme,
    LocalHashing,
    SubsetSelection,
    UnaryEncoding,
    comb,
    local_hashing_buckets,
)

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


def _item_set_factorization(W: np.ndarray, scheme: ItemSetScheme, name: str, dense: bool) -> Factorization:
    """Closed-form factorization of `scheme`; with `dense`, the explicit `(Q, V)` of its standard
    estimator too, if the output space has at most `DENSE_OUTPUT_LIMIT` elements."""
    explicit = _dense_outputs(scheme) if dense else None
    if explicit is None:
        moments = scheme.support.query_second_moments(W)
        return Factorization(None, None, scheme.epsilon, name, W=W, query_second_moments=moments, scheme=scheme)
    Q, supports = explicit
    support = scheme.support
    V = W @ ((supports - support.other_item) / (support.true_item - support.other_item)).T
    return Factorization(Q, V, scheme.epsilon, name, scheme=scheme)


def _dense_outputs(scheme: ItemSetScheme) -> tuple[np.ndarray, np.ndarray] | None:
    """`(Q, supports)` over all outputs (supports: outputs × items), or None if there are too many."""
    n, boost = scheme.num_types, math.exp(scheme.epsilon)
    if isinstance(scheme, UnaryEncoding):
        if 2**n > DENSE_OUTPUT_LIMIT:
            return None
        bits = np.array(list(itertools.product((0.0, 1.0), repeat=n)))
        on = np.where(np.eye(n) > 0, scheme.support.true_item, scheme.support.other_item)  # items × types
        return np.exp(bits @ np.log(on) + (1 - bits) @ np.log1p(-on)), bits
    if isinstance(scheme, LocalHashing):  # all g^n functions: a fully random hash family
        g = scheme.buckets
        if g ** (n + 1) > DENSE_OUTPUT_LIMIT:
            return None
        functions = np.array(list(itertools.product(range(g), repeat=n)))
        supports = (np.repeat(functions, g, axis=0) == np.tile(np.arange(g), len(functions))[:, None]).astype(float)
        keep = scheme.support.true_item
        return np.where(supports > 0, keep, (1 - keep) / (g - 1)) / len(functions), supports
    k = scheme.subset_size
    if comb(n, k) > DENSE_OUTPUT_LIMIT:
        return None
    supports = np.zeros((comb(n, k), n))
    for row, subset in enumerate(itertools.combinations(range(n), k)):
        supports[row, list(subset)] = 1.0
    return np.where(supports > 0, boost, 1.0) / (comb(n - 1, k - 1) * boost + comb(n - 1, k)), supports


def unary_encoding(workload: np.ndarray, epsilon: float, optimized: bool = True) -> Factorization:
    """Unary encoding: one bit per item, each flipped independently (OUE by default; Wang et al. 2017 "UE")."""
    W, epsilon = _inputs(workload, epsilon)
    name = "optimized unary encoding" if optimized else "RAPPOR"
    return _item_set_factorization(W, UnaryEncoding(W.shape[1], epsilon, optimized), name, dense=True)


def rappor(workload: np.ndarray, epsilon: float) -> Factorization:
    """Basic one-time RAPPOR: unary encoding with each bit kept w.p. `e^{ε/2}/(e^{ε/2}+1)`."""
    return unary_encoding(workload, epsilon, optimized=False)


def local_hashing(workload: np.ndarray, epsilon: float) -> Factorization:
    """Optimized local hashing (Wang et al.): hash to `g = ⌈e^ε+1⌉` buckets, randomized response on the bucket."""
    W, epsilon = _inputs(workload, epsilon)
    scheme = LocalHashing(W.shape[1], epsilon, local_hashing_buckets(epsilon))
    return _item_set_factorization(W, scheme, "optimized local hashing", dense=True)


def subset_size_candidates(num_types: int, epsilon: float) -> list[int]:
    """The subset sizes around the optimum `n/(e^ε+1)` (Ye & Barg), within `1..n−1`."""
    ideal = num_types / (math.exp(epsilon) + 1)
    return sorted({min(max(size, 1), max(num_types - 1, 1)) for size in (math.floor(ideal), math.ceil(ideal))})


def subset_selection(workload: np.ndarray, epsilon: float, subset_size: int | None = None) -> Factorization:
    """Subset selection (Ye & Barg; Wang et al.): report `k ≈ n/(e^ε+1)` items, the true one favoured.
    Without `subset_size`, the better of the two integers around the optimum for this workload."""
    W, epsilon = _inputs(workload, epsilon)
    num_types = W.shape[1]
    if num_types < 2:
        raise WorkloadNotSupportedError("subset selection needs at least 2 user types")
    sizes = subset_size_candidates(num_types, epsilon) if subset_size is None else [subset_size]
    candidates = [
        _item_set_factorization(W, SubsetSelection(num_types, epsilon, size), f"subset selection (k={size})", dense=True)
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


