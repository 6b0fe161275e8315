"""What the server reads in a statement's text before dpsql sees it, without parsing it: where its
statements end, its first words, whether it reads the catalog, the cost comment
(``/* dpsql: epsilon=0.1 */``, read only in block comments — not in a ``--`` comment or a string — by
:func:`dpsql.sql.settings.cost_comment`, the parser every entry point uses), and PostgreSQL's ``$n``
parameters (turned into dpsql's ``?``). Quotes and comments are found by one scanner
(:func:`dpsql.sql.text.segments`), so a ``;`` or ``$1`` inside them is never taken for code.

>>> placeholders_to_qmark("SELECT sex, COUNT(*) FROM t WHERE age > $2 AND sex = '$1' AND race = $1 GROUP BY sex")
("SELECT sex, COUNT(*) FROM t WHERE age > ? AND sex = '$1' AND race = ? GROUP BY sex", (1, 0))
>>> split_statements("SET dpsql.epsilon = 0.1; SELECT ';' FROM t;")
['SET dpsql.epsilon = 0.1', "SELECT ';' FROM t"]
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dpsql.sql.text import closing_quote as _closing_quote
from dpsql.sql.text import segments as _segments

_PARAMETER = re.compile(r"\$(\d+)")
_CATALOG = re.compile(r"\b(pg_catalog|information_schema|pg_[a-z_]+)\b", re.IGNORECASE)


def placeholders_to_qmark(sql: str) -> tuple[str, tuple[int, ...]]:
    """``$n`` parameters outside quotes and comments become ``?``; the tuple holds, per ``?``, the
    0-based index of the parameter it stands for (``$2 ... $1`` → ``(1, 0)``)."""
    order: list[int] = []

    def replace(index: int) -> str:
        order.append(index)
        return "?"

    return _substitute(sql, replace), tuple(order)


def _substitute(sql: str, replacement: Callable[[int], str]) -> str:
    out = []
    for start, end, is_code in _segments(sql):
        text = sql[start:end]
        out.append(_PARAMETER.sub(lambda match: replacement(int(match.group(1)) - 1), text) if is_code else text)
    return "".join(out)


def split_statements(sql: str) -> list[str]:
    """The statements of a simple-query string: split at each ``;`` in code, empty ones dropped."""
    statements, start = [], 0
    for begin, end, is_code in _segments(sql):
        if not is_code:
            continue
        position = sql.find(";", begin, end)
        while position >= 0:
            statements.append(sql[start:position])
            start = position + 1
            position = sql.find(";", start, end)
    statements.append(sql[start:])
    return [s.strip() for s in statements if _code(s).strip()]


def _code(sql: str, quoted: bool = True) -> str:
    """``sql`` without its comments (and without its quoted text unless ``quoted``)."""
    kept = "'\""
    return "".join(
        sql[start:end] if is_code or (quoted and sql[start] in kept) else " " for start, end, is_code in _segments(sql)
    )


def first_words(sql: str, count: int = 3) -> str:
    """The first ``count`` words of the statement's code, upper-cased, separated by single spaces."""
    return " ".join(_code(sql).split()[:count]).upper()


def mentions_catalog(sql: str) -> bool:
    """Whether the code names ``pg_catalog``, ``information_schema`` or a ``pg_*`` relation."""
    return _CATALOG.search(_code(sql, quoted=False)) is not None


def split_list(text: str) -> list[str]:
    """Comma-separated items outside quotes and parentheses (``EXECUTE q ('a,b', 2)``'s arguments)."""
    items, depth, start, index = [], 0, 0, 0
    while index < len(text):
        character = text[index]
        if character in "'\"":
            index = _closing_quote(text, index)
            continue
        depth += {"(": 1, ")": -1}.get(character, 0)
        if character == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
        index += 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]
