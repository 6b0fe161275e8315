"""Deployment: JSON shipping, client randomizer frequencies, aggregation with variances."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from planner.ldp import (
    Aggregator,
    Factorization,
    InvalidStrategyError,
    Mechanism,
    MechanismFormatError,
    WorkloadNotSupportedError,
    design,
    hadamard_response,
    randomized_response,
)
from planner.ldp.workloads import histogram, prefix


@pytest.fixture(scope="module")
def prefix_mechanism() -> Mechanism:
    return design(prefix(6), 1.0, seed=0, restarts=1, iterations=100)


def test_json_round_trip_is_exact_and_plain(prefix_mechanism: Mechanism) -> None:
    text = prefix_mechanism.to_json()
    document = json.loads(text)
    assert document["format"] == "dpsql-ldp-mechanism" and document["epsilon"] == 1.0
    assert len(document["probabilities"]) == 6 and len(document["probabilities"][0]) == 24
    assert Mechanism.from_json(text) == prefix_mechanism


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "format"),
        ('{"format": "dpsql-ldp-mechanism", "version": 9}', "version"),
        ('{"format": "dpsql-ldp-mechanism", "version": 1, "epsilon": 1, "probabilities": 3}', "list of lists"),
        ('{"format": "dpsql-ldp-mechanism", "version": 1, "epsilon": 1, "probabilities": [["a"]]}', "number"),
        ('{"format": "dpsql-ldp-mechanism", "version": 1, "epsilon": 1, "probabilities": [[0.5, 0.5], [1.0]]}', "equally long"),
        ('{"format": "dpsql-ldp-mechanism", "version": 1, "epsilon": 1, "probabilities": [[0.9, 0.1], [0.1, 0.9]]}', "LDP"),
        ('{"format": "dpsql-ldp-mechanism", "version": 1, "epsilon": 1, "probabilities": [[0.6, 0.6], [0.5, 0.5]]}', "sum"),
        ('{"format": "dpsql-ldp-mechanism", "version": 1, "epsilon": -1, "probabilities": [[0.5, 0.5]]}', "epsilon"),
    ],
)
def test_malformed_json_is_rejected_clearly(text: str, message: str) -> None:
    with pytest.raises(MechanismFormatError, match=message):
        Mechanism.from_json(text)


def test_randomizer_frequencies_match_the_table_within_binomial_bounds(prefix_mechanism: Mechanism) -> None:
    rng = random.Random(1234)
    draws = 20_000
    Q = prefix_mechanism.strategy()
    for user_type in (0, 3, 5):
        counts = np.bincount([prefix_mechanism.randomize(user_type, rng) for _ in range(draws)], minlength=Q.shape[0])
        expected = draws * Q[:, user_type]
        bound = 4.5 * np.sqrt(draws * Q[:, user_type] * (1 - Q[:, user_type]))  # ≈ 1e-5 per cell
        assert np.all(np.abs(counts - expected) <= bound)


def test_randomizer_uses_os_entropy_by_default_and_checks_the_type(prefix_mechanism: Mechanism) -> None:
    reports = {prefix_mechanism.randomize(2) for _ in range(200)}
    assert len(reports) > 10 and all(0 <= report < 24 for report in reports)
    for bad in (-1, 6, 1.0, True, "2"):
        with pytest.raises(MechanismFormatError, match="user type"):
            prefix_mechanism.randomize(bad)


def test_aggregator_is_unbiased_with_predicted_variance() -> None:
    """Repeat a small survey; the answers' mean and variance match the factorization's prediction."""
    W = prefix(4)
    mechanism = Mechanism.from_factorization(randomized_response(histogram(4), 1.0))
    counts = np.array([30, 0, 50, 20])
    values = np.repeat(np.arange(4), counts)
    rng = random.Random(99)
    repetitions = 400
    estimates = np.empty((repetitions, 4))
    for repetition in range(repetitions):
        aggregator = Aggregator(mechanism, W)
        aggregator.add(mechanism.randomize(int(value), rng) for value in values)
        estimates[repetition] = aggregator.answers().estimates
    predicted = aggregator.factorization.query_variances(counts)
    assert predicted[3] == pytest.approx(0, abs=1e-9)  # the total is known exactly
    np.testing.assert_allclose(estimates[:, 3], 100.0)
    standard_error = np.sqrt(predicted[:3] / repetitions)
    assert np.all(np.abs(estimates[:, :3].mean(axis=0) - (W @ counts)[:3]) <= 4.5 * standard_error)
    # sample variance of 400 draws: relative standard error ≈ sqrt(2/399) ≈ 7%; allow 4.5 of them
    np.testing.assert_allclose(estimates[:, :3].var(axis=0, ddof=1), predicted[:3], rtol=4.5 * math.sqrt(2 / 399))
    result = aggregator.answers()
    assert result.num_reports == 100
    assert np.all(result.variances >= predicted - 1e-6)  # worst case bounds the true variance


def test_non_negative_answers_are_consistent() -> None:
    W = prefix(4)
    mechanism = Mechanism.from_factorization(randomized_response(histogram(4), 0.5))
    aggregator = Aggregator(mechanism, W)
    aggregator.add(mechanism.randomize(3, random.Random(5)) for _ in range(30))
    answers = aggregator.answers(non_negative=True).estimates
    assert np.all(np.diff(answers) >= -1e-6) and answers[0] >= -1e-9  # prefix sums of a non-negative vector


def test_bad_reports_and_workloads() -> None:
    mechanism = Mechanism.from_factorization(hadamard_response(histogram(3), 1.0))
    aggregator = Aggregator(mechanism, histogram(3))
    with pytest.raises(MechanismFormatError, match="out of range"):
        aggregator.add([0, mechanism.num_outputs])
    with pytest.raises(MechanismFormatError, match="integer"):
        aggregator.add([0.5])
    assert aggregator.num_reports == 0
    with pytest.raises(WorkloadNotSupportedError, match="columns"):
        Aggregator(mechanism, histogram(4))
    with pytest.raises(InvalidStrategyError, match="neither"):
        Mechanism.from_factorization(Factorization(None, None, 1.0, "x", W=np.eye(2), query_second_moments=np.eye(2)))


def test_design_accepts_objects_with_dense() -> None:
    class PrefixWorkload:
        def dense(self) -> np.ndarray:
            return prefix(3)

    mechanism = design(PrefixWorkload(), 2.0, seed=1, restarts=1, iterations=20)
    assert mechanism.num_types == 3 and mechanism.epsilon == 2.0
