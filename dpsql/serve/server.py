"""The PostgreSQL wire service: pg-mimic's protocol engine with dpsql's authentication, TLS, framing
limits and sessions.

:class:`Server` runs it — in the foreground with ``serve_forever()`` (``dpsql serve``; SIGTERM and
SIGINT shut it down gracefully), or on a background thread with ``start()``/``stop()`` (tests,
benchmarks, notebooks)::

    server = Server(ServeConfig.load("server.yaml"))
    host, port = server.start(port=0)     # 0: any free port
    ...                                    # psql "host=127.0.0.1 port=<port> user=alice dbname=dpsql"
    server.stop()
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import signal
import ssl
import struct
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pg_mimic import AuthPlugin, PgServer, messages
from pg_mimic.stream import ConnectionClosed, PgStream
from pg_mimic.types import unpack_int32

import dpsql
from dpsql.serve.config import Analyst, ServeConfig
from dpsql.serve.passwords import MECHANISM, ScramExchange, decoy_verifier
from dpsql.serve.catalog import Catalog
from dpsql.serve.protocol import ADMIN_SHUTDOWN, ClientConnection, handle
from dpsql.serve.sqlstate import PROTOCOL_VIOLATION
from dpsql.serve.tables import Tables
from dpsql.session import PlanCache

log = logging.getLogger("dpsql.serve")

PROTOCOL_3_0 = 196608
MAX_MESSAGE_BYTES = 1 << 22  # 4 MiB: far above any statement; a longer message is a protocol violation
MAX_STARTUP_BYTES = 10_000
SHUTDOWN_GRACE_SECONDS = 30.0
_FRONTEND_TAGS = frozenset(b"QPBDECSHXpdcf")
SERVER_VERSION = "16.0 (dpsql)"
VERSION = (
    "PostgreSQL 16.0 (dpsql serve: differentially private SQL; SELECT with COUNT, SUM, AVG, VARIANCE, STDDEV, "
    "MEDIAN and other quantiles, GROUP BY, CUBE/ROLLUP/GROUPING SETS, HAVING, ORDER BY/LIMIT)"
)


class Service:
    """What every session shares: the tables, their catalog, the analysts and their ledgers, the thread
    pool and each analyst's share of it, the failed-login back-off."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.analysts: dict[str, Analyst] = config.analysts
        self._temporary = None if config.ledgers is not None else tempfile.mkdtemp(prefix="dpsql-serve-ledgers-")
        self.ledgers = Path(self._temporary) if config.ledgers is None else config.ledgers
        self.ledgers.mkdir(parents=True, exist_ok=True)
        self.tables = Tables(config.tables)
        self.catalog = Catalog(self.tables.catalog_tables(), VERSION)
        self.executor = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="dpsql-serve")
        self.secret = secrets.token_bytes(32)  # for the decoy verifiers of unknown user names
        self.sessions: set[Any] = set()
        self.throttle = LoginThrottle()
        self.draining = False
        self._slots: dict[str, asyncio.Semaphore] = {}
        self.plans: dict[str, PlanCache] = {name: PlanCache() for name in self.analysts}  # one cache per analyst
        try:
            self._check_ledgers()
        except BaseException:
            self.close()
            raise

    def ledger_path(self, analyst: Analyst) -> str:
        return str(self.ledgers / f"{analyst.ledger}.ledger")

    def slots(self, analyst: str) -> asyncio.Semaphore:
        """The analyst's share of the pool: ``limits.statements_per_analyst`` jobs at once."""
        found = self._slots.get(analyst)
        if found is None:
            found = self._slots[analyst] = asyncio.Semaphore(self.config.limits.statements_per_analyst)
        return found

    def _check_ledgers(self) -> None:
        """Open every ledger once (constant time each): a ledger created with another budget, or one that does
        not continue what the ledger directory's registry recorded after its last charge — an older copy put
        back, another ledger in its place, a downgraded file (:mod:`dpsql.ledger_registry`) — is refused at
        start-up, not at login. Each session's open and each charge check the registry again."""
        for analyst in {a.ledger: a for a in self.analysts.values()}.values():
            dpsql.connect(budget=analyst.budget, ledger=self.ledger_path(analyst)).close()

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.tables.close()
        self.catalog.close()
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)


