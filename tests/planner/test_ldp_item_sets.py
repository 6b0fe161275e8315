"""Item-set protocols deployed without a dense Q: randomizer frequencies, aggregation, JSON, fallback."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from planner.ldp import (
    Aggregator,
    ItemSetMechanism,
    Mechanism,
    MechanismFormatError,
    classic_protocols,
    design,
    optimize,
)
from planner.ldp.item_sets import LocalHashing, SubsetSelection, UnaryEncoding, local_hashing_buckets
from planner.ldp.workloads import histogram, prefix

SCHEMES = {
    "OUE": UnaryEncoding(6, 1.0),
    "RAPPOR": UnaryEncoding(6, 1.0, optimized=False),
    "OLH": LocalHashing(6, 1.0, local_hashing_buckets(1.0)),
    "SS": SubsetSelection(6, 1.0, 2),
}


def within_binomial(successes: float, trials: int, probability: float, sigmas: float = 4.5) -> bool:
    return abs(successes - trials * probability) <= sigmas * math.sqrt(trials * probability * (1 - probability))


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_support_frequencies_match_the_closed_form_probabilities(name: str) -> None:
    scheme = SCHEMES[name]
    mechanism = ItemSetMechanism(scheme)
    rng = random.Random(11)
    draws, value = 12_000, 2
    supports = np.zeros((draws, scheme.num_types))
    for draw in range(draws):
        supports[draw, scheme.supported_items(mechanism.randomize(value, rng))] = 1
    probabilities = scheme.support
    assert within_binomial(supports[:, value].sum(), draws, probabilities.true_item)
    for other in (0, 5):
        assert within_binomial(supports[:, other].sum(), draws, probabilities.other_item)
        assert within_binomial((supports[:, value] * supports[:, other]).sum(), draws, probabilities.true_and_other)
    assert within_binomial((supports[:, 0] * supports[:, 5]).sum(), draws, probabilities.two_others)


@pytest.mark.parametrize("name", ["OUE", "OLH", "SS"])
def test_aggregated_answers_are_unbiased_with_the_predicted_variance(name: str) -> None:
    scheme = SCHEMES[name]
    mechanism = Mechanism.from_json(ItemSetMechanism(scheme).to_json())
    W = prefix(6)
    counts = np.array([10, 0, 25, 5, 0, 20])
    values = np.repeat(np.arange(6), counts)
    rng = random.Random(21)
    repetitions = 300
    estimates = np.empty((repetitions, 6))
    for repetition in range(repetitions):
        aggregator = Aggregator(mechanism, W)
        aggregator.add([mechanism.randomize(int(value), rng) for value in values])
        estimates[repetition] = aggregator.answers().estimates
    predicted = aggregator.factorization.query_variances(counts)
    assert np.all(np.abs(estimates.mean(axis=0) - W @ counts) <= 4.5 * np.sqrt(predicted / repetitions))
    np.testing.assert_allclose(  # SS knows the total exactly: predicted and empirical variance ≈ 0 there
        estimates.var(axis=0, ddof=1), predicted, rtol=4.5 * math.sqrt(2 / (repetitions - 1)), atol=1e-9 * predicted.max()
    )
    assert np.all(aggregator.answers().variances >= predicted * (1 - 1e-9))


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_json_round_trip(name: str) -> None:
    mechanism = ItemSetMechanism(SCHEMES[name])
    assert Mechanism.from_json(mechanism.to_json()) == mechanism


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ('"kind": "local hashing", "num_types": 6, "buckets": 1', "buckets"),
        ('"kind": "subset selection", "num_types": 6, "subset_size": 6', "subset_size"),
        ('"kind": "unary encoding", "num_types": 6, "optimized": 1', "optimized"),
        ('"kind": "unary encoding", "num_types": 1.5, "optimized": true', "num_types"),
        ('"kind": "carrier pigeon", "num_types": 6', "unknown mechanism kind"),
    ],
)
def test_malformed_item_set_json(fields: str, message: str) -> None:
    text = '{"format": "dpsql-ldp-mechanism", "version": 1, "epsilon": 1.0, ' + fields + "}"
    with pytest.raises(MechanismFormatError, match=message):
        Mechanism.from_json(text)


def test_malformed_reports_are_rejected_before_counting() -> None:
    for name, bad in [("OUE", [0, 0]), ("OUE", [7]), ("SS", [1]), ("OLH", [1, 99]), ("OLH", "x")]:
        aggregator = Aggregator(ItemSetMechanism(SCHEMES[name]), histogram(6))
        with pytest.raises(MechanismFormatError):
            aggregator.add([SCHEMES[name].randomize(0, random.Random(0)), bad])
        assert aggregator.num_reports == 0


def test_optimize_falls_back_to_a_better_item_set_protocol_and_design_ships_it() -> None:
    W, epsilon = histogram(20), 1.0  # subset selection: C(20, 5) outputs, too many for a table
    options = {"seed": 0, "restarts": 1, "iterations": 0}  # only the (perturbed) randomized-response start
    pgd_only = optimize(W, epsilon, compare_with_classic=False, **options)
    classic = classic_protocols(W, epsilon)
    best = min(classic.values(), key=lambda protocol: protocol.worst_case_variance(1))
    assert best.Q is None and pgd_only.worst_case_variance(1) > best.worst_case_variance(1)
    chosen = optimize(W, epsilon, **options)
    assert chosen.name == best.name and chosen.scheme == best.scheme
    assert any("returning it" in line for line in chosen.log)
    mechanism = design(W, epsilon, **options)
    assert isinstance(mechanism, ItemSetMechanism) and mechanism.scheme == best.scheme
    report = Mechanism.from_json(mechanism.to_json()).randomize(3)  # OS entropy
    aggregator = Aggregator(mechanism, W)
    aggregator.add([report])
    assert aggregator.num_reports == 1
