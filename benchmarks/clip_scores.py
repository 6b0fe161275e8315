"""Which score should choose ``clip: auto``'s clip? Every family of private clip choices on the same two tasks.

``clip: auto`` spends a share ``s`` of ε on a clip ``c`` and measures with the rest; what the user reads is the AVG
per group at that clip against the unclipped truth. This script puts side by side, on PUMS_10k income by sex
(declared ``[0, 10000000]``, well chosen ``[0, 500000]``) and Adult hours-per-week by workclass (``[0, 1000]``, well
chosen ``[0, 98]``), the AVG MAE each way of choosing ``c`` gives, relative to dpsql's own MAE with the well-chosen
bounds at the whole ε. ``λ`` is the noise of the groups' sums in rows of clip width, as dpsql's plan predicts it
(``√(2/π)·sd`` summed over the groups), ``G(c)`` the rows above ``c``, ``B(c) = Σ (x − c)⁺`` their excess, and the
predicted error at ``c`` is ``L(c) = λ·c + B(c)`` (Amin, Kulesza, Muñoz Medina and Vassilvitskii, "Bounding User
Contributions: A Bias-Variance Trade-off in Differential Privacy", ICML 2019):

* the count score with a top-code bonus, ``|G − 3| − min(t, 100)`` at ε/2, base measure ∝ c^-4, 15 % of ε (what
  ``clip: auto`` used before; ``bounds: auto`` still scores so);
* the plain quantile score ``|G − 3|``, base ∝ c^-4;
* the optimum of ``L``, which leaves ``λ`` rows above the clip: ``max(G − λ, λ − G − t, 0)``, how many rows must move
  before ``c`` is optimal (``t`` the rows between the next lower candidate and ``c``), base ∝ c^-4;
* the predicted error itself as the score, made of bounded sensitivity: ``max over c' of (L(c) − L(c'))/max(c, c')``
  (one row moves ``L(c) − L(c')`` by at most ``|c − c'|``), base ∝ c^-2;
* a noisy histogram (Laplace, 2 bins per doubling below the declared bound, the whole share) from which the
  predicted ``noise² + bias²`` is minimised — bias from the isotonic noisy tail counts (Monte Carlo, 500 draws);
* the logarithm of ``L`` with each row's excess counted up to 5 % of the clip (``S(c) = Σ min(20·(x − c)⁺/c, 1)``)
  and the base measure ``∝ c^(−K)`` its noise term implies, as a two-sided score (``exp(−ε·S/2)``, ``K = ε·λ·10``);
* the same, ``planner.UpperClip`` as shipped: ``S`` only rises as rows are added, so ``exp(−ε·S)``, ``K = ε·λ·20``;
* the best fixed clip with hindsight (not private: the floor for any choice).

A second table turns the shipped family's knobs — the share of ε, ``REACH``, the base measure's power
(``α·K``) and a public inflation ``γ`` of the drawn clip (released ``γ·c``: a clip too low costs bias faster than
one too high costs noise) — over a grid, and lists the settings nearest to both targets of the issue that asked
for ``clip: auto`` (income within 1.3×, hours within 1.2× of the well-chosen bounds), each task's ratio beside
its target: on these two columns no setting meets both (the income tail that decides the clip is a dozen rows,
about what a tenth of ε can resolve).

Every family but the first spends ``planner.UPPER_CLIP_SHARE``. The score families' laws are exact (the
exponential mechanism over ``planner.clipping.candidates``, the shipped base grid); the error at a clip comes from
a model calibrated on dpsql itself: ``--trials`` releases of the AVG per group at the well-chosen bounds give each
group's noise draws, scaled by the clip's width and by ``1/(1 − s)``, plus the clip's exact bias per group. The
model is optimistic by about 0.1 on income above 600,000 (its errors there are the noise of a narrower plan) and
pessimistic on the shares of low draws; ``aggregates.py`` measures the shipped mechanism end to end.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/clip_scores.py [--trials 200]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import planner
from dpsql_runs import released_runs
from planner import clipping
from results_io import number_text, print_table, write_csv

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("DPSQL_BENCH_DATA", HERE.parent.parent / "shared" / "data"))
SHARE = planner.UPPER_CLIP_SHARE
BEFORE_SHARE = planner.CLIP_SHARE  # what clip: auto spent before


@dataclass(frozen=True)
class Task:
    name: str
    file: str
    group: str
    column: str
    chosen: int  # the well-chosen upper bound (the lower is 0)
    loose: int  # the declared upper bound beside ``clip: auto``
    base: int  # the clip's base grid over [0, loose], as dpsql reads it


TASKS = (
    Task("PUMS_10k income by sex", "PUMS_10k.csv", "sex", "income", 500_000, 10_000_000, 1 << 22),
    Task("Adult hours-per-week by workclass", "adult.csv", "workclass", "hours-per-week", 98, 1000, 1000),
)


@dataclass
class Model:
    """A task's data and its error model (module doc)."""

    task: Task
    values: np.ndarray  # per row
    groups: np.ndarray  # per row, 0..G-1
    noise: np.ndarray  # (trials, G): dpsql's AVG errors at the well-chosen bounds, ε = 1
    clips: np.ndarray  # the candidates' values, ascending
    indices: np.ndarray  # the candidates' base-grid indices
    histogram: np.ndarray  # rows per base-grid index

    @property
    def sizes(self) -> np.ndarray:
        return np.bincount(self.groups)

    def bias(self, clip: float) -> np.ndarray:
        """Per group, how far the mean of the values clamped at ``clip`` lies below the unclipped mean."""
        return np.bincount(self.groups, weights=np.maximum(self.values - clip, 0.0)) / self.sizes

    def mae(self, clip: float, share: float) -> float:
        scaled = self.noise * (clip / self.task.chosen) / (1.0 - share)
        return float(np.mean(np.abs(scaled - self.bias(clip))))

    def slope(self) -> float:
        """``λ`` as dpsql's plan predicts it: ``√(2/π)·sd`` of each group's sum of clip widths, summed over the groups."""
        return float(np.sqrt(2 / np.pi) * np.sum(np.std(self.noise, axis=0) * self.sizes) / (self.task.chosen * (1.0 - SHARE)))

    def above(self) -> tuple[np.ndarray, np.ndarray]:
        """Per candidate: the rows above it (``G``) and the rows between the next lower candidate and it (``T``)."""
        at_most = np.cumsum(self.histogram)[self.indices]
        return at_most[-1] - at_most, at_most - np.concatenate([[0], at_most[:-1]])

    def excess(self) -> np.ndarray:
        """Per candidate, ``B(c) = Σ (x − c)⁺``."""
        ordered = np.sort(self.values)
        tail = np.concatenate([np.cumsum(ordered[::-1])[::-1], [0.0]])
        first = np.searchsorted(ordered, self.clips, side="right")
        return tail[first] - self.clips * (ordered.size - first)