class LoginThrottle:
    """Failed logins slow the next attempts of the same user name and from the same address: the n-th
    failure in a row makes the next attempt wait ``BASE_SECONDS·2^(n−1)`` (at most ``MAX_SECONDS``);
    a success, or ``FORGET_SECONDS`` without failure, clears it."""

    BASE_SECONDS = 0.1
    MAX_SECONDS = 8.0
    FORGET_SECONDS = 600.0

    def __init__(self) -> None:
        self._failures: dict[str, tuple[int, float]] = {}

    def delay(self, user: str, address: str) -> float:
        now = time.monotonic()
        waits = [0.0]
        for key in (f"user:{user}", f"address:{address}"):
            count, last = self._failures.get(key, (0, 0.0))
            if count and now - last < self.FORGET_SECONDS:
                waits.append(min(self.MAX_SECONDS, self.BASE_SECONDS * 2 ** (count - 1)) - (now - last))
        return max(waits)

    async def wait(self, user: str, address: str) -> None:
        delay = self.delay(user, address)
        if delay > 0:
            await asyncio.sleep(delay)

    def failed(self, user: str, address: str) -> None:
        now = time.monotonic()
        for key in (f"user:{user}", f"address:{address}"):
            count, last = self._failures.get(key, (0, 0.0))
            self._failures[key] = ((count if now - last < self.FORGET_SECONDS else 0) + 1, now)
        if len(self._failures) > 100_000:  # bounded memory under a flood of names
            self._failures.clear()

    def succeeded(self, user: str, address: str) -> None:
        self._failures.pop(f"user:{user}", None)
        self._failures.pop(f"address:{address}", None)


