"""One client connection of an authenticated analyst: what each statement is, and where it runs.

:meth:`AnalystSession.route` reads a statement's first words (never a parse) and says what it is:

* settings and client housekeeping — ``SET``/``SHOW``/``RESET`` (``dpsql.*`` and PostgreSQL's own),
  transaction control, savepoints, ``DISCARD``, ``PREPARE``/``EXECUTE``/``DEALLOCATE`` — answered by
  the session (a bad ``SET dpsql.epsilon`` value is refused at the ``SET``);
* catalog queries — ``pg_catalog``, ``information_schema``, a ``SELECT`` without ``FROM`` such as
  ``SELECT version()`` — answered by :mod:`dpsql.serve.catalog` (names, types, declared domains: never
  rows); asyncpg's type introspection by pg-mimic's answer;
* everything else goes to dpsql's one pipeline: ``pipeline.parameters`` types the placeholders,
  ``pipeline.describe`` gives the result's columns (prepare alone: nothing read, nothing charged), and
  ``pipeline.release`` charges the analyst's durable ledger before it releases anything.

Everything that can take time runs in the server's bounded thread pool (:meth:`AnalystSession.work`):
at most ``limits.statements_per_analyst`` jobs of one analyst at once, each statement within
``limits.statement_seconds``. A statement stopped (time limit, CancelRequest, shutdown) before its
charge is never charged; once charged it runs to its end and its answer is sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pg_mimic import BOOL, FLOAT8, INT8, TEXT, PgError, ResultColumn
from pg_mimic.typeinfo import TypeInfoStatement, is_typeinfo_query

import dpsql
from dpsql import pipeline
from dpsql.accountant import Cost
from dpsql.serve.sqlstate import INVALID_PARAMETER_VALUE, as_pg_error
from dpsql.serve.sqltext import first_words, mentions_catalog, placeholders_to_qmark, split_list
from dpsql.sql.settings import SETTINGS, cost_comment

if TYPE_CHECKING:
    from dpsql.result import OutputColumn
    from dpsql.serve.protocol import ClientConnection
    from dpsql.serve.server import Service

T = TypeVar("T")
DATE, TIMESTAMP, INT2, INT4, FLOAT4, NUMERIC, VARCHAR, OID = 1082, 1114, 21, 23, 700, 1700, 1043, 26
_KIND_OIDS = {"integer": INT8, "numeric": NUMERIC, "float": FLOAT8, "text": TEXT, "boolean": BOOL, "date": DATE, "timestamp": TIMESTAMP}
_INTEGER_OIDS = {INT8, INT2, INT4, OID}
_FLOAT_OIDS = {FLOAT4, FLOAT8, NUMERIC}
_TRUE, _FALSE = {"on", "true", "t", "yes", "y", "1"}, {"off", "false", "f", "no", "n", "0"}
ERROR_SUFFIX = "_stderr"
STDERR_SETTING = "errors"

# PostgreSQL settings clients read at start-up (SHOW x, current_setting('x')); SET changes them per session
PG_SETTINGS = {
    "server_version": "16.0 (dpsql)", "server_version_num": "160000", "server_encoding": "UTF8", "client_encoding": "UTF8",
    "datestyle": "ISO, MDY", "timezone": "UTC", "intervalstyle": "postgres", "integer_datetimes": "on",
    "standard_conforming_strings": "on", "search_path": '"$user", public', "extra_float_digits": "1",
    "transaction_isolation": "read committed", "default_transaction_isolation": "read committed",
    "default_transaction_read_only": "on", "transaction_read_only": "on", "max_identifier_length": "63",
    "is_superuser": "off", "application_name": "", "lc_messages": "C", "lc_monetary": "C", "lc_numeric": "C",
    "lc_time": "C", "lc_collate": "C", "lc_ctype": "C", "statement_timeout": "0", "bytea_output": "hex",
    "max_connections": "100", "block_size": "8192", "jit": "off", "ssl": "off", "session_authorization": "",
}
_SHOW_NAMES = {"time zone": "timezone", "transaction isolation level": "transaction_isolation"}
REPORTED = ("application_name", "client_encoding", "datestyle", "timezone", "is_superuser", "session_authorization")

_SET = re.compile(r"^SET\s+(?:SESSION\s+|LOCAL\s+)?(?P<name>[\w.]+|\"[^\"]+\")\s*(?:=|\bTO\b)\s*(?P<value>.*?)\s*;?\s*$", re.I | re.S)
_SET_TIME_ZONE = re.compile(r"^SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(?P<value>.*?)\s*;?\s*$", re.I | re.S)
_SET_ANY = re.compile(r"^SET\s+(?:SESSION\s+CHARACTERISTICS\s+AS\s+|SESSION\s+|LOCAL\s+)?(TRANSACTION|NAMES|ROLE|SESSION\s+AUTHORIZATION|SCHEMA)\b", re.I)
_RESET = re.compile(r"^RESET\s+(?P<name>[\w.]+|ALL)\s*;?\s*$", re.I)
_SHOW = re.compile(r"^SHOW\s+(?P<name>[\w.]+(?:\s+[\w.]+)*?|ALL)\s*;?\s*$", re.I)
_PREPARE = re.compile(r"^PREPARE\s+(?P<name>\w+|\"[^\"]+\")\s*(?:\((?P<types>[^)]*)\))?\s+AS\s+(?P<body>.+?)\s*;?\s*$", re.I | re.S)
_EXECUTE = re.compile(r"^EXECUTE\s+(?P<name>\w+|\"[^\"]+\")\s*(?:\((?P<arguments>.*)\))?\s*;?\s*$", re.I | re.S)
_DEALLOCATE = re.compile(r"^DEALLOCATE\s+(?:PREPARE\s+)?(?P<name>\w+|\"[^\"]+\")\s*;?\s*$", re.I)
_NO_FROM = re.compile(r"\bFROM\b", re.I)
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_TYPE_NAMES = {"int": INT4, "integer": INT4, "int4": INT4, "bigint": INT8, "int8": INT8, "smallint": INT2, "int2": INT2, "text": TEXT,
               "varchar": VARCHAR, "real": FLOAT4, "float4": FLOAT4, "float8": FLOAT8, "double precision": FLOAT8, "numeric": NUMERIC,
               "boolean": BOOL, "bool": BOOL, "date": DATE, "timestamp": TIMESTAMP}
_BUDGET_COLUMNS = [ResultColumn("epsilon", FLOAT8), ResultColumn("delta", FLOAT8), ResultColumn("rho", FLOAT8)]


class StatementStopped(Exception):
    """Raised in a job stopped before its charge (it is not charged)."""


class Job:
    """A statement's work in the pool: it can be stopped until it commits to its charge."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "running"

    def commit(self) -> bool:
        """Called just before the charge: False when the statement was stopped (then it must not charge)."""
        return self._move("committed", unless="stopped")

    def stop(self) -> bool:
        """Stop the statement unless it has committed; whether it was stopped."""
        return self._move("stopped", unless="committed")

    def _move(self, state: str, unless: str) -> bool:
        with self._lock:
            if self._state == unless:
                return False
            self._state = state
            return True


