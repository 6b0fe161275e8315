"""Deploying a factorization mechanism: a client-side randomizer and a server-side aggregator.

The client needs only the probability table `Q` (one distribution over outputs per user type): it
is shipped as JSON and sampled with plain Python (`random`/`secrets`, no numpy). The server keeps the
workload, rebuilds the optimal reconstruction `V` from the same table, counts the reports and
returns unbiased workload answers with their variances.

Example:
    >>> import numpy as np, random
    >>> from planner.ldp import design, Mechanism, Aggregator
    >>> W = np.tril(np.ones((4, 4)))                            # prefix counts over 4 user types
    >>> mechanism = design(W, epsilon=1.0, seed=0)
    >>> shipped = Mechanism.from_json(mechanism.to_json())      # what each client downloads
    >>> rng = random.Random(7)
    >>> reports = [shipped.randomize(value, rng) for value in [0, 1, 1, 3] * 250]
    >>> aggregator = Aggregator(mechanism, W)
    >>> aggregator.add(reports)
    >>> result = aggregator.answers()
    >>> result.num_reports, result.estimates.shape
    (1000, (4,))
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from planner.ldp.errors import InvalidStrategyError, MechanismFormatError
from planner.ldp.factorization import Factorization, as_workload_matrix, check_epsilon, factorize, validate_strategy
from planner.ldp.optimize import optimize
from planner.ldp.wnnls import non_negative_answers

FORMAT_NAME = "dpsql-ldp-mechanism"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Mechanism:
    """An ε-LDP randomizer given by its table: `probabilities[u][o] = P(report o | type u)`.

    Construction validates the table (non-negative, each row sums to 1, and within `e^ε` across
    types for every output), so a tampered table cannot weaken the privacy a client gets.
    """

    epsilon: float
    probabilities: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        if not self.probabilities or len({len(row) for row in self.probabilities}) != 1:
            raise InvalidStrategyError("the probability table needs one equally long row per user type")
        validate_strategy(np.array(self.probabilities, dtype=float).T, self.epsilon)

    @classmethod
    def from_factorization(cls, factorization: Factorization) -> Mechanism:
        """The randomizer of a factorization with a dense strategy `Q`."""
        if factorization.Q is None:
            raise InvalidStrategyError(
                f"{factorization.name} has no dense strategy table; use a protocol with a small output space"
            )
        return cls(float(factorization.epsilon), tuple(tuple(map(float, column)) for column in factorization.Q.T))

    @property
    def num_types(self) -> int:
        return len(self.probabilities)

    @property
    def num_outputs(self) -> int:
        return len(self.probabilities[0])

    def strategy(self) -> np.ndarray:
        """The strategy matrix `Q` (outputs × types)."""
        return np.array(self.probabilities, dtype=float).T

    @cached_property
    def _cumulative(self) -> tuple[tuple[list[float], int], ...]:
        """Per type: cumulative probabilities and the last output with positive probability."""
        tables = []
        for row in self.probabilities:
            last_possible = max(index for index, probability in enumerate(row) if probability > 0)
            tables.append((list(itertools.accumulate(row)), last_possible))
        return tuple(tables)

    def randomize(self, value: int, rng: random.Random | None = None) -> int:
        """The randomized report of a user of type `value` (OS entropy unless `rng` is given)."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < self.num_types:
            raise MechanismFormatError(f"the user type must be an integer in [0, {self.num_types}), got {value!r}")
        cumulative, last_possible = self._cumulative[int(value)]
        draw = (rng if rng is not None else secrets.SystemRandom()).random()
        return min(bisect.bisect_right(cumulative, draw), last_possible)

    def to_json(self) -> str:
        """The table as JSON, everything a client needs (floats round-trip exactly)."""
        return json.dumps(
            {"format": FORMAT_NAME, "version": FORMAT_VERSION, "epsilon": self.epsilon,
             "probabilities": [list(row) for row in self.probabilities]}
        )

    @classmethod
    def from_json(cls, text: str) -> Mechanism:
        """Parse and validate `to_json()` output; `MechanismFormatError` says what is wrong."""
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, TypeError) as error:
            raise MechanismFormatError(f"the mechanism is not valid JSON: {error}") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
            raise MechanismFormatError(f"not a mechanism: expected a JSON object with \"format\": \"{FORMAT_NAME}\"")
        if document.get("version") != FORMAT_VERSION:
            raise MechanismFormatError(f"unsupported mechanism version {document.get('version')!r}; expected {FORMAT_VERSION}")
        epsilon, table = document.get("epsilon"), document.get("probabilities")
        if not isinstance(table, list) or not all(isinstance(row, list) for row in table):
            raise MechanismFormatError("\"probabilities\" must be a list of lists (one row per user type)")
        if not all(_is_number(entry) for row in table for entry in row) or not _is_number(epsilon):
            raise MechanismFormatError("\"epsilon\" and every probability must be a JSON number")
        try:
            return cls(float(epsilon), tuple(tuple(float(entry) for entry in row) for row in table))
        except InvalidStrategyError as error:
            raise MechanismFormatError(f"the mechanism's probability table is invalid: {error}") from None
        except ValueError as error:
            raise MechanismFormatError(f"the mechanism is invalid: {error}") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def design(workload: Any, epsilon: float, *, seed: int | None = None, **optimize_options: Any) -> Mechanism:
    """An ε-LDP mechanism optimized for `workload` (dense `W` or an object with `.dense()`).

    `optimize_options` go to `planner.ldp.optimize` (e.g. `restarts`, `iterations`, `progress`).
    """
    return Mechanism.from_factorization(optimize(as_workload_matrix(workload), epsilon, seed=seed, **optimize_options))