def model(task: Task, trials: int) -> Model:
    frame = pd.read_csv(DATA / task.file, usecols=[task.group, task.column]).rename(columns={task.group: "g", task.column: "v"})
    keys = sorted(frame.g.unique())
    schema = {"privacy_unit": None, "columns": {"g": {"categories": keys}, "v": {"bounds": [0, task.chosen]}}}
    exact = frame.assign(v=frame.v.clip(0, task.chosen)).groupby("g").v.mean().reindex(keys).to_numpy()
    runs = released_runs(frame, schema, "SELECT g, SUM(v), AVG(v) FROM t GROUP BY g", trials, 1.0)
    noise = np.array([[float(row[2]) for row in rows] for rows, _ in runs]) - exact
    indices = np.array(clipping.candidates(task.base))
    values = frame.v.clip(0, task.loose).to_numpy(dtype=float)  # the truth: the values clamped to the declared bounds
    step = task.loose / task.base
    histogram = np.bincount(np.minimum(np.floor(values / step + 0.5), task.base).astype(np.int64), minlength=task.base + 1)
    return Model(task, values, np.searchsorted(keys, frame.g.to_numpy()), noise, indices * step, indices, histogram)


Law = Callable[[Model], np.ndarray]  # a family's probabilities over the candidates


def exponential(score: np.ndarray, clips: np.ndarray, power: float, epsilon: float = SHARE, factor: float = 0.5) -> np.ndarray:
    """The exponential mechanism ``∝ c^-power·exp(−factor·ε·score)``, ``score`` of sensitivity 1 (less is better;
    ``factor`` 1 only for a score that rises with every row added)."""
    log_weight = -factor * epsilon * (score - score.min()) - power * np.log(clips / clips[0])
    weight = np.exp(log_weight - log_weight.max())
    return weight / weight.sum()


