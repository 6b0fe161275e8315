"""The server's configuration: tables, analysts, budgets, TLS (a YAML file; see docs/serve.md).

::

    port: 5433
    tls: {certificate: server.crt, key: server.key}      # optional; then clients must use TLS
    ledgers: ledgers/                                      # one ledger file per analyst or group ("memory": none kept)
    tables:
      census: {source: census.parquet, schema: census.yaml}            # a data file, loaded into DuckDB
      visits: {source: "postgresql://reader@db/clinic", table: visits, schema: visits.yaml}
    groups:
      research: {budget: {epsilon: 2.0, delta: 1.0e-6}}
    analysts:
      alice: {password: "SCRAM-SHA-256$4096:...", budget: {epsilon: 1.0}, default_epsilon: 0.1}
      bob:   {password: "SCRAM-SHA-256$4096:...", group: research, noise: gaussian}

Relative paths are relative to the configuration file. Every mistake is a
:class:`~dpsql.errors.ProgrammingError` naming the key to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

import dpsql
from dpsql.errors import ProgrammingError
from dpsql.serve.passwords import ScramVerifier

NOISE_FAMILIES = ("laplace", "gaussian")
MEMORY = "memory"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
DUCKDB_SUFFIXES = (".duckdb", ".db")
DEFAULT_PORT = 5433
DEFAULT_WORKERS = 8

_TOP_KEYS = {"host", "port", "tls", "ledgers", "tables", "groups", "analysts", "workers", "limits"}
_LIMIT_KEYS = {"connections", "statements_per_analyst", "statement_seconds", "login_seconds"}
_TABLE_KEYS = {"source", "table", "schema"}
_ANALYST_KEYS = {"password", "budget", "group", "noise", "default_epsilon"}
_GROUP_KEYS = {"budget"}
_TLS_KEYS = {"certificate", "key"}


@dataclass(frozen=True)
class TableConfig:
    """A served table: ``source`` is a data file, a DuckDB database file, or a PostgreSQL URL;
    ``relation`` its table in that database; ``schema`` the dpsql schema (a dict, or a file path)."""

    name: str
    source: object
    relation: str
    schema: object

    @property
    def kind(self) -> str:
        """``"postgresql"``, ``"duckdb"`` (a database file), ``"file"`` (a data file) or ``"frame"`` (columns
        in memory, as the demo serves them); files and frames are loaded into the server's own DuckDB."""
        if isinstance(self.source, str) and self.source.startswith(POSTGRES_SCHEMES):
            return "postgresql"
        if isinstance(self.source, Path):
            return "duckdb" if self.source.suffix.lower() in DUCKDB_SUFFIXES else "file"
        return "frame"


@dataclass(frozen=True)
class Analyst:
    """One login: the budget it spends (its own, or its group's) and how its statements are noised."""

    name: str
    verifier: ScramVerifier
    budget: dpsql.Budget
    ledger: str  # the account name: analyst name, or "group-<name>" for a shared budget
    noise: str = "laplace"
    default_epsilon: float | None = None


@dataclass(frozen=True)
class Limits:
    """What keeps one analyst or client from stalling the others (docs/serve.md, "Limits")."""

    connections: int = 100  # open client connections, logged in or not; more are refused (53300)
    statements_per_analyst: int = 2  # of one analyst's statements, how many run at once (the rest wait)
    statement_seconds: float = 60.0  # a statement not charged by then is stopped, uncharged (57014)
    login_seconds: float = 15.0  # a connection not logged in by then is closed


@dataclass(frozen=True)
class TLSConfig:
    certificate: Path
    key: Path


@dataclass(frozen=True)
class ServeConfig:
    tables: tuple[TableConfig, ...]
    analysts: dict[str, Analyst]
    ledgers: Path | None  # None: kept in a temporary directory removed at shutdown
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tls: TLSConfig | None = None
    workers: int = DEFAULT_WORKERS
    limits: Limits = Limits()

    @classmethod
    def load(cls, path: str | Path) -> ServeConfig:
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as error:
            raise ProgrammingError(f"cannot read the server configuration {str(path)!r}: {error}") from error
        except yaml.YAMLError as error:
            raise ProgrammingError(f"the server configuration {str(path)!r} is not valid YAML: {error}") from error
        return cls.from_dict(raw, base=path.parent)

    @classmethod
    def from_dict(cls, raw: object, base: Path = Path(".")) -> ServeConfig:
        top = _mapping(raw, "the configuration")
        _known(top, _TOP_KEYS, "the configuration")
        tables = tuple(_table(name, spec, base) for name, spec in _mapping(top.get("tables"), "tables").items())
        if not tables:
            raise ProgrammingError("tables: serve at least one table, e.g. tables: {census: {source: census.csv, schema: census.yaml}}")
        groups = {
            str(name): _budget(_known(_mapping(spec, f"groups.{name}"), _GROUP_KEYS, f"groups.{name}").get("budget"), f"groups.{name}.budget")
            for name, spec in _mapping(top.get("groups", {}), "groups").items()
        }
        analysts = {
            str(name): _analyst(str(name), spec, groups)
            for name, spec in _mapping(top.get("analysts"), "analysts").items()
        }
        if not analysts:
            raise ProgrammingError("analysts: name at least one analyst (anonymous access is never allowed)")
        ledgers = top.get("ledgers", "ledgers")
        tls = top.get("tls")
        return cls(
            tables=tables,
            analysts=analysts,
            ledgers=None if ledgers == MEMORY else base / str(ledgers),
            host=str(top.get("host", "127.0.0.1")),
            port=_port(top.get("port", DEFAULT_PORT)),
            tls=None if tls is None else _tls(tls, base),
            workers=_positive_int(top.get("workers", DEFAULT_WORKERS), "workers"),
            limits=_limits(top.get("limits", {})),
        )


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ProgrammingError(f"{where} must be a mapping (name: settings), got {type(value).__name__}")
    return value


