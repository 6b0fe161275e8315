"""Workload non-negative least squares (McKenna et al. 2020, Appendix A): consistent, lower-variance answers.

The unbiased estimates `a = V y` may be inconsistent with any real data vector (negative counts).
`min_{x ≥ 0} ‖W x − a‖²` (L-BFGS-B with bounds) finds the closest non-negative data vector; its
workload answers `W x̂` are biased but usually have much lower error when data is scarce.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize


def non_negative_data_vector(W: np.ndarray, estimates: np.ndarray) -> np.ndarray:
    """`argmin_{x ≥ 0} ‖W x − estimates‖²`."""
    gram = W.T @ W
    target = W.T @ estimates

    def loss_and_gradient(x: np.ndarray) -> tuple[float, np.ndarray]:
        gram_x = gram @ x
        return float(0.5 * x @ gram_x - target @ x), gram_x - target

    start = np.maximum(np.linalg.lstsq(W, estimates, rcond=None)[0], 0.0)
    result = scipy.optimize.minimize(
        loss_and_gradient, start, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * W.shape[1],
        options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-10},
    )
    return np.maximum(result.x, 0.0)


def non_negative_answers(W: np.ndarray, estimates: np.ndarray) -> np.ndarray:
    """The workload answers `W x̂` of the non-negative least-squares data vector `x̂`."""
    return W @ non_negative_data_vector(W, estimates)
