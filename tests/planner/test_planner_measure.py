"""Measuring and answering: exact answers without noise, consistency, and empirical variances.

Empirical checks use fixed seeds and a 4-standard-error band: with N repetitions, the mean of a
per-repetition statistic must lie within 4·sd/√N of its predicted expectation (a false alarm has
probability about 6e-5 per check under the normal approximation).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner import Domain, Privacy, Workload, plan
from planner.select import all_candidates

DOMAIN = Domain({"a": 3, "b": 4, "c": 2})
DATA = np.random.default_rng(5).integers(0, 20, size=DOMAIN.sizes)


def marginal(attributes: tuple[str, ...]) -> np.ndarray:
    return DATA.sum(axis=tuple(i for i, a in enumerate(DOMAIN.attributes) if a not in attributes))


def workload() -> Workload:
    return Workload.all_kway(DOMAIN, 2) + Workload.all_kway(DOMAIN, 1) + Workload.total(DOMAIN)


def feed(candidate) -> dict:
    return {attrs: marginal(attrs) for attrs in candidate.required_marginals()}


PRIVACIES = [Privacy.laplace(1.0), Privacy.zcdp(0.5)]


@pytest.mark.parametrize("privacy", PRIVACIES)
def test_every_candidate_is_exact_without_noise(privacy: Privacy) -> None:
    W = workload()
    exact = W.answer({DOMAIN.attributes: DATA})
    for candidate in all_candidates(W, privacy, include_inconsistent=True):
        answers = candidate.answer(candidate.measure(feed(candidate), noise=False))
        for got, want in zip(answers.values, exact):
            np.testing.assert_allclose(got, want, atol=1e-8, err_msg=candidate.name)


@pytest.mark.parametrize("privacy", PRIVACIES)
def test_every_candidate_answers_consistently(privacy: Privacy) -> None:
    W = workload()
    index = {p.attributes: i for i, p in enumerate(W.products)}
    candidates = all_candidates(W, privacy, include_inconsistent=True)
    # bit-encoded Fourier pads a (3 → 4 codes): consistent over padded cells only, so never offered to plan()
    assert [c.name for c in candidates if not c.consistent] == ["fourier"]
    assert "fourier" not in {c.name for c in all_candidates(W, privacy)}
    for candidate in candidates:
        if not candidate.consistent:
            continue
        answers = candidate.answer(candidate.measure(feed(candidate), rng=11))
        tables = {attrs: answers.values[i].reshape(DOMAIN.shape(attrs)) for attrs, i in index.items()}
        for big, small in itertools.product(tables, tables):
            if set(small) < set(big):
                summed = tuple(i for i, a in enumerate(big) if a not in small)
                np.testing.assert_allclose(tables[big].sum(axis=summed), tables[small], atol=1e-8, err_msg=candidate.name)


@pytest.mark.parametrize("privacy", PRIVACIES)
def test_empirical_variance_matches_prediction(privacy: Privacy) -> None:
    W = workload()
    exact = np.concatenate(W.answer({DOMAIN.attributes: DATA}))
    repetitions = 150
    candidates = all_candidates(W, privacy, include_inconsistent=True)
    # one of each recovery kind: GLS over several noisy marginals, and directly measured coefficients
    gls = max((c for c in candidates if c.name == "marginals"), key=lambda c: len(c.required_marginals()))
    direct = next(c for c in candidates if c.name == ("fourier" if privacy.is_laplace else "residual"))
    assert len(gls.required_marginals()) > 1
    for candidate in (gls, direct):
        marginals = feed(candidate)
        rng = np.random.default_rng(2024)
        errors = np.array([
            np.concatenate(candidate.answer(candidate.measure(marginals, rng=rng)).values) - exact
            for _ in range(repetitions)
        ])
        predicted = np.concatenate(candidate.query_variances())
        # total squared error per repetition: mean must match the plan's expected (unweighted) error
        totals = (errors**2).sum(axis=1)
        band = 4 * totals.std(ddof=1) / np.sqrt(repetitions)
        assert abs(totals.mean() - predicted.sum()) <= band, candidate.name
        # unbiased, query by query
        bands = 4 * np.sqrt(predicted / repetitions)
        assert (np.abs(errors.mean(axis=0)) <= bands + 1e-9).all(), candidate.name


def test_fourier_is_consistent_on_power_of_two_domains() -> None:
    dom = Domain({"x": 2, "y": 4, "z": 2})
    data = np.arange(16).reshape(2, 4, 2)
    W = Workload.all_kway(dom, 2) + Workload.total(dom)
    (fourier,) = [c for c in all_candidates(W, Privacy.laplace(1.0)) if c.name == "fourier"]
    assert fourier.consistent
    feeds = {m: data.sum(axis=tuple(i for i, a in enumerate(dom.attributes) if a not in m)) for m in fourier.required_marginals()}
    answers = fourier.answer(fourier.measure(feeds, rng=1)).values
    total = answers[-1][0]
    for product, values in zip(W.products[:-1], answers[:-1]):
        assert values.sum() == pytest.approx(total)


def test_released_variances_are_exact_discrete_not_2b2() -> None:
    chosen = plan(Workload.marginals(DOMAIN, [("a", "b", "c")]), Privacy.laplace(2.0))
    assert chosen.strategy_name in ("identity", "marginals")
    b = 0.5
    exact = 2 * np.exp(-1 / b) / (1 - np.exp(-1 / b)) ** 2
    np.testing.assert_allclose(np.concatenate(chosen.query_variances()), exact, rtol=1e-12)
    measurement = chosen.measure({("a", "b", "c"): DATA}, rng=3)
    np.testing.assert_allclose(measurement.variances["marginal (a, b, c)"], exact, rtol=1e-12)
    assert exact < 2 * b**2


def test_seeded_measurements_repeat_and_default_rng_varies() -> None:
    chosen = plan(workload(), Privacy.zcdp(0.5))
    marginals = feed(chosen)
    first = chosen.answer(chosen.measure(marginals, rng=7)).values
    second = chosen.answer(chosen.measure(marginals, rng=7)).values
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x, y)
    fresh = chosen.answer(chosen.measure(marginals)).values
    assert any(not np.array_equal(x, y) for x, y in zip(first, fresh))
    noisy = chosen.measure(marginals, rng=7)
    assert all(np.issubdtype(np.asarray(v).dtype, np.integer) for v in noisy.values.values())


@pytest.mark.parametrize("privacy", PRIVACIES)
def test_repeated_small_measurements_are_answered_by_the_gls_matrix(privacy: Privacy) -> None:
    """A coefficient candidate answers a small measurement with one matrix, built once per layout
    (planner.strategies.residual): the answers equal GLS's on fresh noisy values, and a matrix that mixed
    up two measured values would not."""
    from planner.strategies.residual import CoefficientCandidate

    W = Workload.all_kway(DOMAIN, 2) + Workload.total(DOMAIN)
    candidates = [c for c in all_candidates(W, privacy, include_inconsistent=True) if isinstance(c, CoefficientCandidate)]
    assert candidates
    for candidate in candidates:
        measurements = [candidate.measure(feed(candidate), rng=seed) for seed in range(4)]
        answers = [candidate.answer(m) for m in measurements]
        (layout, matrix), = candidate._answer_maps.items()  # noqa: SLF001 - one layout, one matrix
        assert sum(p.rows for p in W.products) == matrix.shape[0] and len(layout) >= 1
        for measurement, found in zip(measurements, answers):
            for got, want in zip(found.values, candidate._gls_answers(measurement)):  # noqa: SLF001
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9, err_msg=candidate.name)
        swapped = matrix.copy()
        swapped[:, [0, 1]] = swapped[:, [1, 0]]
        candidate._answer_maps[layout] = swapped  # noqa: SLF001
        broken = np.concatenate(candidate.answer(measurements[-1]).values)
        assert not np.allclose(broken, np.concatenate(answers[-1].values), rtol=1e-10, atol=1e-9)


def test_least_squares_residue_of_zero_is_released_as_zero() -> None:
    """A noisy count that came out exactly 0 read ``8.6e-14`` after the solve; within 10⁻⁹ standard errors of
    0 a value is 0. A value with no error (variance 0) is left as it is, and so is anything farther out."""
    from planner.strategies.base import Answers

    answers = Answers((np.array([8.6e-14, -2e-9, 1.0, -1e-12]),), (np.array([7.84, 7.84, 7.84, 0.0]),))
    assert answers.values[0].tolist() == [0.0, 0.0, 1.0, -1e-12]
    assert Answers((np.array([3e-9]),), (np.array([1.0]),)).values[0].tolist() == [3e-9]
