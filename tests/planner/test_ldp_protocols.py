"""Classic LDP protocols: their variances equal the published closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg

from planner.ldp import (
    Factorization,
    classic_protocols,
    fourier,
    hadamard_response,
    hierarchical,
    local_hashing,
    randomized_response,
    rappor,
    subset_selection,
    unary_encoding,
)
from planner.ldp.protocols import (
    hadamard_matrix,
    local_hashing_buckets,
    randomized_response_matrix,
    tree_levels,
)
from planner.ldp.workloads import histogram, marginals, prefix

EPSILONS = [0.5, 1.0, 2.0]


def pure_protocol_item_variance(p: float, q: float, total: float, count: np.ndarray) -> np.ndarray:
    """Wang et al. (2017): `Var[ĉ_i] = N q(1−q)/(p−q)² + N_i (1−p−q)/(p−q)` for a pure protocol."""
    return total * q * (1 - q) / (p - q) ** 2 + count * (1 - p - q) / (p - q)


def random_counts(num_types: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 50, size=num_types).astype(float)


def pure_parameters(name: str, num_types: int, epsilon: float) -> tuple[float, float]:
    boost = math.exp(epsilon)
    if name == "RR":
        return boost / (boost + num_types - 1), 1 / (boost + num_types - 1)
    if name == "OUE":
        return 0.5, 1 / (boost + 1)
    if name == "RAPPOR":
        keep = math.exp(epsilon / 2) / (math.exp(epsilon / 2) + 1)
        return keep, 1 - keep
    if name == "OLH":
        buckets = local_hashing_buckets(epsilon)
        return boost / (boost + buckets - 1), 1 / buckets
    raise ValueError(name)


PURE = {"RR": randomized_response, "OUE": unary_encoding, "RAPPOR": rappor, "OLH": local_hashing}


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("name", sorted(PURE))
@pytest.mark.parametrize("num_types", [3, 40])
def test_pure_protocol_item_variances_match_wang_et_al(name: str, num_types: int, epsilon: float) -> None:
    counts = random_counts(num_types)
    protocol = PURE[name](histogram(num_types), epsilon)
    p, q = pure_parameters(name, num_types, epsilon)
    expected = pure_protocol_item_variance(p, q, counts.sum(), counts)
    np.testing.assert_allclose(protocol.query_variances(counts), expected, rtol=1e-10)
    assert protocol.epsilon == epsilon


def test_randomized_response_histogram_closed_form_worst_and_average() -> None:
    num_types, epsilon, users = 10, 1.0, 1000
    protocol = randomized_response(histogram(num_types), epsilon)
    boost = math.exp(epsilon)
    closed_form = users * (num_types - 1) * (2 * boost + num_types - 2) / (boost - 1) ** 2
    assert protocol.worst_case_variance(users) == pytest.approx(closed_form, rel=1e-10)
    assert protocol.average_case_variance(users) == pytest.approx(closed_form, rel=1e-10)
    assert protocol.Q.shape == (num_types, num_types)


def test_optimized_unary_encoding_total_worst_case() -> None:
    num_types, epsilon = 20, 1.5
    boost = math.exp(epsilon)
    closed_form = ((boost + 1) ** 2 + 4 * (num_types - 1) * boost) / (boost - 1) ** 2
    assert unary_encoding(histogram(num_types), epsilon).worst_case_variance(1) == pytest.approx(closed_form)


@pytest.mark.parametrize("num_types", [4, 9])
def test_subset_selection_item_variances(num_types: int) -> None:
    epsilon = 1.0
    protocol = subset_selection(histogram(num_types), epsilon)
    size = protocol.scheme.subset_size
    support = protocol.scheme.support
    boost = math.exp(epsilon)
    assert support.true_item == pytest.approx(size * boost / (size * boost + num_types - size))  # Ye & Barg
    counts = random_counts(num_types, seed=3)
    expected = pure_protocol_item_variance(support.true_item, support.other_item, counts.sum(), counts)
    np.testing.assert_allclose(protocol.query_variances(counts), expected, rtol=1e-10)


@pytest.mark.parametrize(
    "build", [unary_encoding, rappor, local_hashing, subset_selection], ids=lambda build: build.__name__
)
def test_closed_form_second_moments_equal_dense_factorization_on_any_workload(build) -> None:
    """Small domains get an explicit (Q, V); the closed form must agree with it on a general W."""
    epsilon = 0.8
    W = np.random.default_rng(5).normal(size=(6, 3))
    dense = build(W, epsilon)
    assert dense.Q is not None and dense.Q.shape[0] >= 3
    np.testing.assert_allclose(dense.V @ dense.Q, W, atol=1e-12)
    big = build(np.hstack([W, np.zeros((6, 30))]), epsilon)  # too many outputs: closed form only
    assert big.Q is None
    implicit_small = Factorization(None, None, epsilon, "x", W=W, query_second_moments=dense.query_second_moments)
    assert implicit_small.worst_case_variance(1) == pytest.approx(dense.worst_case_variance(1))
    if build is not subset_selection:  # per-type terms depend only on the column, so padding is exact
        np.testing.assert_allclose(big.per_type_variance[:3], dense.per_type_variance, rtol=1e-9)
    assert dense.epsilon <= epsilon + 1e-12


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_hadamard_response_standard_estimator_closed_form(epsilon: float) -> None:
    num_types = 7
    protocol = hadamard_response(histogram(num_types), epsilon)
    order = 8
    assert protocol.Q.shape == (order, num_types)
    owned = hadamard_matrix(order)[1 : num_types + 1].T > 0
    scale = 2 * (math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)
    standard = Factorization(protocol.Q, scale * (owned.T - 0.5), epsilon)  # p̂_u = c (1[o ∈ C_u] − 1/2)
    np.testing.assert_allclose(standard.W, np.eye(num_types), atol=1e-12)
    boost = math.exp(epsilon)
    closed_form = (4 * boost + (num_types - 1) * (boost + 1) ** 2) / (boost - 1) ** 2
    assert standard.worst_case_variance(1) == pytest.approx(closed_form, rel=1e-10)
    assert protocol.worst_case_variance(1) <= closed_form * (1 + 1e-12)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_hierarchical_per_level_estimator_closed_form(epsilon: float) -> None:
    num_types, branching = 8, 2
    levels = tree_levels(num_types, branching)
    assert [level.shape[0] for level in levels] == [8, 4, 2]
    protocol = hierarchical(prefix(num_types), epsilon, branching)
    standard_V = scipy.linalg.block_diag(
        *[len(levels) * np.linalg.inv(randomized_response_matrix(level.shape[0], epsilon)) for level in levels]
    )
    standard = Factorization(protocol.Q, standard_V, epsilon)
    np.testing.assert_allclose(standard.W, np.vstack(levels), atol=1e-10)
    boost = math.exp(epsilon)
    per_level = [(k - 1) * (2 * boost + k - 2) / (boost - 1) ** 2 for k in (8, 4, 2)]
    closed_form = sum(len(levels) * (variance + 1) - 1 for variance in per_level)
    assert standard.worst_case_variance(1) == pytest.approx(closed_form, rel=1e-10)
    assert standard.average_case_variance(1) == pytest.approx(closed_form, rel=1e-10)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_fourier_coefficient_estimator_closed_form(epsilon: float) -> None:
    attributes = 4
    W = marginals(attributes, [1, 2])
    protocol = fourier(W, epsilon)
    coefficients = [mask for mask in range(1, 16) if bin(mask).count("1") <= 2]
    assert protocol.Q.shape == (2 * len(coefficients), 16)  # only the coefficients the workload needs
    characters = hadamard_matrix(16)[:, coefficients].T
    scale = (math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)
    count = len(coefficients)
    standard_V = count * scale * np.hstack([np.eye(count), -np.eye(count)])
    standard = Factorization(protocol.Q, standard_V, epsilon)
    np.testing.assert_allclose(standard.W, characters, atol=1e-10)
    assert standard.worst_case_variance(1) == pytest.approx(count * (count * scale**2 - 1), rel=1e-10)


def test_classic_protocols_cover_every_protocol_and_are_epsilon_ldp() -> None:
    protocols = classic_protocols(prefix(8), 1.0)
    assert set(protocols) == {"RR", "RAPPOR", "OUE", "OLH", "HR", "SS", "Hierarchical", "Fourier"}
    for protocol in protocols.values():
        assert protocol.epsilon == 1.0
        assert protocol.worst_case_variance(1) >= protocol.average_case_variance(1) - 1e-9
    assert "Fourier" not in classic_protocols(prefix(6), 1.0)  # needs 2^d types