class AnalystSession:
    """The state of one client connection of an analyst: dpsql connections, settings, prepared statements."""

    def __init__(self, service: Service, connection: ClientConnection, analyst: Any, engines: Any, catalog: Any) -> None:
        self.service, self.connection, self.analyst, self.engines, self.catalog = service, connection, analyst, engines, catalog
        self.settings: dict[str, str] = {}  # dpsql.<name>
        self.pg_settings: dict[str, str] = {}
        self.sql_prepared: dict[str, Routed] = {}  # PREPARE name AS ...
        self.generation = 0  # changes whenever a release may have changed what prepare decides
        self._previous: asyncio.Future[Any] | None = None
        self._job: Job | None = None
        self._stop = asyncio.Event()

    @classmethod
    async def open(cls, service: Service, connection: ClientConnection) -> AnalystSession:
        """The session of a logged-in analyst (its ledger and tables opened in the pool); its start-up
        options (``options='-c dpsql.errors=on'``) applied, a bad one refused."""
        analyst = service.analysts[connection.username]
        loop = asyncio.get_running_loop()
        try:
            engines = await loop.run_in_executor(
                service.executor, lambda: service.tables.open(analyst, service.ledger(analyst), service.plans[analyst.name])
            )
        except Exception as error:  # noqa: BLE001 - the client gets its SQLSTATE
            raise as_pg_error(error) from None
        catalog = service.catalog.session(connection.username, connection.database, connection.pid, PG_SETTINGS)
        session = cls(service, connection, analyst, engines, catalog)
        try:
            for name, value in _startup_options(connection.startup.get("options", "")):
                session.route(f"SET {name} = {value}", []).apply()
        except PgError:
            await session.close()
            raise
        session.pg_settings["application_name"] = connection.startup.get("application_name", "")
        service.sessions.add(session)
        return session

    def reported_settings(self) -> dict[str, str]:
        return {("TimeZone" if n == "timezone" else "DateStyle" if n == "datestyle" else n): self.setting(n) for n in REPORTED}

    def setting(self, name: str) -> str:
        key = _SHOW_NAMES.get(name.lower(), name.lower())
        if key == "session_authorization":
            return self.connection.username
        return self.pg_settings.get(key, PG_SETTINGS.get(key, ""))

    # -- routing ----------------------------------------------------------------------------------------
    def route(self, sql: str, param_oids: list[int | None]) -> Routed:
        """What ``sql`` is (module doc), from its first words; nothing runs yet."""
        words = first_words(sql)
        head = words.split(" ", 1)[0].upper() if words else ""
        body = sql.strip()
        if not body.rstrip(";").strip():
            return Fixed(sql, None, [], "EMPTY")
        statement = _strip_leading_comments(body)
        if head in ("BEGIN", "START"):
            return Fixed(sql, None, [], "BEGIN", transaction=b"T")
        if head in ("COMMIT", "END"):
            return Fixed(sql, None, [], "ROLLBACK" if self.connection.tx_status == b"E" else "COMMIT", transaction=b"I", ends=True)
        if head == "ROLLBACK" or head == "ABORT":
            if re.match(r"^ROLLBACK\s+(?:WORK\s+|TRANSACTION\s+)?TO\b", statement, re.I):
                return Fixed(sql, None, [], "ROLLBACK", transaction=b"T", ends=True)
            return Fixed(sql, None, [], "ROLLBACK", transaction=b"I", ends=True)
        if head in ("SAVEPOINT", "RELEASE", "LISTEN", "UNLISTEN"):
            return Fixed(sql, None, [], head)
        if head == "DISCARD":
            return Fixed(sql, None, [], "DISCARD ALL", effect=self._discard)
        answer = {"SET": self._set, "RESET": self._reset, "SHOW": self._show, "DEALLOCATE": self._deallocate,
                  "PREPARE": self._prepare_sql, "EXECUTE": self._execute_sql}.get(head)
        if answer is not None:
            return answer(statement)
        if is_typeinfo_query(sql):
            return TypeInfo(sql, param_oids)
        if head in ("SELECT", "WITH", "VALUES", "TABLE") and (mentions_catalog(statement) or not _NO_FROM.search(_QUOTED.sub("", statement))):
            return CatalogQuery(self, sql, param_oids)
        return DataQuery(self, sql, param_oids)

    def _set(self, statement: str) -> Routed:
        if match := _SET_TIME_ZONE.match(statement):
            value = _unquoted(match.group("value"))
            return Fixed(statement, None, [], "SET", effect=lambda: self.pg_settings.__setitem__("timezone", value))
        if _SET_ANY.match(statement):  # dpsql only reads: every isolation level, role and schema is the same here
            return Fixed(statement, None, [], "SET")
        match = _SET.match(statement)
        if match is None:
            raise PgError("42601", f"cannot read the SET statement {statement[:80]!r}: write SET name = value")
        name, value = match.group("name").strip('"').lower(), _unquoted(match.group("value"))
        if name.startswith("dpsql."):
            setting = self._setting_name(name[6:])
            if value.upper() == "DEFAULT":
                return Fixed(statement, None, [], "SET", effect=lambda: self.settings.pop(setting, None), changes=(setting, None))
            checked_setting(setting, value, self.analyst.noise)
            return Fixed(statement, None, [], "SET", effect=lambda: self._set_dpsql(setting, value), changes=(setting, value))
        if value.upper() == "DEFAULT":
            return Fixed(statement, None, [], "SET", effect=lambda: self.pg_settings.pop(name, None))
        return Fixed(statement, None, [], "SET", effect=lambda: self.pg_settings.__setitem__(name, value))

    def _set_dpsql(self, name: str, value: str) -> None:
        self.settings[name] = value
        self.settings.pop({"epsilon": "rho", "rho": "epsilon"}.get(name, ""), None)

    def _setting_name(self, name: str) -> str:
        lowered = name.lower()
        if lowered not in SETTINGS:
            raise PgError("42704", f'unrecognized configuration parameter "dpsql.{name}" (dpsql has {", ".join(SETTINGS)} and budget)')
        return lowered

    def _reset(self, statement: str) -> Routed:
        match = _matched(_RESET, statement, "RESET", "RESET name or RESET ALL")
        name = match.group("name").lower()
        if name == "all":
            return Fixed(statement, None, [], "RESET", effect=self._discard)
        if name.startswith("dpsql."):
            setting = self._setting_name(name[6:])
            return Fixed(statement, None, [], "RESET", effect=lambda: self.settings.pop(setting, None), changes=(setting, None))
        return Fixed(statement, None, [], "RESET", effect=lambda: self.pg_settings.pop(name, None))

    def _show(self, statement: str) -> Routed:
        match = _matched(_SHOW, statement, "SHOW", "SHOW name")
        name = match.group("name").lower()
        if name == "dpsql.budget":
            return Computed(statement, _BUDGET_COLUMNS, self, lambda: [_budget_row(self.engines.ledger.remaining())], "SHOW")
        if name.startswith("dpsql."):
            setting = self._setting_name(name[6:])
            default = {"epsilon": self.analyst.default_epsilon, "non_negative": "off", STDERR_SETTING: "off"}.get(setting)
            value = self.settings.get(setting, "" if default is None else str(default))
            return Fixed(statement, [ResultColumn(name, TEXT)], [(value,)], "SHOW")
        if name == "all":
            rows = [(n, self.setting(n), "") for n in sorted(PG_SETTINGS)]
            return Fixed(statement, [ResultColumn(c, TEXT) for c in ("name", "setting", "description")], rows, "SHOW")
        key = _SHOW_NAMES.get(name, name)
        if key not in PG_SETTINGS and key not in self.pg_settings:
            raise PgError("42704", f'unrecognized configuration parameter "{name}"')
        return Fixed(statement, [ResultColumn(key, TEXT)], [(self.setting(key),)], "SHOW")

    def _discard(self) -> None:
        self.settings.clear()
        self.pg_settings.clear()
        self.sql_prepared.clear()

    def _deallocate(self, statement: str) -> Routed:
        match = _matched(_DEALLOCATE, statement, "DEALLOCATE", "DEALLOCATE name or DEALLOCATE ALL")
        name = match.group("name").strip('"')
        statements = self.connection.statements

        def forget() -> None:
            if name.upper() == "ALL":
                statements.clear()
                self.sql_prepared.clear()
            else:
                statements.pop(name, None)
                self.sql_prepared.pop(name, None)

        return Fixed(statement, None, [], "DEALLOCATE", effect=forget)

    def _prepare_sql(self, statement: str) -> Routed:
        match = _matched(_PREPARE, statement, "PREPARE", "PREPARE name [(types)] AS statement")
        name = match.group("name").strip('"')
        types = [t.strip().lower() for t in split_list(match.group("types") or "")]
        oids = [_TYPE_NAMES.get(t) for t in types]
        prepared = self.route(match.group("body"), oids)
        return Prepare(statement, prepared, lambda: self.sql_prepared.__setitem__(name, prepared))

    def _execute_sql(self, statement: str) -> Routed:
        match = _matched(_EXECUTE, statement, "EXECUTE", "EXECUTE name [(arguments)]")
        name = match.group("name").strip('"')
        prepared = self.sql_prepared.get(name)
        if prepared is None:
            raise PgError("26000", f'prepared statement "{name}" does not exist: PREPARE {name} AS ... first')
        arguments = [_literal_text(a) for a in split_list(match.group("arguments") or "")]
        if len(arguments) != len(prepared.param_oids):
            raise PgError("42601", f'wrong number of parameters for prepared statement "{name}": expected {len(prepared.param_oids)}, got {len(arguments)}')
        return Executed(statement, prepared, prepared.bound(arguments))

    # -- statements together ----------------------------------------------------------------------------
    async def check_together(self, routed: Sequence[Routed]) -> None:
        """Several statements in one string: prepare every data statement (with the settings the string's
        own SETs give it) and check their summed cost fits the budget, before any runs."""
        queries = [r for r in routed if isinstance(r, DataQuery)]
        if len(routed) < 2 or not queries:
            return
        overlay = dict(self.settings)
        steps: list[tuple[DataQuery, dict[str, str]]] = []
        for statement in routed:
            if isinstance(statement, Fixed) and statement.changes is not None:
                name, value = statement.changes
                if value is None:
                    overlay.pop(name, None)
                else:
                    overlay[name] = value
                    overlay.pop({"epsilon": "rho", "rho": "epsilon"}.get(name, ""), None)
            elif isinstance(statement, DataQuery):
                steps.append((statement, dict(overlay)))
        prepared = await self.work(self._prepare_all, steps)
        for (statement, _), found in zip(steps, prepared):
            statement.state = {**found, "together": True}

    def _prepare_all(self, steps: list[tuple[DataQuery, dict[str, str]]], job: Job) -> list[dict[str, Any]]:
        found = [statement.prepare_now(None, overlay) for statement, overlay in steps]
        costs: dict[int, tuple[Any, list[Cost]]] = {}
        for state in found:
            prepared = state["prepared"]
            if prepared.reads:
                costs.setdefault(id(state["session"].ledger), (state["session"].ledger, []))[1].append(prepared.cost)
        for ledger, spent in costs.values():
            ledger.check(Cost.combined(spent))
        return found

    # -- the pool -----------------------------------------------------------------------------------------
    async def work(self, function: Callable[..., T], *arguments: object, engine: bool = True) -> T:
        """``function(*arguments, job)`` in the server's pool: within the analyst's share of the pool and the
        statement's time limit, and — when it uses the session's dpsql connections (``engine``), which are
        not thread-safe — after this session's previous such job; stopped (57014, nothing charged) by the
        limit, a CancelRequest or shutdown unless it has committed to its charge."""
        loop = asyncio.get_running_loop()
        limits = self.service.config.limits
        deadline = loop.time() + limits.statement_seconds
        job = Job()
        self._job = job
        self._stop.clear()
        previous = self._previous if engine else None
        if previous is not None and not previous.done():  # a statement stopped earlier still runs: wait for its end
            await self._until(asyncio.wait([previous]), deadline, job, started=False)
        slots = self.service.slots(self.analyst.name)
        await self._until(slots.acquire(), deadline, job, started=False)
        future = loop.run_in_executor(self.service.executor, _run_job, function, arguments, job)
        future.add_done_callback(lambda done: (slots.release(), done.cancelled() or done.exception()))  # read: never "unretrieved"
        if engine:
            self._previous = future
        try:
            return await self._until(asyncio.shield(future), deadline, job, started=True)
        except (dpsql.Error, PgError) as error:
            raise error if isinstance(error, PgError) else as_pg_error(error) from None
        except StatementStopped:
            raise self._stopped() from None
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - nothing but a PgError may reach the client
            raise as_pg_error(error) from None
        finally:
            self._job = None

    async def _until(self, awaitable: Any, deadline: float, job: Job, started: bool) -> Any:
        """Await ``awaitable`` until the deadline or a stop; then stop the job — unless it committed to its
        charge, in which case it is awaited to its end."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            timeout = max(0.0, deadline - asyncio.get_running_loop().time())
            await asyncio.wait({task, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            if job.stop():
                task.add_done_callback(lambda done: done.cancelled() or done.exception())  # its outcome is dropped
                if not started:
                    task.cancel()  # a slot or an earlier job still awaited: nothing of this statement ran
                    with _suppressed():
                        await task
                raise self._stopped(timed_out=not stop.done())
            return await task  # committed: it was charged and runs to its end
        finally:
            stop.cancel()

    def _stopped(self, timed_out: bool = False) -> PgError:
        if self.service.draining:
            return PgError("57P01", "terminating the statement: the server is shutting down (nothing was charged)")
        if timed_out:
            seconds = self.service.config.limits.statement_seconds
            return PgError("57014", f"canceling statement due to statement timeout ({seconds:g} s); nothing was charged")
        return PgError("57014", "canceling statement due to user request; nothing was charged")

    def cancel(self) -> None:
        """Stop the running statement (a CancelRequest, or shutdown) if it has not committed to its charge."""
        self._stop.set()

    def data_session(self, text: str) -> Any:
        """The dpsql session holding the table ``text`` reads (the first when the text names none it holds)."""
        data = self.engines.data
        if len(data) == 1:
            return data[0][0]
        table = pipeline.table_of(text)
        for session, names in data:
            if table in names:
                return session
        return data[0][0]

    async def close(self) -> None:
        if self._previous is not None and not self._previous.done():
            await asyncio.wait([self._previous])
        self.catalog.close()
        if self.engines is not None:
            engines, self.engines = self.engines, None
            await asyncio.get_running_loop().run_in_executor(self.service.executor, engines.close)
        self.service.sessions.discard(self)


def _run_job(function: Callable[..., T], arguments: tuple[object, ...], job: Job) -> T:
    return function(*arguments, job)


class _suppressed:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


# -- what a statement is ----------------------------------------------------------------------------------------
Rows = list[tuple[object, ...]]


class Routed(ABC):
    """A routed statement: its parameters' types, its columns, and how it runs."""

    sql: str = ""
    param_oids: list[int | None] = []
    transaction: bytes | None = None  # the transaction status after it runs
    ends_transaction = False

    async def typed(self) -> None:
        """Infer the parameters' types (extended protocol's Parse)."""

    def bound(self, texts: Sequence[str | None]) -> list[object]:
        """Bind parameters (text) as the values their types mean."""
        return [_value(t, self.param_oids[i] if i < len(self.param_oids) else None) for i, t in enumerate(texts)]

    @abstractmethod
    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        """The result's columns without running it (extended protocol's Describe); None: no rows."""

    @abstractmethod
    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        """Run it: the columns, the rows and the command tag."""


