"""Is independent Laplace noise the best ε-DP noise for a strategy? On two cells: no, and ridge pairs are.

For two counts (the data vector x ∈ ℕ²) and a workload W, *any* additive ε-DP mechanism x + Y with
integer noise Y must satisfy p(y) ≤ e^{ε} p(y ± e_j) for both cells j. Minimising the expected total
squared error E[Yᵀ WᵀW Y] over all such pmfs is a linear program. This script solves it on the lattice
(per-step ε = t small, so the lattice approximates the continuous scale; the pmf is truncated to a box
|y_i| ≤ R, which only relaxes the constraints, so the LP value is a lower bound on the true optimum)
and compares, in units of 2/ε² (one Laplace variance):

* the LP optimum (all ε-DP additive noise),
* the best matrix mechanism with independent Laplace noise (identity for both workloads here: every
  strategy with unit L1 columns is at least as bad, by a Nelder–Mead search over 2–4 rows),
* the ridge pair of ``planner.noise`` at its best width, from the continuous closed forms
  Var(Y₁+Y₂) = 2 + 4/(2+w), Var(Y₁−Y₂) = (w³/3 + 2w² + 6w + 8)/(2+w) (in units of b²),
* and the discrete ridge pair on the LP's own lattice (b = 1/t, best integer half-width h), which is
  what to compare the LP with exactly: they agree to about 1e-4.

    /work/venv/bin/python benchmarks/noise_lp.py     # about a minute; writes results/noise_lp.csv
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import time

import numpy as np
from planner import noise
from results_io import number_text, print_table, write_csv
from scipy import sparse
from scipy.optimize import linprog, minimize, minimize_scalar

STEP_EPSILON = 0.2  # ε per lattice step
RADIUS = 70  # the box |y_i| ≤ RADIUS: e^{-0.2·70} ≈ 1e-6 of the peak at the edge

WORKLOADS = {
    "all ranges, n = 2": np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
    "prefixes, n = 2": np.array([[1.0, 0.0], [1.0, 1.0]]),
}


def lp_optimum(gram: np.ndarray) -> tuple[float, float]:
    """The LP's least E[YᵀGY]·t²/2 and the largest |log p(y) − log p(y ± e_j)|/t of its solution (≤ 1).

    Variables q = p·e^{t‖y‖₁} keep the LP well scaled (p spans many orders of magnitude)."""
    t, grid = STEP_EPSILON, np.arange(-RADIUS, RADIUS + 1)
    y = np.stack(np.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2)
    scale = np.exp(-t * np.abs(y).sum(axis=1))
    cost = np.einsum("ij,jk,ik->i", y, gram, y) * scale
    index = np.arange(y.shape[0]).reshape(grid.size, grid.size)
    rows, columns, values, count = [], [], [], 0
    for axis in (0, 1):
        low, high = np.take(index, range(grid.size - 1), axis=axis).ravel(), np.take(index, range(1, grid.size), axis=axis).ravel()
        for u, v in ((low, high), (high, low)):  # scale_u q_u ≤ e^t scale_v q_v
            rows.append(np.repeat(np.arange(count, count + u.size), 2))
            columns.append(np.stack([u, v], 1).ravel())
            values.append(np.stack([np.ones(u.size), -np.exp(t) * scale[v] / scale[u]], 1).ravel())
            count += u.size
    constraints = sparse.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))), shape=(count, y.shape[0]))
    result = linprog(
        cost / cost.max(), A_ub=constraints, b_ub=np.zeros(count), A_eq=(scale / scale.sum())[None, :], b_eq=[1.0],
        bounds=(0, None), method="highs", options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    pmf = scale * result.x
    pmf /= pmf.sum()
    grid_pmf = pmf.reshape(grid.size, grid.size)
    ratio = max(np.abs(np.log(np.take(grid_pmf, range(grid.size - 1), axis=a) / np.take(grid_pmf, range(1, grid.size), axis=a))).max() for a in (0, 1))
    return float((np.einsum("ij,jk,ik->i", y, gram, y) * pmf).sum() * t * t / 2), float(ratio / t)


def best_matrix_mechanism(gram: np.ndarray, seed: int = 0) -> float:
    """Least ``‖A‖²₁ tr(G (AᵀA)⁻¹)`` over strategies of 2–4 rows (Nelder–Mead from 60 starts each)."""
    rng = np.random.default_rng(seed)

    def error(entries: np.ndarray, rows: int) -> float:
        strategy = entries.reshape(rows, 2)
        try:
            return float(np.abs(strategy).sum(axis=0).max() ** 2 * np.trace(gram @ np.linalg.inv(strategy.T @ strategy)))
        except np.linalg.LinAlgError:
            return np.inf

    best = float(np.trace(gram))
    for rows in (2, 3, 4):
        for _ in range(60):
            found = minimize(error, rng.normal(size=2 * rows), args=(rows,), method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-10, "fatol": 1e-12})
            best = min(best, found.fun)
    return best


def best_ridge(gram: np.ndarray) -> tuple[float, float]:
    """Least E[YᵀGY]/(2b²) over ridge widths w, and that w."""
    rotate = np.array([[1.0, 1.0], [1.0, -1.0]]) / 2.0  # y = rotate · (a, d)

    def error(width: float) -> float:
        total = 2.0 + 4.0 / (2.0 + width)
        difference = (width**3 / 3 + 2 * width**2 + 6 * width + 8) / (2 + width)
        return float(np.trace(gram @ rotate @ np.diag([total, difference]) @ rotate.T)) / 2.0

    found = minimize_scalar(error, bounds=(0.0, 5.0), method="bounded", options={"xatol": 1e-8})
    return float(found.fun), float(found.x)


def best_lattice_ridge(gram: np.ndarray) -> tuple[float, int]:
    """Least E[YᵀGY]·t²/2 of the discrete ridge pair with b = 1/t over integer half-widths, and that h."""
    rotate = np.array([[1.0, 1.0], [1.0, -1.0]]) / 2.0
    scale = 1.0 / STEP_EPSILON

    def error(half_width: int) -> float:
        variances = np.diag(noise.discrete_ridge_variances(scale, half_width))
        return float(np.trace(gram @ rotate @ variances @ rotate.T)) * STEP_EPSILON**2 / 2.0

    return min((error(h), h) for h in range(int(noise.MAX_RIDGE_WIDTH * scale / 2) + 1))


def main() -> None:
    results = []
    for name, workload in WORKLOADS.items():
        gram = workload.T @ workload
        start = time.perf_counter()
        lp, worst_ratio = lp_optimum(gram)
        seconds = time.perf_counter() - start
        matrix = best_matrix_mechanism(gram)
        ridge, width = best_ridge(gram)
        lattice, half_width = best_lattice_ridge(gram)
        results.append({
            "workload": name, "laplace_identity": float(np.trace(gram)), "best_matrix_mechanism": matrix,
            "ridge_pair": ridge, "ridge_width": width, "lattice_ridge": lattice, "lattice_half_width": half_width,
            "lp_optimum": lp, "lp_worst_log_ratio_per_t": worst_ratio,
            "ridge_gain_%": 100 * (1 - ridge / matrix), "lp_seconds": seconds,
        })
    print(f"expected total squared error in units of 2/ε² (one Laplace variance); LP on the lattice, t = {STEP_EPSILON}, |y| ≤ {RADIUS}")
    print_table(results, list(results[0]), number_text)
    write_csv("noise_lp.csv", results)


if __name__ == "__main__":
    main()
