"""One client connection on the wire: start-up, login, and the simple and extended query protocols.

pg-mimic frames and encodes the messages; this module decides what happens between them:

* **Start-up and login** run under ``limits.login_seconds`` (a client that never logs in is dropped), with
  SCRAM-SHA-256 (``dpsql.serve.passwords``) and the server's failed-login back-off.
* **Simple query** (``Q``): a string of several statements is split (outside quotes and comments) and
  every statement is routed and prepared — every check that can fail, the costs of all of them
  together against the budget — before the first one runs; then each is answered in order. So a
  refused statement anywhere in the string means nothing ran.
* **Extended query** (``P``/``B``/``D``/``E``/``C``/``S``/``H``): Describe before Bind is answered with
  each parameter's type (``pipeline.parameters``) and the result's columns (``pipeline.describe``).
* **Errors**: every error a client sees carries a SQLSTATE; a malformed message ends the connection with
  FATAL 08P01, never with Python's text; a statement stopped by its time limit or a CancelRequest
  before its charge is never charged (57014).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pg_mimic import PgError, ResultColumn, messages
from pg_mimic.results import encode_row, format_code_for
from pg_mimic.stream import ConnectionClosed, PgStream
from pg_mimic.types import decode_binary_param

from dpsql.serve.sqlstate import INTERNAL_ERROR, PROTOCOL_VIOLATION, as_pg_error
from dpsql.serve.sqltext import split_statements

if TYPE_CHECKING:
    from dpsql.serve.server import DpsqlPgServer
    from dpsql.serve.session import AnalystSession, Routed

log = logging.getLogger("dpsql.serve")

ADMIN_SHUTDOWN = "57P01"
_MALFORMED = (struct.error, IndexError, UnicodeDecodeError, ValueError)
_SIZES = {16: 1, 20: 8, 21: 2, 23: 4, 26: 4, 700: 4, 701: 8, 1082: 4, 1114: 8, 1184: 8}  # bytes of fixed-size types


@dataclass
class Portal:
    """A bound statement: its parameters, result formats, and rows not yet sent (Execute with a row limit)."""

    routed: Routed
    parameters: list[object]
    formats: list[int]
    columns: list[ResultColumn] | None = None
    pending: list[tuple[object, ...]] | None = None
    sent: int = 0
    state: dict[str, Any] = field(default_factory=dict)


class ClientConnection:
    """The protocol state of one client connection (see the module doc)."""

    def __init__(self, stream: PgStream, server: DpsqlPgServer, pid: int, secret: int, startup: dict[str, str], peer: str) -> None:
        self.stream, self.server, self.pid, self.secret, self.startup, self.peer = stream, server, pid, secret, startup, peer
        self.username = startup.get("user", "")
        self.database = startup.get("database", self.username)
        self.session: AnalystSession | None = None
        self.tx_status = b"I"
        self.statements: dict[str, Routed] = {}
        self.portals: dict[str, Portal] = {}
        self._skip_to_sync = False
        self.busy = False
        self.reading: asyncio.Task[Any] | None = None

    # -- start-up -------------------------------------------------------------------------------------
    async def login(self) -> bool:
        """Authenticate and open the session; on failure the client has its FATAL error."""
        service = self.server.service
        throttle = service.throttle
        await throttle.wait(self.username, self.peer)
        if not await self.server.authenticator.authenticate(self.stream, self.username, None):
            throttle.failed(self.username, self.peer)
            await self.fatal("28P01", f'password authentication failed for user "{self.username}"')
            return False
        throttle.succeeded(self.username, self.peer)
        self.stream.write(messages.make_authentication_ok())
        from dpsql.serve.session import AnalystSession

        try:
            self.session = await AnalystSession.open(service, self)
        except PgError as error:
            await self.fatal(error.sqlstate, error.message)
            return False
        for name, value in {**self.server.parameter_status, **self.session.reported_settings()}.items():
            self.stream.write(messages.make_parameter_status(name, value))
        self.stream.write(messages.make_backend_key_data(self.pid, self.secret))
        self.stream.write(messages.make_ready_for_query(self.tx_status))
        await self.stream.drain()
        return True

    async def fatal(self, code: str, message: str) -> None:
        self.stream.write(messages.make_error_response({"S": "FATAL", "V": "FATAL", "C": code, "M": message}))
        try:
            await self.stream.drain()
        except (ConnectionError, OSError):
            pass

    # -- the command loop -----------------------------------------------------------------------------
    async def serve(self) -> None:
        service = self.server.service
        while True:
            if service.draining:
                await self.fatal(ADMIN_SHUTDOWN, "terminating connection due to administrator command: the server is shutting down")
                return
            self.reading = asyncio.ensure_future(self.stream.read_message())
            try:
                tag, payload = await self.reading
            except asyncio.CancelledError:
                if service.draining:
                    continue
                raise
            finally:
                self.reading = None
            if tag == messages.TERMINATE:
                return
            self.busy = True
            try:
                await self._dispatch(tag, payload)
            finally:
                self.busy = False
            if tag in (messages.QUERY, messages.SYNC):
                self.stream.write(messages.make_ready_for_query(self.tx_status))
                self._skip_to_sync = False
            await self.stream.drain()

    async def _dispatch(self, tag: bytes, payload: bytes) -> None:
        if self._skip_to_sync and tag != messages.SYNC:
            return
        try:
            if tag == messages.QUERY:
                await self._simple(_decoded(messages.parse_query, payload))
            elif tag == messages.PARSE:
                await self._parse(_decoded(messages.parse_parse, payload))
            elif tag == messages.BIND:
                await self._bind(_decoded(messages.parse_bind, payload))
            elif tag == messages.DESCRIBE:
                await self._describe(_decoded(messages.parse_describe, payload))
            elif tag == messages.EXECUTE:
                await self._execute(_decoded(messages.parse_execute, payload))
            elif tag == messages.CLOSE:
                closed = _decoded(messages.parse_close, payload)
                (self.statements if closed.kind == messages.TARGET_STATEMENT else self.portals).pop(closed.name, None)
                self.stream.write(messages.make_close_complete())
            elif tag == messages.FLUSH:
                await self.stream.drain()
            elif tag != messages.SYNC:
                await self.fatal(PROTOCOL_VIOLATION, f"unsupported frontend message type {tag!r} here")
                raise ConnectionClosed("unsupported message")
        except PgError as error:
            self._error(error)
        except (ConnectionClosed, ConnectionError, asyncio.CancelledError):
            raise
        except Exception as error:  # noqa: BLE001 - a defect: the client gets a SQLSTATE, the log the details
            self._error(as_pg_error(error))

    def _error(self, error: PgError) -> None:
        fields = {"S": "ERROR", "V": "ERROR", "C": error.sqlstate or INTERNAL_ERROR, "M": error.message}
        self.stream.write(messages.make_error_response(fields))
        if self.tx_status != b"I":
            self.tx_status = b"E"
        self._skip_to_sync = True

    # -- simple query -----------------------------------------------------------------------------------
    async def _simple(self, sql: str) -> None:
        texts = split_statements(sql)
        if not texts:
            self.stream.write(messages.make_empty_query_response())
            return
        session = self._session()
        routed = [session.route(text, []) for text in texts]
        if self.tx_status == b"E" and not routed[0].ends_transaction:
            raise PgError("25P02", "current transaction is aborted, commands ignored until end of transaction block")
        await session.check_together(routed)  # every check of every statement before the first runs
        for statement in routed:
            columns, rows, tag = await statement.run(None)
            if tag == "EMPTY":
                self.stream.write(messages.make_empty_query_response())
                continue
            if columns is not None:
                self.stream.write(messages.make_row_description(_fields(columns, [])))
                for row in rows:
                    self.stream.write(messages.make_data_row(encode_row(row, columns)))
            self.stream.write(messages.make_command_complete(_with_count(tag, len(rows))))
            self._transaction_after(statement)
            await self.stream.drain()

    def _transaction_after(self, statement: Routed) -> None:
        if statement.transaction is not None:
            self.tx_status = statement.transaction

    # -- extended query -----------------------------------------------------------------------------------
    async def _parse(self, parsed: messages.ParsedParse) -> None:
        texts = split_statements(parsed.sql)
        if len(texts) > 1:
            raise PgError("42601", "cannot insert multiple commands into a prepared statement")
        oids = [oid if oid else None for oid in parsed.param_oids]
        routed = self._session().route(texts[0] if texts else "", oids)
        await routed.typed()
        if parsed.statement_name:
            self.statements[parsed.statement_name] = routed
        else:
            self.statements[""] = routed
        self.stream.write(messages.make_parse_complete())

    def _statement(self, name: str) -> Routed:
        found = self.statements.get(name)
        if found is None:
            raise PgError("26000", f'prepared statement "{name}" does not exist')
        return found

    async def _bind(self, bind: messages.ParsedBind) -> None:
        routed = self._statement(bind.statement_name)
        if len(bind.params) != len(routed.param_oids):
            raise PgError(PROTOCOL_VIOLATION, f"bind message supplies {len(bind.params)} parameters, but the statement needs {len(routed.param_oids)}")
        values = [
            _parameter_text(value, format_code_for(bind.param_format_codes, i) if bind.param_format_codes else 0, routed.param_oids[i])
            for i, value in enumerate(bind.params)
        ]
        self.portals[bind.portal_name] = Portal(routed, routed.bound(values), bind.result_format_codes)
        self.stream.write(messages.make_bind_complete())

    async def _describe(self, described: Any) -> None:
        if described.kind == messages.TARGET_STATEMENT:
            routed = self._statement(described.name)
            self.stream.write(messages.make_parameter_description([oid or 25 for oid in routed.param_oids]))
            columns = await routed.describe(None, {})
            formats: list[int] = []
        else:
            portal = self._portal(described.name)
            if portal.columns is None:
                portal.columns = await portal.routed.describe(portal.parameters, portal.state)
            columns, formats = portal.columns, portal.formats
        self.stream.write(messages.make_no_data() if columns is None else messages.make_row_description(_fields(columns, formats)))

    def _portal(self, name: str) -> Portal:
        found = self.portals.get(name)
        if found is None:
            raise PgError("34000", f'portal "{name}" does not exist')
        return found

    async def _execute(self, execute: Any) -> None:
        portal = self._portal(execute.portal_name)
        if self.tx_status == b"E" and not portal.routed.ends_transaction:
            raise PgError("25P02", "current transaction is aborted, commands ignored until end of transaction block")
        if portal.pending is None:
            columns, rows, tag = await portal.routed.run(portal.parameters, portal.state)
            portal.columns = portal.columns if portal.columns is not None else columns
            portal.pending, portal.state["tag"] = list(rows), tag
            self._transaction_after(portal.routed)
        limit = execute.max_rows if execute.max_rows > 0 else len(portal.pending)
        chunk, portal.pending = portal.pending[:limit], portal.pending[limit:]
        portal.sent += len(chunk)
        if portal.columns is not None:
            for row in chunk:
                try:
                    self.stream.write(messages.make_data_row(encode_row(row, portal.columns, portal.formats)))
                except (ValueError, TypeError, struct.error) as error:
                    raise PgError("0A000", f"cannot send this value in the requested format: {type(error).__name__}") from None
        tag = portal.state.get("tag", "SELECT")
        if portal.pending:
            self.stream.write(messages.make_portal_suspended())
        elif tag == "EMPTY":
            self.stream.write(messages.make_empty_query_response())
        else:
            self.stream.write(messages.make_command_complete(_with_count(tag, portal.sent)))

    def _session(self) -> AnalystSession:
        assert self.session is not None
        return self.session

    def cancel(self) -> None:
        """A CancelRequest for this connection: stop what it runs now, unless it was already charged."""
        if self.session is not None:
            self.session.cancel()

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def _decoded(parse: Any, payload: bytes) -> Any:
    """A message's fields; a message that cannot be read is a protocol violation (FATAL 08P01)."""
    try:
        return parse(payload)
    except _MALFORMED as error:
        raise MalformedMessage(f"invalid message format ({type(error).__name__})") from None


