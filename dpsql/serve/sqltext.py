"""What the server reads in a statement's text before dpsql sees it: PostgreSQL's ``$n`` parameters
(turned into dpsql's ``?``) and the tables named (to pick the connection that holds them). The cost
comment (``/* dpsql: epsilon=0.1 */``) and ``SET dpsql.*`` are read by :mod:`dpsql.sql.settings`, the one
parser every entry point uses.

>>> placeholders_to_qmark("SELECT sex, COUNT(*) FROM t WHERE age > $2 AND sex = '$1' AND race = $1 GROUP BY sex")
("SELECT sex, COUNT(*) FROM t WHERE age > ? AND sex = '$1' AND race = ? GROUP BY sex", (1, 0))
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError


_PARAMETER = re.compile(r"\$(\d+)")


def placeholders_to_qmark(sql: str) -> tuple[str, tuple[int, ...]]:
    """``$n`` parameters outside quotes and comments become ``?``; the tuple holds, per ``?``, the
    0-based index of the parameter it stands for (``$2 ... $1`` → ``(1, 0)``)."""
    order: list[int] = []

    def replace(index: int) -> str:
        order.append(index)
        return "?"

    return _substitute(sql, replace), tuple(order)


def inline_parameters(sql: str, literals: list[str]) -> str:
    """``sql`` with each ``$n`` outside quotes and comments replaced by ``literals[n - 1]`` (SQL text)."""
    return _substitute(sql, lambda index: literals[index] if 0 <= index < len(literals) else "NULL")


def has_parameters(sql: str) -> bool:
    found: list[int] = []
    _substitute(sql, lambda index: found.append(index) or "")  # type: ignore[func-returns-value]
    return bool(found)


def _substitute(sql: str, replacement: Callable[[int], str]) -> str:
    out = []
    for start, end, is_code in _segments(sql):
        text = sql[start:end]
        out.append(_PARAMETER.sub(lambda match: replacement(int(match.group(1)) - 1), text) if is_code else text)
    return "".join(out)


def _segments(sql: str) -> list[tuple[int, int, bool]]:
    """Spans of ``sql``: (start, end, whether it is code rather than a quoted string or comment)."""
    spans: list[tuple[int, int, bool]] = []
    index, code_start, length = 0, 0, len(sql)
    while index < length:
        two = sql[index : index + 2]
        if sql[index] in "'\"":
            close = _closing_quote(sql, index)
        elif two == "--":
            newline = sql.find("\n", index)
            close = length if newline < 0 else newline
        elif two == "/*":
            end = sql.find("*/", index + 2)
            close = length if end < 0 else end + 2
        else:
            index += 1
            continue
        spans.append((code_start, index, True))
        spans.append((index, close, False))
        index = code_start = close
    spans.append((code_start, length, True))
    return spans


def _closing_quote(sql: str, start: int) -> int:
    quote, index = sql[start], start + 1
    while index < len(sql):
        if sql[index] == quote:
            if sql[index + 1 : index + 2] == quote:  # a doubled quote stays inside
                index += 2
                continue
            return index + 1
        index += 1
    return len(sql)


def tables_named(sql: str) -> set[str]:
    """Lower-case names of the tables a statement reads (empty when sqlglot cannot parse it)."""
    try:
        return {table.name.lower() for expression in sqlglot.parse(sql, read="postgres") if expression is not None
                for table in expression.find_all(exp.Table)}
    except SqlglotError:
        return set()
