"""Privacy specifications for a measurement: pure ε-DP (Laplace family) or ρ-zCDP (Gaussian family).

>>> Privacy.laplace(epsilon=1.0).family, Privacy.zcdp(rho=0.5).as_zcdp()
('laplace', 0.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Privacy:
    """How much privacy one plan may spend, and which noise family it uses."""

    family: Literal["laplace", "gaussian"]
    epsilon: float | None = None
    rho: float | None = None

    def __post_init__(self) -> None:
        value = self.epsilon if self.family == "laplace" else self.rho
        name = "epsilon" if self.family == "laplace" else "rho"
        if self.family not in ("laplace", "gaussian"):
            raise ValueError(f"unknown noise family {self.family!r}; use Privacy.laplace or Privacy.zcdp")
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")

    @classmethod
    def laplace(cls, epsilon: float) -> Privacy:
        """Pure ε-differential privacy, measured with (discrete) Laplace noise."""
        return cls("laplace", epsilon=epsilon)

    @classmethod
    def zcdp(cls, rho: float) -> Privacy:
        """ρ-zero-concentrated differential privacy, measured with (discrete) Gaussian noise."""
        return cls("gaussian", rho=rho)

    @property
    def is_laplace(self) -> bool:
        return self.family == "laplace"

    def as_zcdp(self) -> float:
        """The zCDP cost ρ (ε-DP implies ε²/2-zCDP)."""
        return self.epsilon**2 / 2 if self.is_laplace else self.rho

    def scaled(self, fraction: float) -> Privacy:
        """The same family with a fraction of this budget (sequential composition splits)."""
        if self.is_laplace:
            return Privacy.laplace(self.epsilon * fraction)
        return Privacy.zcdp(self.rho * fraction)

    def __str__(self) -> str:
        return f"{self.epsilon:g}-DP (Laplace)" if self.is_laplace else f"{self.rho:g}-zCDP (Gaussian)"