class ScramAuthentication(AuthPlugin):
    """SCRAM-SHA-256 against the analysts' verifiers; unknown names go through the same exchange with
    a decoy verifier and are refused at its end (28P01, as PostgreSQL does)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def authenticate(self, stream: PgStream, username: str, identity_provider: object) -> bool:
        analyst = self.service.analysts.get(username)
        exchange = ScramExchange(analyst.verifier if analyst is not None else decoy_verifier(username, self.service.secret))
        stream.write(messages.make_authentication_sasl([MECHANISM]))
        await stream.drain()
        tag, payload = await stream.read_message()
        if tag != messages.PASSWORD:
            return False
        try:
            mechanism, client_first = messages.parse_sasl_initial_response(payload)
        except (ValueError, IndexError, struct.error):
            return False
        server_first = exchange.first(client_first.decode("utf-8", "replace")) if mechanism == MECHANISM else None
        if server_first is None:
            return False
        stream.write(messages.make_authentication_sasl_continue(server_first.encode("utf-8")))
        await stream.drain()
        tag, payload = await stream.read_message()
        server_final = exchange.final(payload.decode("utf-8", "replace")) if tag == messages.PASSWORD else None
        if server_final is None or analyst is None:
            return False
        stream.write(messages.make_authentication_sasl_final(server_final.encode("utf-8")))
        return True


class BoundedStream(PgStream):
    """pg-mimic's framing with limits: an unknown message type or a length out of bounds is a protocol
    violation that ends this connection (FATAL 08P01), as in PostgreSQL."""

    async def read_startup_packet(self) -> tuple[int, bytes]:
        header = await self._read_exactly(8)
        length = unpack_int32(header, 0)
        if not 8 <= length <= MAX_STARTUP_BYTES:
            await self.violation("invalid length of startup packet")
        return unpack_int32(header, 4), await self._read_exactly(length - 8) if length > 8 else b""

    async def read_message(self) -> tuple[bytes, bytes]:
        header = await self._read_exactly(5)
        length = unpack_int32(header, 1)
        if header[0] not in _FRONTEND_TAGS:
            await self.violation(f"invalid frontend message type {header[0]}")
        if not 4 <= length <= MAX_MESSAGE_BYTES:
            await self.violation(f"invalid message length {length}")
        return header[0:1], await self._read_exactly(length - 4) if length > 4 else b""

    async def violation(self, message: str) -> None:
        self.write(messages.make_error_response({"S": "FATAL", "V": "FATAL", "C": PROTOCOL_VIOLATION, "M": message}))
        try:
            await self.drain()
        finally:
            raise ConnectionClosed(message)


class DpsqlPgServer(PgServer):
    """pg-mimic's server with TLS (SSLRequest → ``S`` and a TLS handshake; plain connections refused
    when TLS is configured), :class:`BoundedStream` framing, a cap on open connections and
    :mod:`dpsql.serve.protocol` for each connection. It overrides pg-mimic's connection start-up
    (``_handle_client``), which is why pg-mimic's version is pinned."""

    def __init__(self, service: Service, tls: ssl.SSLContext | None) -> None:
        super().__init__(session_factory=lambda: None, server_version=SERVER_VERSION)  # type: ignore[arg-type,return-value]
        self.service = service
        self.authenticator = ScramAuthentication(service)
        self.tls = tls
        self.connections: dict[int, ClientConnection] = {}
        self.open = 0  # sockets accepted and not yet closed, logged in or not

    async def _handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = BoundedStream(reader, writer)
        limits = self.service.config.limits
        self.open += 1
        try:
            if self.open > limits.connections:
                await self._refuse(stream, "53300", f"too many connections: this server accepts {limits.connections} at once")
                return
            try:
                startup = await asyncio.wait_for(self._negotiate_startup(stream), limits.login_seconds)
            except (ConnectionClosed, ConnectionError, ssl.SSLError, ValueError, IndexError, struct.error, UnicodeDecodeError, asyncio.TimeoutError) as error:
                log.debug("connection start-up failed: %r", error)
                return
            if startup is None:
                return
            if self.service.draining:
                await _fatal(stream, ADMIN_SHUTDOWN, "the server is shutting down")
                return
            peer = writer.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            await handle(self, stream, startup, self._allocate_pid(), struct.unpack("!i", os.urandom(4))[0], address)
        finally:
            self.open -= 1

    async def _refuse(self, stream: PgStream, code: str, message: str) -> None:
        """Answer a connection over the cap: its start-up packet (after declining TLS), then FATAL, within a second."""
        try:
            code_read, _ = await asyncio.wait_for(stream.read_startup_packet(), 1.0)
            if code_read in (messages.SSL_REQUEST_CODE, messages.GSSENC_REQUEST_CODE):
                stream.write(b"N")
                await stream.drain()
                await asyncio.wait_for(stream.read_startup_packet(), 1.0)
            await _fatal(stream, code, message)
        except (ConnectionClosed, ConnectionError, asyncio.TimeoutError, ValueError, struct.error):
            pass

    def cancel(self, pid: int, secret: int) -> None:
        connection = self.connections.get(pid)
        if connection is not None and connection.secret == secret:
            connection.cancel()

    async def _negotiate_startup(self, stream: PgStream) -> dict[str, str] | None:
        code, payload = await stream.read_startup_packet()
        encrypted = False
        if code == messages.SSL_REQUEST_CODE and self.tls is not None:
            stream.write(b"S")
            await stream.drain()
            await stream.writer.start_tls(self.tls)
            encrypted = True
            code, payload = await stream.read_startup_packet()
        elif code in (messages.SSL_REQUEST_CODE, messages.GSSENC_REQUEST_CODE):
            stream.write(b"N")
            await stream.drain()
            code, payload = await stream.read_startup_packet()
        if code == messages.CANCEL_REQUEST_CODE and len(payload) == 8:
            self.cancel(*messages.parse_cancel_request(payload))
            return None
        if code != PROTOCOL_3_0:
            await _fatal(stream, "0A000", f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: dpsql serves 3.0")
            return None
        if self.tls is not None and not encrypted:
            await _fatal(stream, "28000", "this server accepts TLS connections only: connect with sslmode=require")
            return None
        return messages.parse_startup_message(payload)


async def _fatal(stream: PgStream, code: str, message: str) -> None:
    stream.write(messages.make_error_response({"S": "FATAL", "V": "FATAL", "C": code, "M": message}))
    await stream.drain()


def tls_context(config: ServeConfig) -> ssl.SSLContext | None:
    if config.tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(config.tls.certificate), str(config.tls.key))
    except (OSError, ssl.SSLError) as error:
        raise dpsql.ProgrammingError(f"tls: cannot load the certificate and key: {error}") from error
    return context


