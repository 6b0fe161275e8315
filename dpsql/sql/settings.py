"""A statement's cost written in SQL, read the same way at every entry point.

Three spellings, all optional:

* a comment anywhere in the statement: ``/* dpsql: epsilon=0.2 */ SELECT …`` (also ``rho=…``,
  ``non_negative=on``; several separated by commas), or the same as an optimizer hint, ``/*+ dpsql: … */``,
  which survives tools that strip comments before sending a statement (jupysql's ``%sql`` does);
* Google's differential-privacy SQL: ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=…, delta=…,
  privacy_unit_column=…, max_groups_contributed=…) …`` (:mod:`dpsql.sql.dialect` reads the options);
* a session setting: ``SET dpsql.epsilon = 0.2`` (``RESET dpsql.epsilon``, ``SHOW dpsql.epsilon``), the
  default of every later statement of the connection (or of the served session).

What a statement says of its own cost comes before the session's setting, which comes before the
connection's ``default_epsilon``. A cost given both in the call (``execute(sql, epsilon=…)``, SQLAlchemy's
``dpsql_epsilon`` option) and, differently, in the text is refused: the statement would not say what it
costs.

>>> cost_comment("/* dpsql: epsilon=0.25 */ SELECT COUNT(*) FROM t")
{'epsilon': '0.25'}
>>> cost_comment("SELECT COUNT(*) FROM t -- /* dpsql: epsilon=9 */")
{}
>>> setting_command("SET dpsql.epsilon TO 0.5")
SettingCommand(action='set', name='epsilon', value='0.5')
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql.text import segments

SETTINGS = ("epsilon", "rho", "non_negative", "errors")  # errors: dpsql serve's <column>_stderr columns
COST_SETTINGS = ("epsilon", "rho", "non_negative")  # what a connection's statements take from their text
TRUE_WORDS, FALSE_WORDS = frozenset({"on", "true", "t", "yes", "1"}), frozenset({"off", "false", "f", "no", "0"})
_COMMENT = re.compile(r"/\*\+?\s*dpsql\s*:(?P<body>.*?)\*/$", re.IGNORECASE | re.DOTALL)
_ASSIGNMENT = re.compile(r"^\s*(?P<name>\w+)\s*=\s*(?P<value>[^\s,]+)\s*$")
_SET = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?dpsql\.(\w+)\s*(?:=|TO)\s*(.+?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_RESET = re.compile(r"^\s*RESET\s+dpsql\.(\w+)\s*;?\s*$", re.IGNORECASE)
_SHOW = re.compile(r"^\s*SHOW\s+dpsql\.(\w+)\s*;?\s*$", re.IGNORECASE)
GOOGLE_OPTIONS = ("epsilon", "delta", "privacy_unit_column", "max_groups_contributed")


def cost_comment(sql: str) -> dict[str, str]:
    """The settings of the statement's ``/* dpsql: name=value, ... */`` block comment (or ``/*+ dpsql: … */``
    hint), never one inside a string or a ``--`` comment (none: ``{}``)."""
    comments = (sql[start:end] for start, end, is_code in segments(sql) if not is_code and sql.startswith("/*", start))
    match = next((m for m in map(_COMMENT.match, comments) if m is not None), None)
    if match is None:
        return {}
    found: dict[str, str] = {}
    for item in match.group("body").split(","):
        assignment = _ASSIGNMENT.match(item)
        if assignment is None or assignment.group("name").lower() not in SETTINGS:
            raise ProgrammingError(
                f"cannot read the dpsql comment {match.group(0)!r}: write /* dpsql: epsilon=0.1 */ "
                f"(settings: {', '.join(SETTINGS)}, separated by commas)"
            )
        found[assignment.group("name").lower()] = assignment.group("value")
    return found


@dataclass(frozen=True)
class SettingCommand:
    """``SET dpsql.<name> = <value>`` (``value`` None: ``DEFAULT``), ``RESET dpsql.<name>`` or ``SHOW dpsql.<name>``."""

    action: str  # "set", "reset" or "show"
    name: str  # lower case; "budget" only for SHOW
    value: str | None = None


def setting_command(sql: object) -> SettingCommand | None:
    """The dpsql setting a statement sets, resets or shows; None for any other statement."""
    if not isinstance(sql, str):
        return None
    if match := _SET.match(sql):
        value = match.group(2).strip().strip("'\"")
        return SettingCommand("set", match.group(1).lower(), None if value.upper() == "DEFAULT" else value)
    if match := _RESET.match(sql):
        return SettingCommand("reset", match.group(1).lower())
    if match := _SHOW.match(sql):
        return SettingCommand("show", match.group(1).lower())
    return None


def positive(text: object, name: str) -> float:
    """A cost setting's value: a positive finite number."""
    try:
        number = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise ProgrammingError(f"dpsql.{name} must be a positive number, got {text!r}")
    return number


