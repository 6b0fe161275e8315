"""Where a SQL text's quoted strings and comments are, found without parsing it: one scanner for what reads
a statement's text before sqlglot does (the cost comment, ``dpsql.sql.settings``; the server's statement
splitting and ``$n`` parameters, ``dpsql.serve.sqltext``), so a ``;``, ``$1`` or ``/* dpsql: … */`` inside a
string or another comment is never taken for code.

>>> [(sql[a:b], code) for sql in ["SELECT '/*' -- x"] for a, b, code in segments(sql)]
[('SELECT ', True), ("'/*'", False), (' ', True), ('-- x', False), ('', True)]
"""

from __future__ import annotations


def segments(sql: str) -> list[tuple[int, int, bool]]:
    """Spans of ``sql``: (start, end, whether it is code rather than a quoted string or comment)."""
    spans: list[tuple[int, int, bool]] = []
    index, code_start, length = 0, 0, len(sql)
    while index < length:
        two = sql[index : index + 2]
        if sql[index] in "'\"":
            close = closing_quote(sql, index)
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


def closing_quote(sql: str, start: int) -> int:
    """The end of the quoted string (or identifier) opening at ``start``: after its closing quote."""
    quote, index = sql[start], start + 1
    while index < len(sql):
        if sql[index] == quote:
            if sql[index + 1 : index + 2] == quote:  # a doubled quote stays inside
                index += 2
                continue
            return index + 1
        index += 1
    return len(sql)
