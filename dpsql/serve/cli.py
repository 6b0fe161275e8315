"""The ``serve`` and ``hash-password`` subcommands of :mod:`dpsql.cli`."""

from __future__ import annotations

import argparse
import getpass
import logging
import sys

from dpsql.errors import ProgrammingError
from dpsql.serve.config import ServeConfig
from dpsql.serve.passwords import hash_password
from dpsql.serve.server import Server


def run(arguments: argparse.Namespace) -> int:
    if arguments.command == "hash-password":
        print(hash_password(_read_password(), arguments.iterations))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s dpsql serve: %(message)s", stream=sys.stderr)
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # it warns about every SHOW/EXPLAIN the catalog parses
    password = None
    if arguments.demo:
        from dpsql.serve.demo import DEMO_USER, demo_config

        config, password = demo_config()
    else:
        config = ServeConfig.load(arguments.config)

    def ready(address: tuple[str, int]) -> None:
        host, port = address
        names = ", ".join(t.name for t in config.tables)
        print(f"dpsql serve: {names} on {host}:{port}{' (TLS)' if config.tls else ''}; stop with Ctrl-C or SIGTERM", flush=True)
        if password is not None:
            print(f"user: {DEMO_USER}\npassword: {password}", flush=True)
            print(f'connect: psql "host={host} port={port} user={DEMO_USER} dbname=dpsql"', flush=True)

    Server(config).serve_forever(arguments.host, arguments.port, ready)
    return 0


def _read_password() -> str:
    """From the terminal (asked twice), or the first line of standard input when it is not a terminal."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass("password: ")
    if getpass.getpass("again: ") != password:
        raise ProgrammingError("the two passwords differ")
    return password