class Fixed(Routed):
    """An answer known when routed; ``effect`` runs when it executes (a SET applies then)."""

    def __init__(self, sql: str, columns: list[ResultColumn] | None, rows: Rows, tag: str, effect: Callable[[], None] | None = None,
                 transaction: bytes | None = None, ends: bool = False, changes: tuple[str, str | None] | None = None) -> None:
        self.sql, self.columns, self.rows, self.tag, self.effect = sql, columns, rows, tag, effect
        self.param_oids, self.transaction, self.ends_transaction, self.changes = [], transaction, ends, changes

    def apply(self) -> None:
        if self.effect is not None:
            self.effect()

    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        return self.columns

    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        self.apply()
        return self.columns, self.rows, self.tag


class Computed(Routed):
    """Rows computed in the pool when it executes (the budget left)."""

    def __init__(self, sql: str, columns: list[ResultColumn], session: AnalystSession, rows: Callable[[], Rows], tag: str) -> None:
        self.sql, self.columns, self.session, self.rows, self.tag, self.param_oids = sql, columns, session, rows, tag, []

    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        return self.columns

    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        return self.columns, await self.session.work(lambda job: self.rows(), engine=False), self.tag


class Prepare(Routed):
    """``PREPARE name AS statement``."""

    def __init__(self, sql: str, prepared: Routed, keep: Callable[[], None]) -> None:
        self.sql, self.prepared, self.keep, self.param_oids = sql, prepared, keep, []

    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        return None

    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        await self.prepared.typed()
        self.keep()
        return None, [], "PREPARE"


