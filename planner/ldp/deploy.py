"""Deploying a factorization mechanism: a client-side randomizer and a server-side aggregator.

The client needs only the probability table `Q` (one distribution over outputs per user type) or,
for the item-set protocols, a few parameters: it is shipped as JSON and sampled with plain Python
(`random`/`secrets`, no numpy). The server keeps the workload, rebuilds the reconstruction from the
same JSON, counts the reports and returns unbiased workload answers with their variances.

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
import random
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from planner.ldp.errors import InvalidStrategyError, MechanismFormatError, WorkloadNotSupportedError
from planner.ldp.factorization import Factorization, as_workload_matrix, check_epsilon, factorize, validate_strategy
from planner.ldp.item_sets import ItemSetScheme, scheme_from_parameters
from planner.ldp.optimize import optimize
from planner.ldp.wnnls import non_negative_answers
from planner.threads import one_blas_thread

FORMAT_NAME = "dpsql-ldp-mechanism"
FORMAT_VERSION = 1
Report = Any
"""A client report: an output index (table mechanisms) or a JSON list (item-set mechanisms)."""


class Mechanism(ABC):
    """An ε-LDP client randomizer that can be shipped as JSON.

    `TableMechanism` samples a column of a dense strategy `Q`; `ItemSetMechanism` runs one of the
    item-set protocols (unary encoding, local hashing, subset selection) whose output space is too
    large for a table. Both randomize in plain Python from OS entropy unless an `rng` is given.
    """

    epsilon: float

    @property
    @abstractmethod
    def num_types(self) -> int: ...

    @abstractmethod
    def randomize(self, value: int, rng: random.Random | None = None) -> Report:
        """The randomized report of a user of type `value`."""

    @abstractmethod
    def _document(self) -> dict[str, Any]:
        """The kind-specific JSON fields."""

    def to_json(self) -> str:
        """Everything a client needs, as JSON (floats round-trip exactly)."""
        return json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, "epsilon": self.epsilon, **self._document()})

    @staticmethod
    def from_json(text: str) -> Mechanism:
        """Parse and validate `to_json()` output; `MechanismFormatError` says what is wrong."""
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, TypeError) as error:
            raise MechanismFormatError(f"the mechanism is not valid JSON: {error}") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
            raise MechanismFormatError(f"not a mechanism: expected a JSON object with \"format\": \"{FORMAT_NAME}\"")
        if document.get("version") != FORMAT_VERSION:
            raise MechanismFormatError(f"unsupported mechanism version {document.get('version')!r}; expected {FORMAT_VERSION}")
        if not _is_number(document.get("epsilon")):
            raise MechanismFormatError("\"epsilon\" must be a JSON number")
        try:
            if document.get("kind", TableMechanism.kind) == TableMechanism.kind:
                return TableMechanism._from_document(document)
            return ItemSetMechanism._from_document(document)
        except InvalidStrategyError as error:
            raise MechanismFormatError(f"the mechanism's probability table is invalid: {error}") from None
        except MechanismFormatError:
            raise
        except ValueError as error:
            raise MechanismFormatError(f"the mechanism is invalid: {error}") from None

    @staticmethod
    def from_factorization(factorization: Factorization) -> Mechanism:
        """The randomizer of a factorization: its table `Q` if dense, else its item-set scheme."""
        if factorization.Q is not None:
            return TableMechanism(float(factorization.epsilon), tuple(tuple(map(float, column)) for column in factorization.Q.T))
        if factorization.scheme is not None:
            return ItemSetMechanism(factorization.scheme)
        raise InvalidStrategyError(f"{factorization.name} has neither a dense strategy table nor a client scheme")


def _check_type(value: Any, num_types: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < num_types:
        raise MechanismFormatError(f"the user type must be an integer in [0, {num_types}), got {value!r}")
    return int(value)


@dataclass(frozen=True)
class TableMechanism(Mechanism):
    """A randomizer given by its table: `probabilities[u][o] = P(report o | type u)` (= `Q[o, u]`).

    Construction validates the table (non-negative, each row sums to 1, and within `e^ε` across
    types for every output), so a tampered table cannot weaken the privacy a client gets.
    """

    epsilon: float
    probabilities: tuple[tuple[float, ...], ...]
    kind: ClassVar[str] = "table"

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        if not self.probabilities or len({len(row) for row in self.probabilities}) != 1:
            raise InvalidStrategyError("the probability table needs one equally long row per user type")
        validate_strategy(np.array(self.probabilities, dtype=float).T, self.epsilon)

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
        """An output index drawn from column `value` of `Q`."""
        cumulative, last_possible = self._cumulative[_check_type(value, self.num_types)]
        draw = (rng if rng is not None else secrets.SystemRandom()).random()
        return min(bisect.bisect_right(cumulative, draw), last_possible)

    def _document(self) -> dict[str, Any]:
        return {"kind": self.kind, "probabilities": [list(row) for row in self.probabilities]}

    @classmethod
    def _from_document(cls, document: dict[str, Any]) -> TableMechanism:
        table = document.get("probabilities")
        if not isinstance(table, list) or not all(isinstance(row, list) for row in table):
            raise MechanismFormatError("\"probabilities\" must be a list of lists (one row per user type)")
        if not all(_is_number(entry) for row in table for entry in row):
            raise MechanismFormatError("every probability must be a JSON number")
        return cls(float(document["epsilon"]), tuple(tuple(float(entry) for entry in row) for row in table))


@dataclass(frozen=True)
class ItemSetMechanism(Mechanism):
    """A randomizer running an item-set scheme (reports are JSON lists; see `planner.ldp.item_sets`)."""

    scheme: ItemSetScheme

    @property
    def epsilon(self) -> float:  # type: ignore[override]
        return self.scheme.epsilon

    @property
    def num_types(self) -> int:
        return self.scheme.num_types

    def randomize(self, value: int, rng: random.Random | None = None) -> list[int]:
        return self.scheme.randomize(_check_type(value, self.num_types), rng if rng is not None else secrets.SystemRandom())

    def _document(self) -> dict[str, Any]:
        return {"kind": self.scheme.kind, "num_types": self.num_types, **self.scheme.parameters()}

    @classmethod
    def _from_document(cls, document: dict[str, Any]) -> ItemSetMechanism:
        num_types = document.get("num_types")
        if isinstance(num_types, bool) or not isinstance(num_types, int) or num_types < 2:
            raise MechanismFormatError("\"num_types\" must be an integer ≥ 2")
        epsilon = check_epsilon(float(document["epsilon"]))
        return cls(scheme_from_parameters(str(document.get("kind")), num_types, epsilon, document))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@one_blas_thread
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
    """Collects the reports of `mechanism`'s clients and answers `workload` from them.

    Table mechanisms use the optimal reconstruction `V` for the workload; item-set mechanisms the
    standard estimator `W (Σ supports − N q)/(p − q)`. Reports are checked before any is counted.
    """

    @one_blas_thread
    def __init__(self, mechanism: Mechanism, workload: Any) -> None:
        self.mechanism = mechanism
        W = as_workload_matrix(workload)
        if W.shape[1] != mechanism.num_types:
            raise WorkloadNotSupportedError(
                f"the workload has {W.shape[1]} columns but the mechanism covers {mechanism.num_types} user types"
            )
        if isinstance(mechanism, TableMechanism):
            self.factorization = factorize(mechanism.strategy(), W, mechanism.epsilon, "deployed mechanism")
            self._statistics = np.zeros(mechanism.num_outputs)
        elif isinstance(mechanism, ItemSetMechanism):
            moments = mechanism.scheme.support.query_second_moments(W)
            self.factorization = Factorization(
                None, None, mechanism.epsilon, mechanism.scheme.kind, W=W, query_second_moments=moments, scheme=mechanism.scheme
            )
            self._statistics = np.zeros(mechanism.num_types)
        else:
            raise TypeError(f"unsupported mechanism {type(mechanism).__name__}")
        self._num_reports = 0

    def add(self, reports: Iterable[Report]) -> None:
        """Count client reports (all of them are validated first)."""
        values = list(reports)
        increment = np.zeros_like(self._statistics)
        if isinstance(self.mechanism, TableMechanism):
            if not all(isinstance(report, (int, np.integer)) and not isinstance(report, bool) for report in values):
                raise MechanismFormatError("every report must be an integer output index")
            indices = np.array(values, dtype=np.int64)
            if indices.size and (indices.min() < 0 or indices.max() >= self.mechanism.num_outputs):
                raise MechanismFormatError(f"a report is out of range: outputs are 0..{self.mechanism.num_outputs - 1}")
            increment += np.bincount(indices, minlength=self.mechanism.num_outputs)
        else:
            for report in values:
                increment[self.mechanism.scheme.supported_items(report)] += 1
        self._statistics += increment
        self._num_reports += len(values)

    @property
    def num_reports(self) -> int:
        return self._num_reports

    def unbiased_estimates(self) -> np.ndarray:
        """Unbiased estimates of the workload answers from the reports so far."""
        if isinstance(self.mechanism, TableMechanism):
            return self.factorization.V @ self._statistics
        support = self.mechanism.scheme.support
        histogram = (self._statistics - self._num_reports * support.other_item) / (support.true_item - support.other_item)
        return self.factorization.W @ histogram

    @one_blas_thread
    def answers(self, non_negative: bool = False) -> WorkloadAnswers:
        """The estimates with per-query worst-case variances; `non_negative=True` post-processes with
        WNNLS (biased, usually more accurate; the variances then still describe the unbiased estimate)."""
        estimates = self.unbiased_estimates()
        if non_negative:
            estimates = non_negative_answers(self.factorization.W, estimates)
        variances = self._num_reports * self.factorization.per_query_type_variance.max(axis=1)
        return WorkloadAnswers(estimates, variances, self._num_reports)
