"""Fourier (Hadamard) coefficients over the bit-encoded domain, with non-uniform budgets (docs/math.md §4).

Every attribute of size ``n`` takes ``⌈log₂ n⌉`` bits; codes beyond ``n`` are structural zeros. Only the
coefficients ``θ_α`` with ``α`` inside a workload product's bits are measured, each a ±1 row (``C = 1``,
its own group). The recovery mass of ``α`` is the workload's mass on it (real cells only), so §2 gives
``ε_α ∝ a_α^{1/3}`` (Laplace) or ``ρ_α ∝ √a_α`` (zCDP). Each coefficient is measured once, so recovery
simply rebuilds the marginals from the noisy coefficients (``planner.recovery``).
"""

from __future__ import annotations

import numpy as np

from planner.budget import Sensitivity, discrete_variance, optimal_budgets
from planner.privacy import Privacy
from planner.recovery import coefficient_masses, downward_closure, hadamard_basis, padded_count
from planner.strategies.base import Candidate, GroupBudget
from planner.strategies.residual import MASS_TOLERANCE, MAX_MARGINAL_CELLS, DirectCoefficientCandidate, subset_name
from planner.workload import Workload

MAX_LISTED_GROUPS = 64  # group_budgets() lists the coefficients with the largest budgets, then one summary


def fourier_candidate(workload: Workload, privacy: Privacy, sensitivity: Sensitivity) -> DirectCoefficientCandidate:
    domain = workload.domain
    bases = {a: hadamard_basis(domain.size_of(a)) for a in domain.attributes}
    needed = downward_closure(p.attributes for p in workload.products)
    masses = coefficient_masses(workload, bases)
    # θ_α = Π_{a∈T} √p_a · φ_T[α]: the mass on the ±1 row is the φ-mass over Π p_a
    row_mass = {t: np.asarray(masses[t], dtype=float) / padded_count(t, bases) for t in needed}
    flat = np.concatenate([row_mass[t].ravel() for t in needed])
    active = flat > MASS_TOLERANCE * flat.max()
    budgets = np.zeros(flat.size)
    budgets[active] = optimal_budgets(flat[active], np.ones(int(active.sum())), privacy)
    parameters, groups, offset = {}, [], 0
    for subset in needed:
        shape = row_mass[subset].shape
        share = budgets[offset : offset + row_mass[subset].size].reshape(shape)
        offset += share.size
        parameter = np.full(shape, np.nan)
        used = share > 0
        if privacy.is_laplace:
            parameter[used] = sensitivity.laplace_scale(1.0, 1.0) / share[used]
        else:
            parameter[used] = sensitivity.gaussian_sigma2(1.0, 1.0) / share[used]
        parameters[subset] = parameter
        groups.append((subset, share, parameter))
    return DirectCoefficientCandidate(
        "fourier", workload, privacy, sensitivity, bases, parameters, _group_budgets(groups, privacy)
    )


def _group_budgets(groups: list[tuple[tuple[str, ...], np.ndarray, np.ndarray]], privacy: Privacy) -> tuple[GroupBudget, ...]:
    """One group per measured coefficient, the largest budgets first; a long tail is summarised."""
    owners, positions, shares, parameters = [], [], [], []
    for number, (_, share, parameter) in enumerate(groups):
        used = np.flatnonzero(share > 0)
        owners.append(np.full(used.size, number))
        positions.append(used)
        shares.append(share.ravel()[used])
        parameters.append(parameter.ravel()[used])
    owner, position = np.concatenate(owners), np.concatenate(positions)
    budget, parameter = np.concatenate(shares), np.concatenate(parameters)
    variance = np.atleast_1d(discrete_variance(privacy.family, parameter))
    order = np.argsort(-budget, kind="stable")
    listed = order if order.size <= MAX_LISTED_GROUPS else order[: MAX_LISTED_GROUPS - 1]
    rows = []
    for i in listed:
        subset, share, _ = groups[owner[i]]
        index = np.unravel_index(position[i], share.shape)
        label = f"coefficient {subset_name(subset)}[{','.join(str(int(c) + 1) for c in index)}]"
        rows.append(GroupBudget(label, 1, float(budget[i]), float(variance[i])))
    tail = order[listed.size :]
    if tail.size:
        rows.append(
            GroupBudget(f"{tail.size} more coefficients", int(tail.size), float(budget[tail].sum()), float(variance[tail].max()))
        )
    return tuple(rows)


def candidates(
    workload: Workload, privacy: Privacy, contributions: int, distinct_cells: bool = False, include_inconsistent: bool = False
) -> list[Candidate]:
    """The Fourier strategy (the distinct-cells bound does not help ±1 rows: a row sees every cell).
    When an attribute the workload reads needs padding, its answers are inconsistent over the real cells,
    so it is only built when ``include_inconsistent`` asks for it (benchmarks)."""
    domain = workload.domain
    bases = {a: hadamard_basis(domain.size_of(a)) for a in domain.attributes}
    read = {a for p in workload.products for a in p.attributes}
    if not include_inconsistent and any(bases[a].padded != bases[a].size for a in read):
        return []
    if any(padded_count(p.attributes, bases) > MAX_MARGINAL_CELLS for p in workload.products):
        return []
    return [fourier_candidate(workload, privacy, Sensitivity(contributions))]