class Server:
    """The service for ``config``: ``start()``/``stop()`` on a background thread, or ``serve_forever()``."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self._tls = tls_context(config)
        self._service: Service | None = None
        self._server: DpsqlPgServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self.address: tuple[str, int] | None = None

    async def _open(self, host: str | None, port: int | None) -> tuple[str, int]:
        self._service = Service(self.config)
        self._server = DpsqlPgServer(self._service, self._tls)
        listening = await self._server.start_server(host or self.config.host, self.config.port if port is None else port)
        self.address = listening.sockets[0].getsockname()[:2]
        self._stopped = asyncio.Event()
        return self.address  # type: ignore[return-value]

    async def _close(self, grace: float) -> None:
        """Stop accepting; stop every statement not yet charged (57P01, never charged); let charged ones
        finish and send their answers; end each connection with FATAL 57P01; close everything."""
        assert self._server is not None and self._service is not None
        service, server = self._service, self._server
        server._server.close()  # type: ignore[union-attr]  # stop listening first
        service.draining = True
        for session in list(service.sessions):
            session.cancel()
        for connection in list(server.connections.values()):
            if not connection.busy and connection.reading is not None:
                connection.reading.cancel()  # idle: told at once that the server is going away
        deadline = asyncio.get_running_loop().time() + grace
        while server.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        server.close()
        for _ in range(100):  # the cancelled connections close their sessions
            if not service.sessions:
                break
            await asyncio.sleep(0.02)
        await asyncio.get_running_loop().run_in_executor(None, service.close)

    # -- foreground -------------------------------------------------------------------------------------
    def serve_forever(self, host: str | None = None, port: int | None = None, ready: Any = None) -> None:
        """Serve until SIGTERM or SIGINT; ``ready(address)`` is called once listening."""

        async def main() -> None:
            address = await self._open(host, port)
            loop = asyncio.get_running_loop()
            for signal_number in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signal_number, self._stopped.set)  # type: ignore[union-attr]
            if ready is not None:
                ready(address)
            await self._stopped.wait()  # type: ignore[union-attr]
            log.info("shutting down")
            await self._close(SHUTDOWN_GRACE_SECONDS)

        asyncio.run(main())

    # -- background thread ----------------------------------------------------------------------------
    def start(self, host: str | None = None, port: int | None = None) -> tuple[str, int]:
        """Serve on a daemon thread; returns the (host, port) listened on."""
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            async def main() -> None:
                try:
                    await self._open(host, port)
                except BaseException as error:
                    failure.append(error)
                    started.set()
                    return
                self._loop = asyncio.get_running_loop()
                started.set()
                await self._stopped.wait()  # type: ignore[union-attr]
                await self._close(SHUTDOWN_GRACE_SECONDS)

            asyncio.run(main())

        self._thread = threading.Thread(target=run, name="dpsql-serve", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self.address  # type: ignore[return-value]

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
