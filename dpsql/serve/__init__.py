"""``dpsql serve``: a PostgreSQL wire-protocol service over dpsql (see docs/serve.md).

Analysts connect with any PostgreSQL client (psql, psycopg, pandas, SQLAlchemy, BI tools), log in
with SCRAM-SHA-256, and each spends a durable budget of their own (or their group's). They never hold
a Python object of the engine, so nothing in-process (test hooks, the backend connection, the
registered relations) is within their reach. Needs the ``serve`` extra: ``pip install 'dpsql[serve]'``.
"""

from dpsql.serve.config import ServeConfig
from dpsql.serve.passwords import hash_password
from dpsql.serve.server import Server

__all__ = ["ServeConfig", "Server", "hash_password"]