def boolean(text: object, name: str) -> bool:
    """An on/off setting's value."""
    lowered = str(text).strip().lower()
    if lowered in TRUE_WORDS | FALSE_WORDS:
        return lowered in TRUE_WORDS
    raise ProgrammingError(f"{name} must be on or off, got {text!r}")


@dataclass(frozen=True)
class TextCost:
    """What a statement's text says about its cost (each None when it says nothing), and where it says it."""

    epsilon: float | None = None
    rho: float | None = None
    non_negative: bool | None = None
    delta: float | None = None  # Google's OPTIONS(delta=…): the most δ the statement may spend (key selection)
    where: str = ""

    @property
    def given(self) -> bool:
        return self.epsilon is not None or self.rho is not None

    @staticmethod
    def from_values(values: Mapping[str, str], where: str) -> TextCost:
        """Settings read as text (a comment's, or a session's ``SET dpsql.*``), checked."""
        for name in values:
            if name not in SETTINGS:
                raise ProgrammingError(f"unknown setting dpsql.{name}; dpsql has {', '.join(SETTINGS)}")
        values = {name: value for name, value in values.items() if name in COST_SETTINGS}  # errors: the server's
        if "epsilon" in values and "rho" in values:
            raise ProgrammingError(f"{where} gives both epsilon and rho: give one")
        return TextCost(
            positive(values["epsilon"], "epsilon") if "epsilon" in values else None,
            positive(values["rho"], "rho") if "rho" in values else None,
            boolean(values["non_negative"], "dpsql.non_negative") if "non_negative" in values else None,
            where=where,
        )

    def before(self, other: TextCost) -> TextCost:
        """This cost where it says one, else ``other``'s (a statement's own before the session's)."""
        cost = (self.epsilon, self.rho, self.where) if self.given else (other.epsilon, other.rho, other.where)
        non_negative = self.non_negative if self.non_negative is not None else other.non_negative
        return TextCost(cost[0], cost[1], non_negative, self.delta if self.delta is not None else other.delta, cost[2])


def google_options(options: Mapping[str, exp.Expression]) -> tuple[TextCost, tuple[tuple[str, str], ...]]:
    """Google's ``OPTIONS(…)``: the cost they give (``epsilon``; without it the cost comes from the call, ``SET
    dpsql.epsilon`` or the default, as for any statement), and the options prepare checks against the table's
    schema (``privacy_unit_column``, ``max_groups_contributed``) as (name, value) pairs."""
    unknown = [name for name in options if name not in GOOGLE_OPTIONS]
    if unknown:
        raise NotSupportedError(
            f"WITH DIFFERENTIAL_PRIVACY OPTIONS: {unknown[0]} is not supported; dpsql reads {', '.join(GOOGLE_OPTIONS)} "
            "(contribution bounds and group selection come from the table's schema)"
        )
    numbers = {name: _number(options[name], name) for name in ("epsilon", "delta", "max_groups_contributed") if name in options}
    epsilon = positive(numbers["epsilon"], "epsilon") if "epsilon" in numbers else None  # None: the cost is given elsewhere
    delta = numbers.get("delta")
    if delta is not None and not 0 <= delta < 1:
        raise ProgrammingError(f"WITH DIFFERENTIAL_PRIVACY OPTIONS: delta must lie in [0, 1), got {delta!r}")
    checks: list[tuple[str, str]] = []
    if "privacy_unit_column" in options:
        unit = options["privacy_unit_column"]
        if not isinstance(unit, (exp.Column, exp.Identifier)) and not (isinstance(unit, exp.Literal) and unit.is_string):
            raise ProgrammingError("WITH DIFFERENTIAL_PRIVACY OPTIONS: privacy_unit_column must name a column, e.g. privacy_unit_column = person_id")
        checks.append(("privacy_unit_column", unit.name if not isinstance(unit, exp.Literal) else str(unit.this)))
    if "max_groups_contributed" in numbers:
        groups = numbers["max_groups_contributed"]
        if not float(groups).is_integer() or groups < 1:
            raise ProgrammingError(f"WITH DIFFERENTIAL_PRIVACY OPTIONS: max_groups_contributed must be a positive integer, got {groups!r}")
        checks.append(("max_groups_contributed", str(int(groups))))
    return TextCost(epsilon=epsilon, delta=delta, where="WITH DIFFERENTIAL_PRIVACY OPTIONS"), tuple(checks)


def _number(node: exp.Expression, name: str) -> float:
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        try:
            value = float(str(inner.this))
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return -value if negative else value
    raise ProgrammingError(f"WITH DIFFERENTIAL_PRIVACY OPTIONS: {name} must be a number, got {node.sql(dialect='duckdb')[:40]!r}")
