"""The staged selection's accounting: its stages compose to the statement's budget, and its δ stays within the
statement's, whatever the second stage's number of cells."""

from __future__ import annotations

import dataclasses

import pytest

from planner import Privacy, StagedSelection, design_staged_selection


def _within(staged: StagedSelection, budget: Privacy, delta: float) -> bool:
    """The stages' sequential composition is the budget, their δ at most ``delta`` for every second stage."""
    value = (lambda p: p.epsilon) if budget.is_laplace else (lambda p: p.rho)
    spent = sum(value(r.key_privacy) for r in staged.first) + value(staged.second_privacy)
    charged = sum(r.delta for r in staged.first) + staged.second_delta
    seconds = [staged.second(cells) for cells in (1, 7, 64, staged.max_cells)]
    return (
        spent == pytest.approx(value(budget)) and staged.delta == pytest.approx(charged) and charged <= delta
        and all(s.delta <= staged.second_delta and s.key_privacy == staged.second_privacy for s in seconds)
    )


@pytest.mark.parametrize("budget", [Privacy.laplace(1.0), Privacy.laplace(0.1), Privacy.zcdp(0.5)])
@pytest.mark.parametrize(("columns", "groups"), [(2, 1), (3, 2)])
def test_the_stages_compose_to_the_budget_and_stay_within_delta(budget: Privacy, columns: int, groups: int) -> None:
    staged = design_staged_selection(budget, 1e-5, columns, groups, groups, 1 << 16)
    assert _within(staged, budget, 1e-5)
    broken = dataclasses.replace(staged, second_delta=1e-5)  # the second stage given the whole δ: over it
    assert not _within(broken, budget, 1e-5)


def test_the_second_threshold_grows_with_its_cells_and_is_capped_at_the_largest_checked() -> None:
    staged = design_staged_selection(Privacy.laplace(1.0), 1e-5, 2, 1, 1, 1 << 10)
    thresholds = [staged.second(cells).threshold for cells in (1, 4, 16, 1 << 10, 1 << 20)]
    assert thresholds == sorted(thresholds) and thresholds[-1] == thresholds[-2]


def test_a_delta_too_small_to_split_is_refused() -> None:
    with pytest.raises(ValueError, match="too small to split"):
        design_staged_selection(Privacy.laplace(1.0), 3e-15, 2, 1, 1, 16)



@pytest.mark.parametrize("budget", [Privacy.laplace(0.7), Privacy.zcdp(0.3)])
def test_stages_that_select_only_take_the_grids_best_share_and_the_measurement_exactly_the_rest(budget: Privacy) -> None:
    """``split_staged_selection``: the stages at the fraction of least objective on the grid, the measurement at exactly
    the rest of the budget, the stages' δ within the statement's, the second stage thresholding one cell per key; one
    column (the others' keys public): one threshold at the whole share and δ."""
    from planner import split_staged_selection
    from planner.selection_split import SELECTION_FRACTIONS, count_variance
    from planner.staged_selection import worst_key_error

    chosen = split_staged_selection(budget, 1e-5, 2, 1, 1, 1)
    total = (lambda p: p.epsilon) if budget.is_laplace else (lambda p: p.rho)
    assert total(chosen.stages.privacy) + total(chosen.count_privacy) == pytest.approx(total(budget), rel=1e-12)
    assert total(chosen.stages.privacy) == pytest.approx(chosen.fraction * total(budget))
    assert chosen.stages.delta <= 1e-5 and chosen.second.delta <= chosen.stages.second_delta and chosen.second.cells == 1
    objectives = []
    for fraction in SELECTION_FRACTIONS:
        stages = design_staged_selection(budget.scaled(fraction), 1e-5, 2, 1, 1, 1)
        rest = budget.scaled(1 - fraction)
        objectives.append(worst_key_error(stages.second(1), count_variance(rest, 1)))
    assert 0.05 < chosen.fraction < 0.95 and chosen.objective == pytest.approx(min(objectives), rel=1e-9)
    alone = split_staged_selection(budget, 1e-5, 1, 2, 3, 3)
    assert alone.stages is None and alone.delta == alone.second.delta <= 1e-5 and alone.second.privacy == alone.selection_privacy
    assert total(alone.selection_privacy) + total(alone.count_privacy) == pytest.approx(total(budget), rel=1e-12)
    assert (alone.second.max_groups, alone.second.sensitivity, alone.second.rows_per_key, alone.second.cells) == (2, 3, 3, 1)