def _normalised(weights: tuple[np.ndarray, int]) -> np.ndarray:
    numerators, denominator = weights
    weight = np.exp(-(numerators - numerators.min()) / denominator)
    return weight / weight.sum()


def before(m: Model) -> np.ndarray:
    at_most = np.cumsum(m.histogram)[m.indices]
    return _normalised(clipping._log_weights(at_most, int(at_most[-1]), m.clips / m.clips[0], BEFORE_SHARE, 1, 4.0))


def shipped(m: Model) -> np.ndarray:
    return _normalised(planner.UpperClip(m.task.base, planner.Privacy.laplace(SHARE), m.slope())._numerators(m.histogram))


def quantile(m: Model) -> np.ndarray:
    rows_above, _ = m.above()
    return exponential(np.abs(rows_above - clipping.ROWS_ABOVE), m.clips, 4.0)


def l1_optimum(m: Model) -> np.ndarray:
    rows_above, inside = m.above()
    slope = m.slope()
    return exponential(np.maximum(np.maximum(rows_above - slope, slope - rows_above - inside), 0.0), m.clips, 4.0)


def log_error(m: Model, reach: int = clipping.REACH) -> np.ndarray:
    ordered = np.sort(m.values)
    weighted = np.array([np.minimum(reach * (ordered[ordered > c] - c) / c, 1.0).sum() for c in m.clips])
    return exponential(weighted, m.clips, SHARE * m.slope() * reach / 2)


def regret(m: Model) -> np.ndarray:
    loss = m.slope() * m.clips + m.excess()
    score = ((loss[:, None] - loss[None, :]) / np.maximum(m.clips[:, None], m.clips[None, :])).max(axis=1)
    return exponential(score, m.clips, 2.0)


def noisy_histogram(m: Model, draws: int = 500, per_doubling: int = 2, seed: int = 0) -> np.ndarray:
    """The share of draws landing on each candidate (module doc): the predicted ``Σ_g noise_g² + B̂²/G`` minimised."""
    loose = float(m.task.loose)
    edges = loose * 2.0 ** (-np.arange(int(np.log2(loose)) * per_doubling + 1) / per_doubling)  # descending
    counts = np.histogram(m.values, bins=edges[::-1])[0][::-1]  # rows in (edges[i + 1], edges[i]]
    groups = m.sizes.size
    rms = float(np.sqrt(np.mean((m.noise * m.sizes) ** 2)) / (m.task.chosen * (1.0 - SHARE)))  # a SUM's noise per unit width
    rng = np.random.default_rng(seed)
    chosen = np.zeros(m.clips.size)
    for _ in range(draws):
        above = np.maximum(_nondecreasing(np.concatenate([[0.0], np.cumsum(counts + rng.laplace(0.0, 1.0 / SHARE, counts.size))])), 0.0)
        excess = np.concatenate([[0.0], np.cumsum(0.5 * (above[:-1] + above[1:]) * (edges[:-1] - edges[1:]))])
        clip = edges[int(np.argmin(groups * (rms * edges) ** 2 + excess**2 / groups))]
        chosen[min(int(np.searchsorted(m.clips, clip)), m.clips.size - 1)] += 1
    return chosen / draws