class Executed(Routed):
    """``EXECUTE name (arguments)`` of a statement kept by ``PREPARE``."""

    def __init__(self, sql: str, prepared: Routed, parameters: list[object]) -> None:
        self.sql, self.prepared, self.parameters, self.param_oids = sql, prepared, parameters, []

    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        return await self.prepared.describe(self.parameters, state)

    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        return await self.prepared.run(self.parameters, state)


class TypeInfo(Routed):
    """asyncpg's type introspection, answered by pg-mimic from the types the catalog knows."""

    def __init__(self, sql: str, param_oids: list[int | None]) -> None:
        self.sql, self.param_oids = sql, param_oids
        self._statement = TypeInfoStatement(sql)

    def bound(self, texts: Sequence[str | None]) -> list[object]:
        return list(texts)

    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        return await self._statement.describe()

    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        rows, _ = await self._statement.bind(list(parameters or [])).execute(0)
        return await self._statement.describe(), rows, "SELECT"


class CatalogQuery(Routed):
    """A statement on ``pg_catalog``/``information_schema`` (or a SELECT without FROM), run by the catalog."""

    def __init__(self, session: AnalystSession, sql: str, param_oids: list[int | None]) -> None:
        self.session, self.sql = session, sql
        count = max((int(n) for n in re.findall(r"\$(\d+)", _QUOTED.sub("", sql))), default=0)
        self.param_oids = [param_oids[i] if i < len(param_oids) else None for i in range(max(count, len(param_oids)))]

    def bound(self, texts: Sequence[str | None]) -> list[object]:
        return list(texts)

    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        columns, rows = await self._answer(parameters)
        state["rows"] = rows if parameters is not None else None
        return columns

    async def _answer(self, parameters: list[object] | None) -> tuple[list[ResultColumn], Rows]:
        settings = dict(self.session.pg_settings)
        return await self.session.work(lambda job: self.session.catalog.answer(self.sql, parameters, settings), engine=False)

    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        if state is not None and state.get("rows") is not None:
            return None, state["rows"], "SELECT"
        columns, rows = await self._answer(parameters)
        return columns, rows, "SELECT"


