"""One client connection of an authenticated analyst: its statements through dpsql's public API.

A statement takes this path (every step before the last reads no data):

1. the middleware answers what is not a question about data — ``SET``/``SHOW dpsql.*``, transaction
   control, ``version()``, the ``information_schema``/``pg_catalog`` queries of clients (from the served
   tables' column names and types only);
2. Bind/Describe: the statement runs on the *replica* (empty tables of the same schema, see
   :mod:`dpsql.serve.tables`), which gives its typed columns and refuses bad SQL, unsupported SQL and
   bad costs before anything is read;
3. Execute: ``cursor.execute(sql, params, epsilon=..., rho=...)`` on the analyst's own dpsql
   connection — the engine's one pipeline, which charges the analyst's durable ledger before it
   releases a value — and the rows go out typed as Describe said.

Blocking work runs in the server's thread pool, one job at a time per session: a cancelled or
abandoned statement keeps running to its end (charged by the engine's rule if it read data) before the
session starts another or closes.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pg_mimic import BOOL, FLOAT8, INT8, TEXT, PgError, Portal, ResultColumn, Session, Statement, StaticStatement, messages
from pg_mimic.middleware import DEFAULT_MIDDLEWARE, MiddlewareContext, resolve, static_select
from pg_mimic.session import drain_rows
from pg_mimic.stream import ConnectionClosed
from sqlglot import exp

import dpsql
from dpsql.explain import DESCRIPTION as EXPLAIN_DESCRIPTION
from dpsql.serve.sqlstate import INVALID_PARAMETER_VALUE, as_pg_error
from dpsql.serve.sqltext import SETTINGS, cost_comment, has_parameters, inline_parameters, placeholders_to_qmark, tables_named

if TYPE_CHECKING:
    from dpsql.serve.server import Service

T = TypeVar("T")
DESCRIPTIONS_KEPT = 256  # statement texts whose columns a session remembers
_INTEGER_OIDS = {20, 21, 23, 26}  # int8, int2, int4, oid
_FLOAT_OIDS = {700, 701, 1700}  # float4, float8, numeric
_CATALOG = re.compile(r"\b(pg_catalog|information_schema)\s*\.", re.IGNORECASE)
_CATALOG_NAME = re.compile(r"\b(pg_\w+|information_schema)\b", re.IGNORECASE)
_DATA_QUERY = re.compile(r"^\s*(/\*.*?\*/\s*)*(SELECT|WITH|EXPLAIN)\b(?=.*\bFROM\b)", re.IGNORECASE | re.DOTALL)
_TRUE, _FALSE = {"on", "true", "t", "yes", "1"}, {"off", "false", "f", "no", "0"}


class AnalystSession(Session):
    """pg-mimic's session for one client connection; ``service`` holds what all sessions share."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.analyst: Any = None
        self.engines: Any = None
        self.settings: dict[str, str] = {}  # SET dpsql.<name>
        self._descriptions: OrderedDict[str, list[ResultColumn]] = OrderedDict()
        self._busy: asyncio.Future[Any] | None = None

    async def init(self, connection: Any) -> None:
        await super().init(connection)
        self.analyst = self.service.analysts[connection.username]  # authentication passed: a configured analyst
        try:
            self.engines = await self.blocking(self.service.tables.open, self.analyst, self.service.ledger_path(self.analyst))
        except Exception as error:  # tell the client why, then hang up
            problem = as_pg_error(error)
            connection.stream.write(messages.make_error_response({"S": "FATAL", "V": "FATAL", "C": problem.sqlstate, "M": problem.message}))
            await connection.stream.drain()
            raise ConnectionClosed from error
        self.service.sessions.add(self)

    async def schema(self) -> dict[str, dict[str, str]]:
        return self.service.catalog

    async def prepare(self, sql: str, param_oids: list[int | None]) -> Statement:
        if _CATALOG.search(sql) and has_parameters(sql):
            return ParameterisedCatalog(self, sql, param_oids)
        if _DATA_QUERY.match(sql) and not _CATALOG_NAME.search(sql):  # dpsql's, no need to parse it for the middleware
            return DpsqlStatement(self, sql, param_oids)
        answered = await resolve(self._connection, sql, param_oids, self.middleware)
        return answered if answered is not None else DpsqlStatement(self, sql, param_oids)

    async def close(self) -> None:
        if self.running is not None:
            await asyncio.wait([self.running])
        if self.engines is not None:
            engines, self.engines = self.engines, None
            await asyncio.get_running_loop().run_in_executor(self.service.executor, engines.close)
        self.service.sessions.discard(self)

    @property
    def running(self) -> asyncio.Future[Any] | None:
        """The job this session has in the thread pool, if one is still running."""
        return self._busy if self._busy is not None and not self._busy.done() else None

    async def blocking(self, function: Callable[..., T], *arguments: object) -> T:
        """``function(*arguments)`` in the server's thread pool, after this session's previous job."""
        if self.running is not None:
            await asyncio.wait([self.running])
        self._busy = asyncio.get_running_loop().run_in_executor(self.service.executor, function, *arguments)
        try:
            return await asyncio.shield(self._busy)
        except (dpsql.Error, PgError) as error:
            raise error if isinstance(error, PgError) else as_pg_error(error) from None
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - nothing but a PgError may reach the client
            raise as_pg_error(error) from None

    # -- statements ---------------------------------------------------------------------------------
    def _options(self, sql: str) -> dict[str, object]:
        """The keyword arguments of ``cursor.execute``: the statement's comment, else SET dpsql.*, else
        the analyst's defaults (the connection's ``default_epsilon``)."""
        comment = cost_comment(sql)
        chosen = {**self.settings, **comment}
        if "epsilon" in comment:
            chosen.pop("rho", None)
        elif "rho" in comment:
            chosen.pop("epsilon", None)
        options: dict[str, object] = {}
        for name in ("epsilon", "rho"):
            if name in chosen:
                options[name] = _positive(chosen[name], name)
        if "non_negative" in chosen:
            options["non_negative"] = _boolean(chosen["non_negative"], "non_negative")
        return options

    def _execute(self, connection: dpsql.Connection, sql: str, parameters: Sequence[object] | None) -> dpsql.Cursor:
        text, order = placeholders_to_qmark(sql)
        bound = [parameters[i] if parameters is not None and i < len(parameters) else None for i in order] if order else None
        cursor = connection.cursor()
        cursor.execute(text, bound, **self._options(sql))  # type: ignore[arg-type]
        return cursor

    async def describe(self, sql: str, parameters: Sequence[object] | None) -> list[ResultColumn]:
        """The statement's typed columns, from the replica (reads nothing, spends nothing real)."""
        known = self._descriptions.get(sql)
        if known is None:
            known = await self.blocking(self._describe_now, sql, parameters)
            self._descriptions[sql] = known
            while len(self._descriptions) > DESCRIPTIONS_KEPT:
                self._descriptions.popitem(last=False)
        return known

    def _describe_now(self, sql: str, parameters: Sequence[object] | None) -> list[ResultColumn]:
        cursor = self._execute(self.engines.replica, sql, parameters)
        return result_columns(*served(cursor))

    async def run(self, sql: str, parameters: Sequence[object] | None, columns: list[ResultColumn]) -> list[tuple[object, ...]]:
        """The released rows, typed as ``columns`` (the replica's description of the same statement)."""
        return await self.blocking(self._run_now, sql, parameters, columns)

    def _run_now(self, sql: str, parameters: Sequence[object] | None, columns: list[ResultColumn]) -> list[tuple[object, ...]]:
        engines = self.engines
        connection = engines.data[0][0] if len(engines.data) == 1 else engines.for_tables(tables_named(sql))
        cursor = self._execute(connection, sql, parameters)
        # released and charged: from here on nothing may fail
        return [tuple(_typed(value, column.oid) for value, column in zip(row, columns)) for row in served(cursor)[1]]

    def remaining(self) -> dpsql.Remaining:
        return self.engines.data[0][0].budget_remaining()


