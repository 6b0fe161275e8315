"""Checks shared by the tests of the range strategy families (hierarchy, eigen, hats, p-identity)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from planner import AllRange, Domain, Factor, Identity, Privacy, Product, Workload
from planner.strategies.base import Candidate

Family = Callable[[Workload, Privacy], list[Candidate]]


def assert_empirical_error_matches_prediction(
    family: Family, privacy: Privacy, size: int, *, high: int = 50, data_seed: int = 0, noise_seed: int = 1
) -> None:
    """All ranges on an ordered attribute of ``size`` cells, repeated for the 800 cells of an extra
    GROUP BY attribute (800 independent measurements in one call): the mean total squared error per
    repetition must lie within 4 standard errors of the candidate's predicted error."""
    repetitions = 800
    dom = Domain({"rep": repetitions, "age": size}, ordered={"age"})
    workload = Workload(dom, (Product(dom, (Factor(("rep",), Identity(repetitions)), Factor(("age",), AllRange(size)))),))
    (candidate,) = family(workload, privacy)
    data = np.random.default_rng(data_seed).integers(0, high, size=(repetitions, size))
    truth = workload.answer({("rep", "age"): data})[0]
    answers = candidate.answer(candidate.measure({("rep", "age"): data}, rng=noise_seed)).values[0]
    errors = ((answers - truth) ** 2).reshape(repetitions, -1).sum(axis=1)
    standard_error = errors.std(ddof=1) / math.sqrt(repetitions)
    assert abs(errors.mean() - candidate.expected_error() / repetitions) < 4 * standard_error


def assert_noise_free_answers_exact(candidate: Candidate, workload: Workload, data: np.ndarray, tolerance: float = 1e-6) -> None:
    """With noise switched off, the candidate's GLS answers equal the workload's exact answers on the
    (sex, age) marginal ``data``."""
    answers = candidate.answer(candidate.measure({("sex", "age"): data}, noise=False))
    for value, want in zip(answers.values, workload.answer({("sex", "age"): data})):
        np.testing.assert_allclose(value, want, rtol=0, atol=tolerance)


def assert_variances_equal_dense_gls(candidate: Candidate, workload: Workload, rows: np.ndarray, noise_covariance: np.ndarray) -> None:
    """Every query variance of ``candidate`` (measured per ``sex`` cell on (sex, age), two sexes) equals
    the dense GLS ``W (I₂ ⊗ (Sᵀ Σ⁻¹ S)⁻¹) Wᵀ`` for the strategy rows ``S`` and noise covariance ``Σ``."""
    dense = rows.astype(float)
    full = np.kron(np.eye(2), np.linalg.inv(dense.T @ np.linalg.solve(noise_covariance, dense)))
    for product, variance in zip(workload.products, candidate.query_variances()):
        W = product.matrix_on(("sex", "age"))
        np.testing.assert_allclose(variance, np.einsum("ij,jk,ik->i", W, full, W), rtol=1e-8)