class DataQuery(Routed):
    """A statement for dpsql's pipeline (module doc)."""

    def __init__(self, session: AnalystSession, sql: str, param_oids: list[int | None]) -> None:
        self.session, self.sql = session, sql
        self.text, self.order = placeholders_to_qmark(sql)
        count = max(self.order, default=-1) + 1
        self.given = [param_oids[i] if i < len(param_oids) else None for i in range(max(count, len(param_oids)))]
        self.param_oids = list(self.given)
        self.examples: list[object] | None = None
        self.state: dict[str, Any] | None = None  # prepared by check_together
        options(sql, session.settings, session.analyst.noise)  # a bad cost comment is refused here

    async def typed(self) -> None:
        if not self.order:
            return
        found = await self.session.work(self._parameters)
        kinds: dict[int, Any] = {}
        for index, parameter in zip(self.order, found):
            kinds.setdefault(index, parameter)
        self.param_oids = [given if given is not None else _KIND_OIDS[kinds[i].kind] if i in kinds else TEXT for i, given in enumerate(self.given)]
        self.examples = [kinds[i].example if i in kinds else None for i in range(len(self.given))]

    def _parameters(self, job: Job) -> tuple[pipeline.Parameter, ...]:
        return pipeline.parameters(self.session.data_session(self.text), self.text)

    async def describe(self, parameters: list[object] | None, state: dict[str, Any]) -> list[ResultColumn] | None:
        if parameters is None and self.order and self.examples is None:
            await self.typed()
        found = await self.session.work(self._describe_now, parameters if parameters is not None else self.examples, dict(self.session.settings))
        if parameters is not None:
            state.update(found)
        return found["columns"]

    def _describe_now(self, parameters: list[object] | None, settings: dict[str, str], job: Job) -> dict[str, Any]:
        return self.prepare_now(parameters, settings)

    def prepare_now(self, parameters: list[object] | None, settings: dict[str, str]) -> dict[str, Any]:
        """Prepare in the pool: the request with its cost, :func:`pipeline.prepare`, the typed columns."""
        chosen = options(self.sql, settings, self.session.analyst.noise)
        values = [parameters[i] if parameters is not None and i < len(parameters) else None for i in self.order] if self.order else None
        data = self.session.data_session(self.text)
        request = pipeline.execute_request(data, self.text, values, chosen.epsilon, chosen.rho, chosen.non_negative)
        prepared = pipeline.prepare(data, request)
        layout = pipeline.layout(prepared)
        return {"session": data, "prepared": prepared, "layout": layout, "errors": chosen.errors, "settings": settings,
                "columns": result_columns(layout, chosen.errors), "generation": self.session.generation}

    async def run(self, parameters: list[object] | None, state: dict[str, Any] | None = None) -> tuple[list[ResultColumn] | None, Rows, str]:
        kept = state if state is not None and "prepared" in state else self.state
        self.state = None
        settings = dict(self.session.settings)
        found = await self.session.work(self._run_now, parameters, settings, kept)
        return found["columns"], found["rows"], "EXPLAIN" if found["prepared"].request.explain else "SELECT"

    def _run_now(self, parameters: list[object] | None, settings: dict[str, str], kept: dict[str, Any] | None, job: Job) -> dict[str, Any]:
        session = self.session
        # prepared for Describe: reused while nothing was released since; prepared with its string's other
        # statements (check_together): released as checked (a later store or key set only adds to what it uses)
        current = kept is not None and (kept.get("together") or kept["generation"] == session.generation) and kept["settings"] == settings
        found = kept if current else self.prepare_now(parameters, settings)
        if not job.commit():  # stopped before its charge: nothing is charged
            raise StatementStopped
        results = pipeline.release(found["session"], found["prepared"])
        session.generation += 1
        # released and charged: from here on nothing may fail
        return {**found, "rows": released_rows(results, found["layout"], found["errors"])}