@dataclass(frozen=True)
class WorkloadAnswers:
    """Unbiased workload estimates and, per query, the worst-case variance for this many reports
    (the variance if every reporting user had the type that is worst for that query)."""

    estimates: np.ndarray
    variances: np.ndarray
    num_reports: int


class Aggregator:
    """Collects reports of `mechanism`'s clients and answers `workload` from them."""

    def __init__(self, mechanism: Mechanism, workload: Any) -> None:
        self.mechanism = mechanism
        self.factorization: Factorization = factorize(
            mechanism.strategy(), as_workload_matrix(workload), mechanism.epsilon, "deployed mechanism"
        )
        self._counts = np.zeros(mechanism.num_outputs, dtype=np.int64)

    def add(self, reports: Iterable[int]) -> None:
        """Count client reports (output indices); all of them are checked before any is counted."""
        values = list(reports)
        if not all(isinstance(report, (int, np.integer)) and not isinstance(report, bool) for report in values):
            raise MechanismFormatError("every report must be an integer output index")
        indices = np.array(values, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.mechanism.num_outputs):
            raise MechanismFormatError(
                f"a report is out of range: outputs are 0..{self.mechanism.num_outputs - 1}"
            )
        self._counts += np.bincount(indices, minlength=self.mechanism.num_outputs)

    @property
    def num_reports(self) -> int:
        return int(self._counts.sum())

    @property
    def response_counts(self) -> np.ndarray:
        """How many reports chose each output (the response vector `y`)."""
        return self._counts.copy()

    def answers(self, non_negative: bool = False) -> WorkloadAnswers:
        """`V y` with per-query worst-case variances; `non_negative=True` post-processes with WNNLS
        (biased, usually more accurate; the variances then still describe the unbiased estimate)."""
        estimates = self.factorization.V @ self._counts
        if non_negative:
            estimates = non_negative_answers(self.factorization.W, estimates)
        variances = self.num_reports * self.factorization.per_query_type_variance.max(axis=1)
        return WorkloadAnswers(estimates, variances, self.num_reports)