class DpsqlStatement(Statement):
    """A statement for dpsql. pg-mimic binds a portal and then asks the statement for its columns
    (``bind`` then ``describe``), so ``describe`` uses the parameters bound last; a Describe before any
    Bind describes it with NULL parameters."""

    def __init__(self, session: AnalystSession, sql: str, param_oids: list[int | None]) -> None:
        self.session = session
        self.sql = sql
        self.param_oids = param_oids
        self._bound: list[object] | None = None

    async def describe(self) -> list[ResultColumn] | None:
        return await self.session.describe(self.sql, self._bound)

    def bind(self, params: list[str | None]) -> Portal:
        self._bound = [_parameter(value, self.param_oids[i] if i < len(self.param_oids) else None) for i, value in enumerate(params)]
        return DpsqlPortal(self, self._bound)


class ParameterisedCatalog(Statement):
    """A catalog query with ``$n`` parameters (SQLAlchemy's reflection sends them): the middleware
    answers catalog queries from their text, so the bound values are written into it as literals."""

    def __init__(self, session: AnalystSession, sql: str, param_oids: list[int | None]) -> None:
        self.session, self.sql, self.param_oids = session, sql, param_oids
        self._bound: list[str | None] = [None] * len(param_oids)  # pg-mimic describes right after a bind

    async def answer(self, params: list[str | None]) -> Statement:
        literals = [_literal(value, self.param_oids[i] if i < len(self.param_oids) else None) for i, value in enumerate(params)]
        answer = await resolve(self.session._connection, inline_parameters(self.sql, literals), [], self.session.middleware)
        if answer is None:
            raise PgError("0A000", "dpsql answers parameterised statements on pg_catalog and information_schema only as catalog queries")
        return answer

    async def describe(self) -> list[ResultColumn] | None:
        return await (await self.answer(self._bound)).describe()

    def bind(self, params: list[str | None]) -> Portal:
        self._bound = params
        return _CatalogPortal(self, params)