# -- values on the wire -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Options:
    epsilon: float | None
    rho: float | None
    non_negative: bool
    errors: bool


def options(sql: str, settings: dict[str, str], noise: str) -> Options:
    """A statement's cost and choices: its ``/* dpsql: ... */`` comment, else ``SET dpsql.*``, else the
    analyst's defaults (``default_epsilon``)."""
    comment = cost_comment(sql)
    chosen = {**settings, **comment}
    if "epsilon" in comment:
        chosen.pop("rho", None)
    elif "rho" in comment:
        chosen.pop("epsilon", None)
    for name, value in chosen.items():
        checked_setting(name, value, noise)
    return Options(
        float(chosen["epsilon"]) if "epsilon" in chosen else None,
        float(chosen["rho"]) if "rho" in chosen else None,
        _boolean(chosen["non_negative"], "dpsql.non_negative") if "non_negative" in chosen else False,
        _boolean(chosen[STDERR_SETTING], f"dpsql.{STDERR_SETTING}") if STDERR_SETTING in chosen else False,
    )


def checked_setting(name: str, value: str, noise: str) -> None:
    """Refuse (22023) a value of ``dpsql.<name>`` that no statement could use, when it is set."""
    if name in ("non_negative", STDERR_SETTING):
        _boolean(value, f"dpsql.{name}")
        return
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise PgError(INVALID_PARAMETER_VALUE, f"dpsql.{name} must be a positive number, got {value!r}")
    if name == "rho" and noise != "gaussian":
        raise PgError(INVALID_PARAMETER_VALUE, "dpsql.rho is for Gaussian noise: this analyst's statements cost dpsql.epsilon")
    try:
        Cost.pure(number) if name == "epsilon" else Cost.zcdp(number)
    except dpsql.Error as error:
        raise PgError(INVALID_PARAMETER_VALUE, f"dpsql.{name}: {error}") from None