class MalformedMessage(ConnectionClosed):
    """A frontend message whose fields cannot be read: the connection ends with FATAL 08P01."""


def _parameter_text(value: bytes | None, format_code: int, oid: int | None) -> str | None:
    """A Bind parameter as text (binary ones decoded by their type)."""
    if value is None:
        return None
    try:
        if format_code == 0:
            return value.decode("utf-8")
        if oid is None:
            raise PgError("08P01", "a binary parameter needs a type: send its type OID in Parse")
        return decode_binary_param(oid, value)
    except UnicodeDecodeError:
        raise PgError("22021", "invalid byte sequence for encoding UTF8 in a parameter") from None
    except (ValueError, struct.error) as error:
        raise PgError("22P03", f"invalid binary format in a parameter of type {oid}: {type(error).__name__}") from None


def _fields(columns: list[ResultColumn], formats: list[int]) -> list[messages.FieldSpec]:
    return [
        messages.FieldSpec(name=c.name, oid=c.oid, type_size=_SIZES.get(c.oid, -1), format_code=format_code_for(formats, i))
        for i, c in enumerate(columns)
    ]


def _with_count(tag: str, count: int) -> str:
    return f"{tag} {count}" if tag in ("SELECT", "FETCH") else tag


async def handle(server: DpsqlPgServer, stream: PgStream, startup: dict[str, str], pid: int, secret: int, peer: str) -> None:
    """A connection from login to its end."""
    connection = ClientConnection(stream, server, pid, secret, startup, peer)
    server.connections[pid] = connection
    seconds = server.service.config.limits.login_seconds
    try:
        try:
            logged_in = await asyncio.wait_for(connection.login(), seconds)
        except asyncio.TimeoutError:
            await connection.fatal("08006", f"login took longer than {seconds:g} s")
            return
        if logged_in:
            try:
                await connection.serve()
            except MalformedMessage as error:
                await connection.fatal(PROTOCOL_VIOLATION, str(error))
    except (ConnectionClosed, ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        server.connections.pop(pid, None)
        await connection.close()
