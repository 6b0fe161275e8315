"""``dpsql serve --demo``: the generated census table (as in ``dpsql demo``) for one analyst ``demo``
with a fresh random password, a budget of ε = 1 (δ = 1e-6, for GROUP BY on the ``browser`` column)
and a ledger that lives only as long as the server."""

from __future__ import annotations

import secrets

import dpsql
from dpsql import demo
from dpsql.serve.config import Analyst, ServeConfig, TableConfig
from dpsql.serve.passwords import ScramVerifier, hash_password

DEMO_USER = "demo"
DEMO_BUDGET = dpsql.Budget(epsilon=1.0, delta=1e-6)
DEMO_STATEMENT_EPSILON = 0.1  # the cost of a statement that names none


def demo_config(persons: int = 20_000, seed: int = 0, password: str | None = None) -> tuple[ServeConfig, str]:
    """The demo's configuration and the analyst's password (fresh and random unless given)."""
    password = password or secrets.token_urlsafe(12)
    analyst = Analyst(
        name=DEMO_USER,
        verifier=ScramVerifier.parse(hash_password(password)),
        budget=DEMO_BUDGET,
        ledger=DEMO_USER,
        default_epsilon=DEMO_STATEMENT_EPSILON,
    )
    table = TableConfig("census", demo.generate_census(persons, seed), "census", demo.DEMO_SCHEMA)
    return ServeConfig(tables=(table,), analysts={DEMO_USER: analyst}, ledgers=None), password