class _CatalogPortal(Portal):
    def __init__(self, statement: ParameterisedCatalog, params: list[str | None]) -> None:
        self.statement, self.params = statement, params
        self._portal: Portal | None = None

    async def execute(self, max_rows: int) -> tuple[list[tuple[object, ...]], bool]:
        if self._portal is None:
            self._portal = (await self.statement.answer(self.params)).bind([])
        return await self._portal.execute(max_rows)


def _literal(value: object, oid: int | None) -> str:
    if value is None:
        return "NULL"
    if oid in _INTEGER_OIDS | _FLOAT_OIDS and re.fullmatch(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?", str(value)):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


class DpsqlPortal(Portal):
    def __init__(self, statement: DpsqlStatement, parameters: list[object]) -> None:
        self.statement = statement
        self.parameters = parameters
        self._rows: Any = None

    async def execute(self, max_rows: int) -> tuple[list[tuple[object, ...]], bool]:
        if self._rows is None:
            session = self.statement.session
            columns = await session.describe(self.statement.sql, self.parameters)
            released = await session.run(self.statement.sql, self.parameters, columns)
            self._rows = _iterate(released)
        return await drain_rows(self._rows, max_rows)


async def _iterate(rows: list[tuple[object, ...]]) -> Any:
    for row in rows:
        yield row


QUERY_PLAN = (("QUERY PLAN", dpsql.STRING, None, None, None, None, False),)


def served(cursor: dpsql.Cursor) -> tuple[Sequence[Sequence[object]], list[tuple[object, ...]]]:
    """The description and rows a client gets: the cursor's, but an EXPLAIN is one text column ``QUERY
    PLAN`` of lines ``section: name = value — detail``, as PostgreSQL's own EXPLAIN, so psql shows it
    line by line instead of a four-column table as wide as its longest detail."""
    if tuple(cursor.description or ()) == EXPLAIN_DESCRIPTION:
        return QUERY_PLAN, [(line,) for line in cursor.explanation.splitlines()]
    return cursor.description or (), cursor.fetchall()


def result_columns(description: Sequence[Sequence[object]] | None, rows: Sequence[Sequence[object]]) -> list[ResultColumn]:
    """PostgreSQL columns for a dpsql result: int8, float8, bool or text from the values the schema's
    domain produces; a column without values (an empty result) is float8 for numbers, else text."""
    columns = []
    for index, column in enumerate(description or ()):
        values = [row[index] for row in rows if row[index] is not None]
        if values and all(isinstance(v, bool) for v in values):
            oid = BOOL
        elif values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            oid = INT8
        elif values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            oid = FLOAT8
        elif values:
            oid = TEXT
        else:
            oid = FLOAT8 if column[1] == dpsql.NUMBER else TEXT
        columns.append(ResultColumn(str(column[0]), oid))
    return columns


def _typed(value: object, oid: int) -> object:
    """``value`` as its column's type; never raises (it runs after the release)."""
    if value is None:
        return None
    try:
        if oid == FLOAT8:
            return float(value)  # type: ignore[arg-type]
        if oid == INT8 and float(value) == int(value):  # type: ignore[arg-type]
            return int(value)  # type: ignore[arg-type]
        if oid == BOOL:
            return bool(value)
    except (TypeError, ValueError, OverflowError):
        pass
    return value if oid != TEXT else str(value)


def _parameter(value: object, oid: int | None) -> object:
    """A bound parameter (pg-mimic hands them over as text) as the Python value its type means."""
    if value is None or not isinstance(value, str):
        return value
    try:
        if oid in _INTEGER_OIDS:
            return int(value)
        if oid in _FLOAT_OIDS:
            number = float(value)
            return int(number) if number.is_integer() and oid == 1700 and "." not in value else number
    except ValueError as error:
        raise PgError("22P02", f"invalid number in a parameter: {value!r}") from error
    if oid == 16:
        return _boolean(value, "a boolean parameter")
    return value


def _positive(text: str, name: str) -> float:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise PgError(INVALID_PARAMETER_VALUE, f"dpsql.{name} must be a positive number, got {text!r}")
    return number


def _boolean(text: str, name: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE | _FALSE:
        return lowered in _TRUE
    raise PgError(INVALID_PARAMETER_VALUE, f"{name} must be on or off, got {text!r}")


# -- middleware: what the server answers itself -------------------------------------------------------
_SET = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?dpsql\.(\w+)\s*(?:=|TO)\s*(.+?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_RESET = re.compile(r"^\s*RESET\s+dpsql\.(\w+)\s*;?\s*$", re.IGNORECASE)
_SHOW = re.compile(r"^\s*SHOW\s+dpsql\.(\w+)\s*;?\s*$", re.IGNORECASE)
_DEALLOCATE = re.compile(r"^\s*DEALLOCATE\s+(?:PREPARE\s+)?(\w+|\"[^\"]+\")\s*;?\s*$", re.IGNORECASE)
_DISCARD = re.compile(r"^\s*(?:DISCARD\s+(?:ALL|PLANS|SEQUENCES|TEMP|TEMPORARY)|RESET\s+ALL)\s*;?\s*$", re.IGNORECASE)
_TRANSACTION = re.compile(r"^\s*SET\s+(?:SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\b.*$", re.IGNORECASE | re.DOTALL)
_SAVEPOINT = re.compile(r"^\s*(SAVEPOINT|RELEASE|ROLLBACK\s+TO)\b", re.IGNORECASE)
_SHOW_ISOLATION = re.compile(r"^\s*SHOW\s+(?:TRANSACTION\s+ISOLATION\s+LEVEL|transaction_isolation|default_transaction_isolation)\s*;?\s*$", re.IGNORECASE)
_BUDGET_COLUMNS = [ResultColumn("epsilon", FLOAT8), ResultColumn("delta", FLOAT8), ResultColumn("rho", FLOAT8)]


def _session(context: MiddlewareContext) -> AnalystSession:
    return context.connection.session


def _setting_name(name: str) -> str:
    lowered = name.lower()
    if lowered not in SETTINGS:
        raise PgError("42704", f'unrecognized configuration parameter "dpsql.{name}" (dpsql has {", ".join(SETTINGS)} and budget)')
    return lowered


async def dpsql_settings(context: MiddlewareContext) -> Statement | None:
    """``SET dpsql.epsilon = 0.1`` (also ``rho``, ``non_negative``), ``RESET dpsql.x``, ``SHOW dpsql.x``
    and ``SHOW dpsql.budget`` (what is left: ε, δ, ρ)."""
    session = _session(context)
    if match := _SET.match(context.sql):
        name, value = _setting_name(match.group(1)), match.group(2).strip().strip("'\"")
        if value.upper() == "DEFAULT":
            return StaticStatement(context.sql, None, [], lambda: session.settings.pop(name, None))
        _positive(value, name) if name != "non_negative" else _boolean(value, "dpsql.non_negative")
        exclusive = {"epsilon": "rho", "rho": "epsilon"}.get(name)

        def apply() -> None:
            session.settings[name] = value
            session.settings.pop(exclusive or "", None)

        return StaticStatement(context.sql, None, [], apply)
    if match := _RESET.match(context.sql):
        name = _setting_name(match.group(1))
        return StaticStatement(context.sql, None, [], lambda: session.settings.pop(name, None))
    if match := _SHOW.match(context.sql):
        if match.group(1).lower() == "budget":
            return _Computed(context.sql, _BUDGET_COLUMNS, session, lambda: [_budget_row(session.remaining())])
        name = _setting_name(match.group(1))
        default = {"epsilon": session.analyst.default_epsilon, "non_negative": "off"}.get(name)
        value = session.settings.get(name, "" if default is None else str(default))
        return StaticStatement(context.sql, [ResultColumn(f"dpsql.{name}", TEXT)], [(value,)])
    return None


async def housekeeping(context: MiddlewareContext) -> Statement | None:
    """What drivers send around statements: ``DEALLOCATE`` (psycopg, JDBC), ``DISCARD ALL`` and ``RESET ALL``
    (pools), savepoints (psycopg), ``SET TRANSACTION ...`` and ``SHOW transaction isolation level`` (SQLAlchemy)."""
    connection = context.connection
    if match := _DEALLOCATE.match(context.sql):
        name = match.group(1).strip('"')
        if name.upper() == "ALL":
            return StaticStatement(context.sql, None, [], connection.statements.clear)
        return StaticStatement(context.sql, None, [], lambda: connection.statements.pop(name, None))
    if match := _SAVEPOINT.match(context.sql):  # psycopg's nested transactions; nothing to undo in a read-only session
        if match.group(1).upper().startswith("ROLLBACK"):
            return StaticStatement(context.sql, None, [], lambda: setattr(connection, "tx_status", b"T"))
        return StaticStatement(context.sql, None, [])
    if _TRANSACTION.match(context.sql):  # dpsql only reads: every isolation level is the same here
        return StaticStatement(context.sql, None, [])
    if _SHOW_ISOLATION.match(context.sql):
        return StaticStatement(context.sql, [ResultColumn("transaction_isolation", TEXT)], [("read committed",)])
    if _DISCARD.match(context.sql):
        session = _session(context)
        return StaticStatement(context.sql, None, [], session.settings.clear)
    return None


_VERSION = re.compile(r"^\s*SELECT\s+(?:pg_catalog\.)?version\s*\(\s*\)\s*(?:AS\s+(\w+)\s*)?;?\s*$", re.IGNORECASE)
VERSION = "PostgreSQL 16.0 (dpsql serve: differentially private SQL; only SELECT ... COUNT ... GROUP BY statements)"


async def server_version(context: MiddlewareContext) -> Statement | None:
    """``SELECT version()`` in PostgreSQL's form (clients such as SQLAlchemy read the version from it)."""
    match = _VERSION.match(context.sql)
    if match is None:
        return None
    return StaticStatement(context.sql, [ResultColumn(match.group(1) or "version", TEXT)], [(VERSION,)])


_QUALIFIED = re.compile(r"\bpg_catalog\.(?=\w+\s*\()", re.IGNORECASE)


async def qualified_functions(context: MiddlewareContext) -> Statement | None:
    """A table-less SELECT of ``pg_catalog.version()`` and the like (SQLAlchemy sends it on connect):
    answered as the same SELECT without the qualifier."""
    if context.select_without_tables() is None or not _QUALIFIED.search(context.sql):
        return None
    plain = _QUALIFIED.sub("", context.sql)
    return await resolve(context.connection, plain, context.param_oids, (*DEFAULT_MIDDLEWARE, static_select))


async def catalog_arrays(context: MiddlewareContext) -> Statement | None:
    """``x = ANY (ARRAY[...])`` in a catalog query (SQLAlchemy's reflection) as ``x IN (...)``, which the
    catalog's evaluator runs."""
    expression = context.expression
    if expression is None or not _CATALOG.search(context.sql):
        return None
    rewritten = expression.copy()
    for node in list(rewritten.find_all(exp.Any)):
        inner = node.this.this if isinstance(node.this, exp.Paren) else node.this
        if isinstance(node.parent, exp.EQ) and isinstance(inner, exp.Array):
            node.parent.replace(exp.In(this=node.parent.this, expressions=list(inner.expressions)))
    if rewritten == expression:
        return None
    return await resolve(context.connection, rewritten.sql(dialect="postgres"), context.param_oids, DEFAULT_MIDDLEWARE)


def _budget_row(remaining: dpsql.Remaining) -> tuple[float, float, float]:
    return (float(remaining.epsilon), float(remaining.delta), float(remaining.rho))


class _Computed(Statement):
    """A statement whose rows are computed when it is executed (in the thread pool)."""

    def __init__(self, sql: str, columns: list[ResultColumn], session: AnalystSession, rows: Callable[[], list[tuple[object, ...]]]) -> None:
        self.sql, self.param_oids, self._columns, self._session, self._rows = sql, [], columns, session, rows

    async def describe(self) -> list[ResultColumn] | None:
        return self._columns

    def bind(self, params: list[str | None]) -> Portal:
        statement = self

        class _Portal(Portal):
            rows: Any = None

            async def execute(self, max_rows: int) -> tuple[list[tuple[object, ...]], bool]:
                if self.rows is None:
                    self.rows = _iterate(await statement._session.blocking(statement._rows))
                return await drain_rows(self.rows, max_rows)

        return _Portal()


AnalystSession.middleware = (dpsql_settings, housekeeping, server_version, qualified_functions, catalog_arrays, *DEFAULT_MIDDLEWARE, static_select)