def _boolean(text: str, name: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE | _FALSE:
        return lowered in _TRUE
    raise PgError(INVALID_PARAMETER_VALUE, f"{name} must be on or off, got {text!r}")


QUERY_PLAN = [ResultColumn("QUERY PLAN", TEXT)]


def result_columns(layout: Sequence[OutputColumn], errors: bool) -> list[ResultColumn]:
    """The wire columns of a result: each column's type from its kind; with ``dpsql.errors`` on, every
    released column followed by ``<name>_stderr`` (float8), its standard error. An EXPLAIN is one text
    column ``QUERY PLAN``, a line per row, as PostgreSQL's own (psql shows it line by line)."""
    if tuple(layout) == pipeline.EXPLAIN_COLUMNS:
        return QUERY_PLAN
    columns = []
    for column in layout:
        columns.append(ResultColumn(column.name, _KIND_OIDS[column.kind]))
        if errors and column.measured:
            columns.append(ResultColumn(column.name + ERROR_SUFFIX, FLOAT8))
    return columns


def released_rows(results: Sequence[Any], layout: Sequence[OutputColumn], errors: bool) -> Rows:
    """The released rows as the wire columns say (:func:`result_columns`); never raises (after the release)."""
    if tuple(layout) == pipeline.EXPLAIN_COLUMNS:
        return [(line,) for result in results for line in result.explanation.splitlines()]
    rows: Rows = []
    for result in results:
        for row, error in zip(result.rows, result.errors):
            values: list[object] = []
            for column, value, stderr in zip(layout, row, error):
                values.append(_typed(value, column.kind))
                if errors and column.measured:
                    values.append(_typed(stderr, "float"))
            rows.append(tuple(values))
    return rows


def _typed(value: object, kind: str) -> object:
    """``value`` as its column's kind; never raises."""
    if value is None:
        return None
    try:
        if kind == "float":
            return float(value)  # type: ignore[arg-type]
        if kind in ("integer", "numeric") and float(value) == int(value):  # type: ignore[arg-type]
            return int(value)  # type: ignore[arg-type]
        if kind == "boolean":
            return bool(value)
        if kind == "text":
            return str(value)
    except (TypeError, ValueError, OverflowError):
        pass
    return value if kind in ("date", "timestamp", "integer", "numeric") else str(value)


def _value(text: str | None, oid: int | None) -> object:
    """A parameter sent as text, as the value its type means; text that does not cast exactly is refused (22P02)."""
    if text is None:
        return None
    try:
        if oid in _INTEGER_OIDS:
            number = float(text)
            if not number.is_integer():
                raise ValueError
            return int(text) if re.fullmatch(r"\s*[+-]?\d+\s*", text) else int(number)
        if oid in _FLOAT_OIDS:
            number = float(text)
            if not math.isfinite(number):
                raise ValueError
            return int(text) if oid == NUMERIC and re.fullmatch(r"\s*[+-]?\d+\s*", text) else number
        if oid == BOOL:
            lowered = text.strip().lower()
            if lowered not in _TRUE | _FALSE:
                raise ValueError
            return lowered in _TRUE
        if oid == DATE:
            return datetime.date.fromisoformat(text.strip())
        if oid == TIMESTAMP:
            return datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        name = {INT8: "bigint", INT4: "integer", INT2: "smallint", OID: "oid", FLOAT8: "double precision", FLOAT4: "real",
                NUMERIC: "numeric", BOOL: "boolean", DATE: "date", TIMESTAMP: "timestamp"}.get(oid or 0, "the parameter's type")
        raise PgError("22P02", f"invalid input syntax for type {name}: {text!r}") from None
    return text


def _budget_row(remaining: dpsql.Remaining) -> tuple[float, float, float]:
    return (float(remaining.epsilon), float(remaining.delta), float(remaining.rho))


def _matched(pattern: re.Pattern[str], statement: str, keyword: str, form: str) -> re.Match[str]:
    """``pattern``'s match of ``statement``, else a syntax error (42601) showing the form to write."""
    match = pattern.match(statement)
    if match is None:
        raise PgError("42601", f"cannot read the {keyword} statement: write {form}")
    return match


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace(value[0] * 2, value[0])
    return value


def _literal_text(argument: str) -> str | None:
    """An EXECUTE argument (a SQL literal) as parameter text."""
    text = argument.strip()
    if text.upper() == "NULL":
        return None
    text = re.sub(r"::\s*[\w ]+$", "", text).strip()
    return _unquoted(text)


def _strip_leading_comments(sql: str) -> str:
    return re.sub(r"^(?:\s*(?:--[^\n]*\n|/\*.*?\*/))*\s*", "", sql, flags=re.S)


def _startup_options(text: str) -> list[tuple[str, str]]:
    """``-c name=value`` and ``--name=value`` items of the start-up ``options`` parameter."""
    found = re.findall(r"(?:-c\s*|--)([\w.]+)=((?:\\ |[^\s])*)", text)
    return [(name, value.replace("\\ ", " ")) for name, value in found]