def _known(spec: Mapping[str, object], allowed: set[str], where: str) -> Mapping[str, object]:
    unknown = sorted(set(map(str, spec)) - allowed)
    if unknown:
        raise ProgrammingError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    return spec


def _table(name: object, spec: object, base: Path) -> TableConfig:
    where = f"tables.{name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise ProgrammingError(f"{where}: a table name must be a plain identifier")
    spec = _known(_mapping(spec, where), _TABLE_KEYS, where)
    if "source" not in spec or "schema" not in spec:
        raise ProgrammingError(f"{where}: give source (a data file, a .duckdb file or a postgresql:// URL) and schema")
    source = str(spec["source"])
    schema = spec["schema"]
    return TableConfig(
        name=name,
        source=source if source.startswith(POSTGRES_SCHEMES) else base / source,
        relation=str(spec.get("table", name)),
        schema=schema if isinstance(schema, Mapping) else base / str(schema),
    )


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ProgrammingError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _budget(spec: object, where: str) -> dpsql.Budget:
    """``{epsilon, delta}`` or ``{rho, delta}``: a ρ-zCDP budget is stored as the (ε, δ) it converts to
    (ε = ρ + 2·sqrt(ρ·ln(1/δ))), whose ``Budget.rho`` is ρ again."""
    spec = _known(_mapping(spec, where), {"epsilon", "delta", "rho"}, where)
    delta = float(spec.get("delta", 0.0))  # type: ignore[arg-type]
    if ("epsilon" in spec) == ("rho" in spec):
        raise ProgrammingError(f"{where}: give epsilon (with an optional delta) or rho (with delta), not both")
    if "rho" in spec:
        rho = _number(spec["rho"], f"{where}.rho")
        if not 0 < delta < 1:
            raise ProgrammingError(f"{where}: a rho budget needs a delta in (0, 1), e.g. delta: 1.0e-6")
        return dpsql.Budget(rho + 2 * math.sqrt(rho * math.log(1 / delta)), delta)
    return dpsql.Budget(_number(spec["epsilon"], f"{where}.epsilon"), delta)


def _analyst(name: str, spec: object, groups: dict[str, dpsql.Budget]) -> Analyst:
    where = f"analysts.{name}"
    spec = _known(_mapping(spec, where), _ANALYST_KEYS, where)
    if "password" not in spec:
        raise ProgrammingError(f"{where}: give password (a verifier from `dpsql hash-password`)")
    verifier = ScramVerifier.parse(spec["password"])  # type: ignore[arg-type]
    group = spec.get("group")
    if (group is None) == ("budget" not in spec):
        raise ProgrammingError(f"{where}: give either budget (the analyst's own) or group (a budget shared under groups:)")
    if group is not None and str(group) not in groups:
        raise ProgrammingError(f"{where}.group: no group {group!r} under groups: (known: {sorted(groups)})")
    budget = groups[str(group)] if group is not None else _budget(spec["budget"], f"{where}.budget")
    noise = str(spec.get("noise", "laplace"))
    if noise not in NOISE_FAMILIES:
        raise ProgrammingError(f"{where}.noise must be one of {NOISE_FAMILIES}, got {noise!r}")
    if noise == "gaussian" and budget.delta == 0:
        raise ProgrammingError(f"{where}: Gaussian noise needs a budget with delta > 0")
    default = spec.get("default_epsilon")
    return Analyst(
        name=name,
        verifier=verifier,
        budget=budget,
        ledger=f"group-{group}" if group is not None else name,
        noise=noise,
        default_epsilon=None if default is None else _number(default, f"{where}.default_epsilon"),
    )


def _tls(spec: object, base: Path) -> TLSConfig:
    spec = _known(_mapping(spec, "tls"), _TLS_KEYS, "tls")
    if set(spec) != _TLS_KEYS:
        raise ProgrammingError("tls: give both certificate and key (PEM file paths)")
    return TLSConfig(base / str(spec["certificate"]), base / str(spec["key"]))


def _limits(spec: object) -> Limits:
    spec = _known(_mapping(spec, "limits"), _LIMIT_KEYS, "limits")
    default = Limits()
    return Limits(
        connections=_positive_int(spec.get("connections", default.connections), "limits.connections"),
        statements_per_analyst=_positive_int(spec.get("statements_per_analyst", default.statements_per_analyst), "limits.statements_per_analyst"),
        statement_seconds=_number(spec.get("statement_seconds", default.statement_seconds), "limits.statement_seconds"),
        login_seconds=_number(spec.get("login_seconds", default.login_seconds), "limits.login_seconds"),
    )


def _port(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ProgrammingError(f"port must be an integer in [0, 65535], got {value!r}")
    return value


def _positive_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProgrammingError(f"{where} must be a positive integer, got {value!r}")
    return value
