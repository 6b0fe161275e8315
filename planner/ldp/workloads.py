"""Dense reference workloads of McKenna et al. 2020's experiments (small domains only).

Ordered domains of size `n`: `histogram`, `prefix`, `all_range`. Binary domains of `d` attributes
(`n = 2^d` types, type index = bit vector, bit `i` = attribute `i`): `marginals` of chosen orders and
`parity` (the ±1 characters `(−1)^|S ∩ x|` of every attribute subset `S`).
"""

from __future__ import annotations

import itertools

import numpy as np

from planner.ldp.protocols import hadamard_matrix


def histogram(num_types: int) -> np.ndarray:
    """One count per type: the identity."""
    return np.eye(num_types)


def prefix(num_types: int) -> np.ndarray:
    """The empirical CDF: query `i` counts types `0..i`."""
    return np.tril(np.ones((num_types, num_types)))


def all_range(num_types: int) -> np.ndarray:
    """Every interval `[i, j]` of the ordered types, `n(n+1)/2` queries."""
    starts, ends = np.triu_indices(num_types)
    types = np.arange(num_types)
    return ((types >= starts[:, None]) & (types <= ends[:, None])).astype(float)


def marginals(num_attributes: int, orders: list[int]) -> np.ndarray:
    """All marginals over `orders`-sized subsets of `num_attributes` binary attributes
    (`orders = range(d + 1)` gives All Marginals, `[3]` the 3-way marginals)."""
    types = np.arange(2**num_attributes)
    rows = []
    for order in orders:
        for attributes in itertools.combinations(range(num_attributes), order):
            mask = sum(1 << attribute for attribute in attributes)
            for cell in range(2**num_attributes):
                if cell & ~mask == 0:
                    rows.append((types & mask) == cell)
    return np.array(rows, dtype=float)


def parity(num_attributes: int) -> np.ndarray:
    """The ±1 parity of every subset of `num_attributes` binary attributes (Sylvester Hadamard matrix)."""
    return hadamard_matrix(2**num_attributes)
