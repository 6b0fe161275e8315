"""PEP 249 type objects and constructors.

dpsql returns two kinds of column: group keys (category values, integers, bin labels — ``STRING`` or
``NUMBER``) and released counts (floats, ``NUMBER``). The date/time/binary constructors exist because
PEP 249 requires them; they are plain aliases of the standard library types.
"""

from __future__ import annotations

import datetime
import time


class DBAPITypeObject:
    """Compares equal to every type code in its group (PEP 249 "Type Objects")."""

    def __init__(self, name: str, *type_codes: str) -> None:
        self.name = name
        self.type_codes = frozenset(type_codes)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DBAPITypeObject):
            return self is other
        return other in self.type_codes

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<dpsql type {self.name}>"


STRING = DBAPITypeObject("STRING", "STRING", "VARCHAR")
BINARY = DBAPITypeObject("BINARY", "BINARY", "BLOB")
NUMBER = DBAPITypeObject("NUMBER", "NUMBER", "BIGINT", "DOUBLE", "INTEGER")
DATETIME = DBAPITypeObject("DATETIME", "DATETIME", "DATE", "TIMESTAMP", "TIME")
ROWID = DBAPITypeObject("ROWID", "ROWID")

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:  # noqa: N802 - PEP 249 name
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:  # noqa: N802 - PEP 249 name
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:  # noqa: N802 - PEP 249 name
    return Timestamp(*time.localtime(ticks)[:6])