def _nondecreasing(values: np.ndarray) -> np.ndarray:
    """The isotonic (least-squares non-decreasing) fit, by pooling adjacent violators."""
    blocks: list[list[float]] = []  # [mean, weight]
    for value in values:
        blocks.append([float(value), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (a, wa), (b, wb) = blocks[-2], blocks.pop()
            blocks[-1] = [(a * wa + b * wb) / (wa + wb), wa + wb]
    return np.concatenate([np.full(int(w), v) for v, w in blocks])


FAMILIES: dict[str, tuple[Law, float]] = {  # each with the share of ε it spends
    "count score, top-code bonus (before: 15 % of ε)": (before, BEFORE_SHARE),
    "quantile |G − 3|, base c^-4": (quantile, SHARE),
    "L1 predicted-error optimum: λ rows above, base c^-4": (l1_optimum, SHARE),
    "predicted error as the score (bounded regret), base c^-2": (regret, SHARE),
    "noisy histogram, argmin predicted noise² + bias²": (noisy_histogram, SHARE),
    "log predicted error, capped excess, two-sided (ε/2)": (log_error, SHARE),
    "planner.UpperClip: the same, monotone (ε) — shipped": (shipped, SHARE),
}


TARGETS = (1.3, 1.2)  # income, hours: the ratios the issue asked for
KNOBS = {"share": (0.05, 0.1, 0.15, 0.2, 0.3), "reach": (10, 20, 40, 80), "power": (0.5, 0.75, 1.0, 1.5), "inflation": (1.0, 1.1, 1.2, 1.3, 1.5)}


def knob_grid(models: list[tuple[Model, float]]) -> list[dict[str, object]]:
    """Every setting of the shipped family's knobs (module doc) with each task's AVG MAE ratio (the law in floating
    point: the shipped sampler's rounding moves it by far less than the trials do), best first by the worse of the
    ratios over their targets."""
    excess: dict[tuple[str, int], np.ndarray] = {}
    rows = []
    for share in KNOBS["share"]:
        for reach in KNOBS["reach"]:
            for power in KNOBS["power"]:
                for inflation in KNOBS["inflation"]:
                    ratios = []
                    for m, reference in models:
                        key = (m.task.name, reach)
                        if key not in excess:
                            ordered = np.sort(m.values)
                            excess[key] = np.array([np.minimum(reach * (ordered[ordered > c] - c) / c, 1.0).sum() for c in m.clips])
                        slope = m.slope() * (1.0 - SHARE) / (1.0 - share)
                        law = exponential(excess[key], m.clips, power * min(share * slope * reach, clipping.MAX_POWER), share, 1.0)
                        errors = np.array([m.mae(min(c * inflation, m.task.loose), share) for c in m.clips])
                        ratios.append(float(law @ errors) / reference)
                    rows.append({"share": share, "reach": reach, "power": power, "inflation": inflation,
                                 "income": ratios[0], "hours": ratios[1], "worse_over_target": max(r / t for r, t in zip(ratios, TARGETS))})
    return sorted(rows, key=lambda r: r["worse_over_target"])  # type: ignore[arg-type,return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="dpsql releases calibrating each task's noise")
    parser.add_argument("--csv", default="clip_scores.csv")
    parser.add_argument("--knobs", type=int, default=12, help="rows of the knob grid to print (0: skip it)")
    args = parser.parse_args()
    rows = []
    models = []
    for task in TASKS:
        m = model(task, args.trials)
        reference = float(np.mean(np.abs(m.noise - m.bias(task.chosen))))
        models.append((m, reference))
        hindsight = np.zeros(m.clips.size)
        hindsight[int(np.argmin([m.mae(c, SHARE) for c in m.clips]))] = 1.0
        for name, (law, share) in (*FAMILIES.items(), ("best fixed clip with hindsight (not private)", (lambda _: hindsight, SHARE))):
            probabilities = law(m)
            errors = np.array([m.mae(c, share) for c in m.clips])
            quantiles = m.clips[np.minimum(np.searchsorted(np.cumsum(probabilities), [0.1, 0.5, 0.9]), m.clips.size - 1)]
            rows.append({"task": task.name, "choice": name, "avg_mae_vs_well_chosen": float(probabilities @ errors) / reference,
                         "clip_p10": quantiles[0], "clip_p50": quantiles[1], "clip_p90": quantiles[2]})
        print(f"{task.name}: λ = {m.slope():.2f} rows per unit of clip width; dpsql's AVG MAE with [0, {task.chosen}]: {reference:.4g}")
    columns = ["task", "choice", "avg_mae_vs_well_chosen", "clip_p10", "clip_p50", "clip_p90"]
    print_table(rows, columns, number_text)
    print(f"written to {write_csv(args.csv, rows, columns)}")
    if args.knobs:
        grid = knob_grid(models)
        shipped_row = next(r for r in grid if (r["share"], r["reach"], r["power"], r["inflation"]) == (SHARE, clipping.REACH, 1.0, 1.0))
        knob_columns = ["share", "reach", "power", "inflation", "income", "hours", "worse_over_target"]
        print(f"\nthe shipped family's knobs, {len(grid)} settings: the {args.knobs} nearest to both targets "
              f"(income ≤ {TARGETS[0]}×, hours ≤ {TARGETS[1]}×), then the shipped setting")
        print_table([*grid[: args.knobs], shipped_row], knob_columns, number_text)
        print(f"settings meeting both targets: {sum(r['worse_over_target'] <= 1.0 for r in grid)}; written to "  # type: ignore[operator]
              f"{write_csv('clip_knobs.csv', grid, knob_columns)}")


if __name__ == "__main__":
    main()
