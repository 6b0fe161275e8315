"""A statement → its *private cores* and the *public shell* around them.

dpsql answers aggregations of a registered private table; everything computed from their released rows is
post-processing, free of privacy cost. :func:`bind` binds a statement's parameters once and reads it as
today's grammar when it can (a :class:`~dpsql.sql.statement.Statement`: one private core, nothing around it);
otherwise it splits the statement:

* every SELECT that aggregates a private table (``GROUP BY``, ``DISTINCT``, aggregate calls) — at the top,
  in a subquery, a CTE, a member of a set operation or a scalar subquery — becomes a *core*: ``SELECT <its
  group keys>, <its GROUPING() calls>, <its aggregate calls> FROM <table> WHERE … GROUP BY …``, each output
  named ``__dpsql_k<i>`` / ``__dpsql_g<i>`` / ``__dpsql_a<i>``, checked and released by the one pipeline
  (all cores of a request are one batch: one plan, one read, one charge);
* the SELECT itself stays in the *shell*, rewritten to read the core's released rows as the relation
  ``__dpsql_core_<n>``: its aggregate calls and group keys become those columns, its HAVING its WHERE
  (applied to released values), and everything else — expressions and functions over aggregates, CASE,
  casts, aliases, window functions, ORDER BY / LIMIT / OFFSET / FETCH, outer SELECTs, CTEs, set operations,
  joins of released rows with public tables — is left to DuckDB (:mod:`dpsql.post_processing`).

A SELECT that reads a private table without aggregating it (``SELECT * FROM t``), or joins it, is refused:
the shell never names a private table. Names beginning ``__dpsql_`` are dpsql's own and refused in SQL.

**Error bars.** A core's released values come with standard errors, kept beside them as hidden columns
(``__dpsql_se_<column>``). Where a shell column is an affine function ``a·v + b`` of ONE released value
``v`` (``SUM(x) * 2``, ``COUNT(*) + 1``, ``-AVG(x)``, a column passed through a subquery, a CTE, a join or a
``UNION ALL``), its standard error ``|a|·se(v)`` is computed beside it the same way; any other column has
none (its errors are None) — a sum of released values would need their covariances. Stars never show the
hidden columns (``* EXCLUDE (…)``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.sql.bounded_expressions import number_of
from dpsql.sql.data_vectors import assigned, composed, item_vector, node_vector
from dpsql.sql.having import is_aggregate
from dpsql.sql.parse import bind_parameters, column_qualifier, names_table, table_path
from dpsql.sql.settings import TextCost
from dpsql.sql.statement import Statement, check_statement, statement_cost

PREFIX = "__dpsql_"
CORE = "__dpsql_core_"
ERROR = "__dpsql_se_"  # the hidden standard-error column of a released column: ERROR + its name
SET_ID = "__dpsql_set"  # the GROUPING() id of a core's row, when the cores of one statement are joined over grouping sets
VALUE = "__dpsql_a"  # a core's released aggregates: VALUE + their number (keys: __dpsql_k<i>, GROUPING(): __dpsql_g<i>)
REFERENCE = "docs/sql.md"
_NUMERIC_CASTS = {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL}
_QUERIES = (exp.Select, exp.SetOperation, exp.Subquery)


@dataclass(frozen=True)
class Core:
    """A private aggregation of a shell: released as the relation ``relation`` (its statement's output names
    as columns, plus ``__dpsql_se_<name>`` for each released value)."""

    relation: str
    statement: Statement


@dataclass(frozen=True, eq=False)
class Shell:
    """A statement's public shell: ``query`` (DuckDB SQL) reads only its cores' released rows and public
    tables; ``errors`` maps output names to their hidden standard-error columns."""

    sql: str
    query: exp.Expression
    cores: tuple[Core, ...]
    errors: dict[str, str]
    cost: TextCost = TextCost()
    checks: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        """The DuckDB SQL the shell runs (post-processing of released rows)."""
        return self.query.sql(dialect="duckdb")


Bound = Statement | Shell


def bind(tree: exp.Expression, parameters: Sequence[object] | None, sql: str, public: frozenset[str] = frozenset()) -> Bound:
    """Bind ``tree``'s parameters (on a copy) and read it: one private core as it is (a
    :class:`Statement`), else its cores and shell (module doc). ``public``: registered public tables, lower
    case (they stay in the shell)."""
    bound = tree.copy()
    bind_parameters(bound, parameters)
    cost, checks = statement_cost(bound, sql)
    _refuse_reserved(bound)
    try:
        statement = check_statement(bound, sql, cost, checks)  # changes ``bound``: the split starts from a fresh copy
    except (NotSupportedError, ProgrammingError):
        if not isinstance(tree, _QUERIES):
            raise  # not a query (INSERT, COPY, …): refused as it is
        # not one core as written: split it (which refuses what it cannot run, with its own reason)
    else:
        if not composed([item_vector(i) for b in statement.branches for i in b.query.select]):
            return statement
        # aggregates over several data vectors: one core per vector, joined in the shell (``dpsql.sql.data_vectors``)
    bound = tree.copy()
    bind_parameters(bound, parameters)
    statement_cost(bound, sql)  # takes Google's OPTIONS off the copy
    splitter = _Splitter(public)
    errors = splitter.statement(bound)
    if not splitter.cores:
        raise NotSupportedError(
            f"the statement reads no registered private table: dpsql answers aggregations of registered tables "
            f"(SELECT … COUNT(*) … FROM <table>); see {REFERENCE}"
        )
    return Shell(sql, bound, tuple(splitter.cores), errors, cost, checks)


def _refuse_reserved(tree: exp.Expression) -> None:
    for identifier in tree.find_all(exp.Identifier):
        if str(identifier.this).lower().startswith(PREFIX):
            raise ProgrammingError(f"the name {identifier.this!r} is reserved: names beginning {PREFIX} are dpsql's own; rename it")


# ---------------------------------------------------------------------------------------------------
# Scopes: what a query's sources are, and which of their columns carry standard errors.
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Output:
    """What a query gives its readers: visible output names by position (None when a star over a relation of
    unknown columns hides them) and, per output name (lower case), its hidden standard-error column."""

    names: list[str] | None
    errors: dict[str, str]
    hidden: list[str]  # the hidden columns it outputs (what a star over it must exclude)
    pending: dict[str, exp.Expression] = field(default_factory=dict)  # not appended (``append`` False): what could be


class _Splitter:
    def __init__(self, public: frozenset[str]) -> None:
        self.public = public
        self.cores: list[Core] = []

    def statement(self, tree: exp.Expression) -> dict[str, str]:
        if not isinstance(tree, _QUERIES):
            raise NotSupportedError(f"{type(tree).__name__.upper()} is not supported: dpsql only reads; write a SELECT; see {REFERENCE}")
        output = self.query(tree, {}, append=True)
        return {name: column for name, column in output.errors.items()}

    # -- queries --------------------------------------------------------------------------------------
    def query(self, node: exp.Expression, ctes: dict[str, _Output], append: bool) -> _Output:
        """Split the private aggregations of ``node`` in place; ``ctes``: the CTEs in scope (lower-case name →
        their output). ``append``: whether it may add hidden columns to its output (not inside a set operation
        that compares rows, or a DISTINCT)."""
        if isinstance(node, exp.Subquery):
            return self.query(node.this, ctes, append)
        ctes = dict(ctes)
        with_ = node.args.get("with_")
        if with_ is not None:
            for cte in with_.expressions:
                if with_.args.get("recursive"):
                    raise NotSupportedError(f"WITH RECURSIVE is not supported over released rows; write the CTEs out; see {REFERENCE}")
                ctes[cte.alias.lower()] = self.query(cte.this, ctes, append=True)
        if isinstance(node, exp.SetOperation):
            return self._set_operation(node, ctes, append)
        if isinstance(node, exp.Select):
            return self._select(node, ctes, append)
        if isinstance(node, exp.Values):
            return _Output(None, {}, [])
        raise NotSupportedError(f"{node.sql(dialect='duckdb')[:60]!r} is not supported here; write a SELECT; see {REFERENCE}")

    def _set_operation(self, node: exp.SetOperation, ctes: dict[str, _Output], append: bool) -> _Output:
        keeps_rows = _keeps_rows(node)
        members = _members(node) if keeps_rows else [node.this, node.expression]
        for member in (node.this, node.expression):
            if isinstance(member, exp.Select) and any(member.args.get(a) for a in ("order", "limit", "offset")):
                raise NotSupportedError(
                    f"{_set_name(node)}: put ORDER BY / LIMIT / OFFSET after the last SELECT (they apply to all rows), or "
                    "parenthesise the SELECT they belong to"
                )
        outputs = [self.query(member, ctes, append=False) for member in members]
        names = outputs[0].names
        widths = {len(o.names) for o in outputs if o.names is not None}
        if len(widths) > 1:
            raise ProgrammingError(f"{_set_name(node)}: every SELECT must have the same number of columns, not {sorted(widths)}")
        if not (append and keeps_rows) or names is None or any(o.names is None or len(o.names) != len(names) for o in outputs):
            return _Output(names, {}, [])
        positions = [p for p in range(len(names)) if any(o.names[p].lower() in o.pending for o in outputs)]  # type: ignore[index]
        for member, output in zip(members, outputs):
            assert output.names is not None
            for p in positions:  # a member without an error bar there gives NULL (its rows have none)
                error = output.pending.get(output.names[p].lower(), exp.cast(exp.Null(), "DOUBLE"))
                _innermost_select(member).append("expressions", exp.alias_(error, ERROR + names[p], quoted=True))
        hidden = [ERROR + names[p] for p in positions]
        return _Output(names, {names[p].lower(): ERROR + names[p] for p in positions}, hidden)

    def _select(self, select: exp.Select, ctes: dict[str, _Output], append: bool) -> _Output:
        sources = _sources(select)
        private = [s for s in sources if isinstance(s, exp.Table) and self._is_private(s, ctes)]
        if private:
            if len(sources) > 1 and not all(isinstance(s, exp.Table) and s.name.lower() not in ctes for s in sources):
                raise NotSupportedError(
                    f"a JOIN that reads the private table {'.'.join(table_path(private[0]))!r} is not supported: aggregate each private "
                    f"table in a subquery of its own and join the released rows; see {REFERENCE}"
                )
            for nested in _nested_queries(select, ("where",)):
                self.query(nested, ctes, append=False)
            return self._core(select, private[0], append)
        scope: dict[str | None, _Output] = {}
        for source in sources:
            scope[_source_alias(source)] = self._source(source, ctes)
        for nested in _nested_queries(select, ()):
            self.query(nested, ctes, append=False)
        if any(j.args.get("method") and str(j.args.get("method")).upper() == "NATURAL" for j in select.args.get("joins") or ()):
            if any(o.hidden for o in scope.values()):
                raise NotSupportedError(f"NATURAL JOIN of released rows is not supported; write JOIN … USING (columns); see {REFERENCE}")
        return _propagate(select, scope, append)

    def _source(self, source: exp.Expression, ctes: dict[str, _Output]) -> _Output:
        if isinstance(source, exp.Subquery):
            return self.query(source.this, ctes, append=True)
        if isinstance(source, exp.Table):
            if not isinstance(source.this, exp.Identifier):
                raise NotSupportedError(
                    f"FROM {source.sql(dialect='duckdb')[:60]!r}: table functions are not supported over released rows; "
                    f"read registered tables; see {REFERENCE}"
                )
            name = source.name.lower()
            if not source.args.get("db") and name in ctes:
                return ctes[name]
            self._public_name(source)
            return _Output(None, {}, [])  # a public table: no hidden columns
        if isinstance(source, exp.Values):
            return _Output(None, {}, [])
        raise NotSupportedError(f"FROM {source.sql(dialect='duckdb')[:60]!r} is not supported over released rows; see {REFERENCE}")

    def _public_name(self, table: exp.Table) -> None:
        """Name a public table as the engine of shells holds it (``public.regions`` → ``regions``)."""
        path = tuple(part.lower() for part in table_path(table))
        registered = next((name for name in self.public if names_table(path, tuple(name.split(".")))), None)
        if registered is None:
            return
        parts = registered.split(".")
        table.set("catalog", None)
        table.set("db", exp.to_identifier(parts[-2]) if len(parts) > 1 else None)
        table.set("this", exp.to_identifier(parts[-1]))

    def _is_private(self, table: exp.Table, ctes: dict[str, _Output]) -> bool:
        if not isinstance(table.this, exp.Identifier):
            return False
        path = tuple(part.lower() for part in table_path(table))
        if len(path) == 1 and path[0] in ctes:
            return False
        return not any(names_table(path, tuple(name.split("."))) for name in self.public)

    # -- a private aggregation -----------------------------------------------------------------------
    def _core(self, select: exp.Select, table: exp.Table, append: bool) -> _Output:
        name = ".".join(table_path(table))
        if any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)) for e in select.expressions):
            raise NotSupportedError(
                f"SELECT * FROM {name} would show private rows: dpsql releases aggregates; write SELECT <columns>, COUNT(*) "
                f"FROM {name} GROUP BY <columns>; see {REFERENCE}"
            )
        if not select.args.get("joins"):  # a join's qualifiers are checked with its FROM clause (``dpsql.sql.parse``)
            _check_qualifiers(select, table)
        for node in _aggregates(select):
            rewritten = _of_a_column(node)
            if rewritten is not None:
                node.replace(rewritten)
        aggregates = _aggregates(select)
        group = _resolved_group(select)
        if not aggregates and group is None and not select.args.get("distinct"):
            raise NotSupportedError(
                f"SELECT … FROM {name} without an aggregate would show private rows: dpsql releases aggregates; add COUNT(*) "
                f"and GROUP BY, or SELECT DISTINCT the columns (their declared values); see {REFERENCE}"
            )
        if group is None and select.args.get("distinct") and not aggregates:
            group = exp.Group(expressions=[_unaliased(e).copy() for e in select.expressions])
        keys = _group_keys(group)
        groupings = _distinct(n for n in _expressions_of(select) if isinstance(n, exp.Grouping))
        outputs = _output_names(select)
        index = len(self.cores)
        relation = f"{CORE}{index}"
        key_names = {text: f"{PREFIX}k{i}" for i, text in enumerate(keys)}
        grouping_names = {text: f"{PREFIX}g{i}" for i, text in enumerate(groupings)}
        aggregate_names = {text: f"{VALUE}{i}" for i, text in enumerate(_distinct(aggregates))}
        distinct = _distinct(aggregates)
        vectors = assigned([node_vector(node) for node in distinct.values()])
        relations = []
        sets = group is not None and keys and (any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets"))
                                               or any(isinstance(e, (exp.Rollup, exp.Cube, exp.GroupingSets)) for e in group.expressions))
        # several cores of grouping sets: a rolled-up key and a NULL key are both NULL, so the cores' rows are matched
        # on which grouping set they belong to too
        set_id = [exp.alias_(exp.Grouping(expressions=[node.copy() for node in keys.values()]), SET_ID)] if sets and len(set(vectors)) > 1 else []
        for vector in dict.fromkeys(vectors) or [None]:  # one core per data vector (``dpsql.sql.data_vectors``), in order
            core = exp.Select(expressions=[
                *(exp.alias_(node.copy(), key_names[text]) for text, node in keys.items()),
                *(exp.alias_(node.copy(), grouping_names[text]) for text, node in groupings.items()),
                *(exp.alias_(node.copy(), aggregate_names[text]) for (text, node), v in zip(distinct.items(), vectors) if v == vector),
                *(s.copy() for s in set_id),
            ])
            core.set("from_", select.args["from_"].copy())
            if select.args.get("joins"):
                core.set("joins", [join.copy() for join in select.args["joins"]])
            for arg in ("where", "sample"):  # a sampling clause goes to the core, whose check refuses it
                if select.args.get(arg) is not None:
                    core.set(arg, select.args[arg].copy())
            if group is not None:
                core.set("group", group.copy())
            statement = check_statement(core, core.sql(dialect="duckdb"), TextCost(), ())
            relations.append(f"{CORE}{len(self.cores)}")
            self.cores.append(Core(relations[-1], statement))
        values = {vector: [aggregate_names[t] for t, v in zip(distinct, vectors) if v == vector] for vector in dict.fromkeys(vectors) or [None]}
        aliases = {o.lower() for o in outputs}
        replaced = {**aggregate_names, **grouping_names}

        def rewrite(node: exp.Expression) -> exp.Expression:
            if is_aggregate(node) or isinstance(node, exp.Grouping) or (isinstance(node, exp.Filter) and is_aggregate(node.this)):
                text = _key_text(node)
                if text in replaced:
                    return exp.column(replaced[text])
            if isinstance(node, _QUERIES):
                return node
            text = _key_text(node) if not isinstance(node, (exp.Literal, exp.Star)) else None
            if text is not None and text in key_names:
                return exp.column(key_names[text])
            return node

        expressions = [exp.alias_(_unaliased(e).transform(rewrite, copy=False), o, quoted=not o.isidentifier() or None) for e, o in zip(select.expressions, outputs)]
        select.set("expressions", expressions)
        having = select.args.get("having")
        select.set("where", exp.Where(this=having.this.transform(rewrite, copy=False)) if having is not None else None)
        for arg in ("having", "group"):
            select.set(arg, None)
        for arg in ("order", "qualify", "windows"):
            value = select.args.get(arg)
            if value is not None:
                select.set(arg, value.transform(rewrite, copy=False) if not isinstance(value, list) else [v.transform(rewrite, copy=False) for v in value])
        if len(relations) == 1:
            select.set("from_", exp.From(this=exp.to_table(relation)))
        else:
            matched = [*key_names.values(), *grouping_names.values(), *([SET_ID] if set_id else [])]
            select.set("from_", exp.From(this=_joined_cores(relations, matched, list(values.values()))))
        select.set("joins", None)
        _check_no_private_columns(select, name, aliases)
        errors = {aggregate_names[text]: ERROR + aggregate_names[text] for text in aggregate_names}
        scope = {None: _Output(None, {n.lower(): e for n, e in errors.items()}, list(errors.values()))}
        return _propagate(select, scope, append)


def _joined_cores(relations: list[str], keys: list[str], values: list[list[str]]) -> exp.Expression:
    """The released rows of a statement's cores over different data vectors, side by side: each core's values
    (and their hidden standard errors) on the rows of equal group keys and GROUPING() ids (NULL equal to NULL:
    a rolled-up or NULL key). Every core releases every declared group cell, so no row is lost."""
    aliases = [f"{PREFIX}c{i}" for i in range(len(relations))]
    columns = [exp.column(k, table=aliases[0]) for k in keys if k != SET_ID]
    for alias, names in zip(aliases, values):
        columns += [exp.column(n, table=alias) for name in names for n in (name, ERROR + name)]
    joined = exp.select(*columns).from_(exp.to_table(relations[0]).as_(aliases[0]))
    for relation, alias in zip(relations[1:], aliases[1:]):
        on = exp.and_(*(exp.NullSafeEQ(this=exp.column(k, table=aliases[0]), expression=exp.column(k, table=alias)) for k in keys)) if keys else exp.true()
        joined = joined.join(exp.to_table(relation).as_(alias), on=on)
    return joined.subquery(f"{PREFIX}cores")


# ---------------------------------------------------------------------------------------------------
# Pieces of a SELECT.
# ---------------------------------------------------------------------------------------------------


def _set_name(node: exp.SetOperation) -> str:
    kind = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}.get(type(node), "a set operation")
    return f"{kind} ALL" if kind == "UNION" and not node.args.get("distinct") else kind


def _keeps_rows(node: exp.Expression) -> bool:
    """A UNION ALL (not by name): every member's rows as they are, matched by position."""
    return isinstance(node, exp.Union) and not node.args.get("distinct") and not node.args.get("by_name")


def _members(node: exp.SetOperation) -> list[exp.Expression]:
    """The members of a UNION ALL, nested UNION ALLs without ORDER BY / LIMIT of their own flattened."""

    def chain(member: exp.Expression) -> list[exp.Expression]:
        inner = member.this if isinstance(member, exp.Subquery) else member
        if _keeps_rows(inner) and not any(x.args.get(a) for x in (member, inner) for a in ("order", "limit", "offset", "with_")):
            return chain(inner.this) + chain(inner.expression)
        return [member]

    return chain(node.this) + chain(node.expression)


def _innermost_select(node: exp.Expression) -> exp.Select:
    while isinstance(node, exp.Subquery):
        node = node.this
    assert isinstance(node, exp.Select)
    return node


def _sources(select: exp.Select) -> list[exp.Expression]:
    found = []
    source = select.args.get("from_")
    if source is not None:
        found.append(source.this)
    for join in select.args.get("joins") or ():
        found.append(join.this)
    for lateral in select.args.get("laterals") or ():
        raise NotSupportedError(f"LATERAL {lateral.sql(dialect='duckdb')[:40]!r} is not supported; see {REFERENCE}")
    return found


def _source_alias(source: exp.Expression) -> str | None:
    if source.alias:
        return source.alias.lower()
    if isinstance(source, exp.Table):
        return source.name.lower()
    return None


def _nested_queries(select: exp.Select, skip: tuple[str, ...]) -> Iterator[exp.Expression]:
    """The queries nested in ``select``'s expressions (scalar subqueries, IN / EXISTS), not in FROM or JOIN
    (sources) nor in the clauses ``skip`` names; each once, not those nested in them."""
    for arg, value in select.args.items():
        if arg in ("from_", "joins", "with_", *skip) or value is None:
            continue
        for child in value if isinstance(value, list) else [value]:
            if not isinstance(child, exp.Expression):
                continue
            stack = [child]
            while stack:
                node = stack.pop()
                if isinstance(node, _QUERIES):
                    yield node
                    continue
                stack.extend(node.iter_expressions())


def _expressions_of(select: exp.Select) -> Iterator[exp.Expression]:
    """Every node of the SELECT list, HAVING, ORDER BY and QUALIFY, nested queries left out."""
    return (node for _, node in _nodes_of(select, ("expressions", "having", "order", "qualify")))


def _nodes_of(select: exp.Select, clauses: tuple[str, ...]) -> Iterator[tuple[str, exp.Expression]]:
    """(clause, node) for every node of the SELECT's ``clauses``, nested queries left out."""
    for arg in clauses:
        value = select.args.get(arg)
        for child in value if isinstance(value, list) else [value] if value is not None else []:
            stack = [child]
            while stack:
                node = stack.pop()
                if isinstance(node, _QUERIES):
                    continue
                yield arg, node
                stack.extend(node.iter_expressions())


def _aggregates(select: exp.Select) -> list[exp.Expression]:
    """The aggregate calls of the SELECT list, HAVING, ORDER BY and QUALIFY (outermost ones; a window's own
    function is not one, but an aggregate inside it is: ``SUM(COUNT(*)) OVER ()``)."""
    found = []
    for node in _expressions_of(select):
        if not (is_aggregate(node) or (isinstance(node, exp.Filter) and is_aggregate(node.this))):
            continue
        if isinstance(node.parent, exp.Window) and node.arg_key == "this":
            continue
        if isinstance(node.parent, (exp.Filter, exp.WithinGroup)) and node.arg_key == "this":
            continue  # the whole FILTER / WITHIN GROUP call is the aggregate
        if any(is_aggregate(a) and not (isinstance(a.parent, exp.Window) and a.arg_key == "this") for a in _ancestors(node, select)):
            continue
        found.append(node)
    return found


def _ancestors(node: exp.Expression, stop: exp.Expression) -> Iterator[exp.Expression]:
    parent = node.parent
    while parent is not None and parent is not stop:
        yield parent
        parent = parent.parent


def _distinct(nodes: Iterator[exp.Expression] | list[exp.Expression]) -> dict[str, exp.Expression]:
    found: dict[str, exp.Expression] = {}
    for node in nodes:
        found.setdefault(_key_text(node), node)
    return found


def _key_text(node: exp.Expression) -> str:
    """An expression's text with table qualifiers and comments dropped, lower case: ``t.age // 10`` and ``age // 10`` match."""
    copy = node.copy()
    for column in copy.find_all(exp.Column):
        for part in ("table", "db", "catalog"):
            column.set(part, None)
    if isinstance(copy, exp.Alias):
        copy = copy.this
    return copy.sql(dialect="duckdb", comments=False).lower()


def _unaliased(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def _output_names(select: exp.Select) -> list[str]:
    """The name of each SELECT item: its alias, a column's name, else the expression's text (as dpsql names
    an unaliased aggregate: ``COUNT(*)``)."""
    names = []
    for item in select.expressions:
        if isinstance(item, exp.Alias):
            names.append(item.alias)
        elif isinstance(item, exp.Column):
            names.append(item.name)
        else:
            names.append(item.sql(dialect="duckdb"))
    return names


def _resolved_group(select: exp.Select) -> exp.Group | None:
    """The GROUP BY clause with positions and aliases of the SELECT list replaced by their expressions (a
    copy), GROUP BY ALL by the items without aggregates; None without GROUP BY."""
    group = select.args.get("group")
    if group is None:
        return None
    items = [(e.alias.lower() if isinstance(e, exp.Alias) else None, _unaliased(e)) for e in select.expressions]
    if group.args.get("all"):
        return exp.Group(expressions=[node.copy() for _, node in items if not any(is_aggregate(n) for n in node.walk())])
    resolved = group.copy()
    aliases = {alias: node for alias, node in items if alias}

    def substitute(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Literal) and not node.is_string and node.parent is not None and isinstance(node.parent, (exp.Group, exp.Tuple, exp.Cube, exp.Rollup, exp.GroupingSets)):
            position = int(str(node.this)) if str(node.this).isdigit() else 0
            if not 1 <= position <= len(items):
                raise ProgrammingError(f"GROUP BY {node.this}: a position must be between 1 and {len(items)} (the SELECT list's items)")
            target = items[position - 1][1]
            if is_aggregate(target):
                raise ProgrammingError(f"GROUP BY {node.this}: item {position} of the SELECT list is an aggregate, not a group column; use the position of a group column")
            return target.copy()
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            target = aliases[node.name.lower()]
            if not (isinstance(target, exp.Column) and target.name.lower() == node.name.lower()):
                if any(c.name.lower() == node.name.lower() for c in target.find_all(exp.Column)):
                    raise NotSupportedError(
                        f"GROUP BY {node.name}: the alias {node.name!r} is also the name of the column its expression reads; "
                        f"use another alias for {target.sql(dialect='duckdb')[:60]!r}"
                    )
                return target.copy()
        return node

    return resolved.transform(substitute, copy=False)  # type: ignore[return-value]


def _group_keys(group: exp.Group | None) -> dict[str, exp.Expression]:
    """The distinct grouping expressions of a (resolved) GROUP BY, CUBE / ROLLUP / GROUPING SETS flattened."""
    if group is None:
        return {}
    found: list[exp.Expression] = []

    def visit(node: exp.Expression) -> None:
        if isinstance(node, (exp.Cube, exp.Rollup, exp.GroupingSets, exp.Tuple)):
            for element in node.expressions:
                visit(element)
        elif isinstance(node, exp.Paren) and isinstance(node.this, exp.Tuple):
            visit(node.this)
        else:
            found.append(node.this if isinstance(node, exp.Paren) else node)

    for element in group.expressions:
        visit(element)
    for arg in ("grouping_sets", "cube", "rollup"):
        value = group.args.get(arg)
        for element in value if isinstance(value, list) else [value] if value else []:
            visit(element)
    return _distinct(found)


def _check_qualifiers(select: exp.Select, table: exp.Table) -> None:
    """A qualified column of an aggregating SELECT names its table: its alias, its name or the end of its
    qualified name (``t.age``, ``main.t.age``)."""
    path = tuple(part.lower() for part in table_path(table))
    names = {path[-1], table.alias.lower()} if table.alias else {path[-1]}
    for node in [*_expressions_of(select), *(select.args["group"].walk() if select.args.get("group") else ())]:
        if isinstance(node, exp.Column):
            qualifier = tuple(part.lower() for part in column_qualifier(node))
            if qualifier and not (qualifier == path[-len(qualifier):] or (len(qualifier) == 1 and qualifier[0] in names)):
                raise ProgrammingError(
                    f"{'.'.join(column_qualifier(node))!r} is not the table or its alias in FROM; use the table's name or alias"
                )


def _check_no_private_columns(select: exp.Select, table: str, aliases: set[str]) -> None:
    """After the rewrite, a column left in the shell SELECT reads private rows (it is neither grouped nor
    aggregated): refused, as SQL refuses it."""
    for arg, node in _nodes_of(select, ("expressions", "where", "order", "qualify")):
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star) and not node.name.startswith(PREFIX):
            if arg == "expressions" or node.table or node.name.lower() not in aliases:
                raise ProgrammingError(
                    f"column {node.name!r} of {table} must appear in the GROUP BY clause or be used in an aggregate "
                    "function (the statement would show private rows)"
                )


# ---------------------------------------------------------------------------------------------------
# Error bars through the shell.
# ---------------------------------------------------------------------------------------------------


def _propagate(select: exp.Select, scope: dict[str | None, _Output], append: bool) -> _Output:
    """Exclude the sources' hidden columns from stars; when ``append`` and the SELECT keeps rows as they are
    (no DISTINCT, GROUP BY or aggregate), add the hidden standard error of each output that is an affine
    function of one released value (module doc)."""
    hidden = [h for output in scope.values() for h in output.hidden]
    aggregating = select.args.get("distinct") or select.args.get("group") or any(_aggregates_in(e) for e in select.expressions)
    names: list[str] | None = []
    errors: dict[str, exp.Expression] = {}
    for item in select.expressions:
        star_of = _star_source(item)
        if star_of is not False:
            sources = [output for alias, output in scope.items() if star_of is None or alias == star_of]
            _exclude(item, [h for output in sources for h in output.hidden] if star_of is not None else hidden)
            if any(o.names is None for o in sources):
                names = None
            elif names is not None:
                names += [n for o in sources for n in o.names]  # type: ignore[union-attr]
            counts: dict[str, int] = {}
            for output in sources:
                for name in output.errors:
                    counts[name] = counts.get(name, 0) + 1
            for alias, output in scope.items():
                if output in sources:
                    for name, column in output.errors.items():
                        if counts[name] == 1:
                            errors.setdefault(name, exp.column(column, table=alias) if alias else exp.column(column))
            continue
        name = item.alias if isinstance(item, exp.Alias) else item.name if isinstance(item, exp.Column) else item.sql(dialect="duckdb")
        if names is not None:
            names.append(name)
        found = _affine(_unaliased(item))
        if found is None:
            continue
        column, factor = found
        source = _source_of(column, scope)
        if source is not None:
            alias, output = source
            reference = exp.column(output.errors[column.name.lower()], table=alias) if alias else exp.column(output.errors[column.name.lower()])
            errors[name.lower()] = reference if abs(factor) == 1 else exp.Mul(this=exp.Literal.number(abs(factor)), expression=reference)
    if names is not None:
        counts = {}
        for name in names:
            counts[name.lower()] = counts.get(name.lower(), 0) + 1
        errors = {name: e for name, e in errors.items() if counts.get(name, 0) == 1}
    if aggregating or names is None:
        return _Output(names, {}, [])
    if not append:
        return _Output(names, {}, [], errors)
    exported = {}
    for name in names:
        if name.lower() in errors:
            select.append("expressions", exp.alias_(errors[name.lower()], ERROR + name, quoted=True))
            exported[name.lower()] = ERROR + name
    return _Output(names, exported, list(exported.values()))


def _aggregates_in(node: exp.Expression) -> bool:
    return any(is_aggregate(n) and not (isinstance(n.parent, exp.Window) and n.arg_key == "this") for n in node.walk() if not isinstance(n, _QUERIES))


def _star_source(item: exp.Expression) -> str | None | bool:
    """``*`` → None, ``t.*`` → "t", anything else → False."""
    if isinstance(item, exp.Star):
        return None
    if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
        return item.table.lower()
    return False


def _exclude(item: exp.Expression, hidden: list[str]) -> None:
    if not hidden:
        return
    star = item if isinstance(item, exp.Star) else item.this
    excluded = list(star.args.get("except_") or [])
    star.set("except_", excluded + [exp.column(h, quoted=True) for h in dict.fromkeys(hidden)])


def _source_of(column: exp.Column, scope: dict[str | None, _Output]) -> tuple[str | None, _Output] | None:
    qualifier = column_qualifier(column)
    name = column.name.lower()
    if qualifier:
        output = scope.get(qualifier[-1].lower())
        return (qualifier[-1].lower(), output) if output is not None and name in output.errors else None
    found = [(alias, output) for alias, output in scope.items() if name in output.errors]
    return found[0] if len(found) == 1 else None


def _affine(node: exp.Expression) -> tuple[exp.Column, float] | None:
    """``(v, a)`` when ``node`` is ``a·v + b`` for one column ``v`` and numbers ``a ≠ 0``, ``b``; else None."""
    found = _linear(node)
    return None if found is None else (found[0], found[1])


def _linear(node: exp.Expression) -> tuple[exp.Column, float, float] | None:
    """``(v, a, b)`` when ``node`` is ``a·v + b`` for one column ``v`` and numbers ``a ≠ 0``, ``b``; else None."""
    if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
        return node, 1.0, 0.0
    if isinstance(node, exp.Paren):
        return _linear(node.this)
    if isinstance(node, exp.Neg):
        inner = _linear(node.this)
        return None if inner is None else (inner[0], -inner[1], -inner[2])
    if isinstance(node, exp.Cast) and node.to.this in _NUMERIC_CASTS:
        return _linear(node.this)
    if not isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        return None
    left, right = node.this, node.expression
    left_number, right_number = number_of(left), number_of(right)
    if isinstance(node, (exp.Add, exp.Sub)):
        sign = -1.0 if isinstance(node, exp.Sub) else 1.0
        if right_number is not None:
            inner = _linear(left)
            return None if inner is None else (inner[0], inner[1], inner[2] + sign * right_number)
        if left_number is not None:
            inner = _linear(right)
            return None if inner is None else (inner[0], sign * inner[1], left_number + sign * inner[2])
        return None
    if isinstance(node, exp.Mul):
        number, other = (right_number, left) if right_number is not None else (left_number, right)
    else:
        number, other = (None if right_number in (None, 0) else 1 / right_number), left  # type: ignore[operator]
    if number is None or number == 0:
        return None
    inner = _linear(other)
    return None if inner is None else (inner[0], inner[1] * number, inner[2] * number)


_MOMENTS = (exp.Sum, exp.Avg, exp.Variance, exp.VariancePop, exp.Stddev, exp.StddevSamp, exp.StddevPop)
_ORDER_STATISTICS = (exp.Median, exp.Quantile, exp.PercentileCont, exp.PercentileDisc, exp.Min, exp.Max)


def _of_a_column(node: exp.Expression) -> exp.Expression | None:
    """An aggregate of an affine expression of one column, written with aggregates of the column itself
    (None when ``node`` is no such aggregate): ``SUM(a·x + b) = a·SUM(x) + b·COUNT(x)``, ``AVG(a·x + b) =
    a·AVG(x) + b``, ``VARIANCE(a·x + b) = a²·VARIANCE(x)``, ``STDDEV(a·x + b) = |a|·STDDEV(x)``, a quantile of
    ``a·x + b`` the same map of x's quantile (``1 − q``'s, ``MIN`` for ``MAX``, when ``a < 0``), ``COUNT(a·x + b)
    = COUNT(x)``, and ``SUM(c) = c·COUNT(*)`` for a number ``c``. The values are clamped to x's bounds, as interval arithmetic would bound the expression."""
    inner = node.this if isinstance(node, exp.WithinGroup) else node
    argument = node.expression.expressions[0].this if isinstance(node, exp.WithinGroup) and node.expression.expressions else inner.this
    if not isinstance(inner, (exp.Count, *_MOMENTS, *_ORDER_STATISTICS)) or argument is None or isinstance(argument, (exp.Column, exp.Star, exp.Distinct)):
        return None
    if isinstance(inner, exp.Sum) and number_of(argument) is not None:  # SUM(1) (Tableau's count): a multiple of COUNT(*)
        return exp.paren(exp.Mul(this=_literal(number_of(argument)), expression=exp.Count(this=exp.Star())))  # type: ignore[arg-type]
    found = _linear(argument)
    if found is None:
        return None
    column, a, b = found
    plain = inner.copy()
    if isinstance(node, exp.WithinGroup):
        rebuilt = node.copy()
        rebuilt.expression.expressions[0].set("this", column.copy())
        plain = rebuilt
    else:
        plain.set("this", column.copy())
    if isinstance(inner, exp.Count):
        return plain
    if isinstance(inner, exp.Sum):
        scaled = exp.Mul(this=_literal(a), expression=plain)
        return exp.paren(scaled if b == 0 else exp.Add(this=scaled, expression=exp.Mul(this=_literal(b), expression=exp.Count(this=column.copy()))))
    if isinstance(inner, (exp.Variance, exp.VariancePop)):
        return exp.paren(exp.Mul(this=_literal(a * a), expression=plain))
    if isinstance(inner, (exp.Stddev, exp.StddevSamp, exp.StddevPop)):
        return exp.paren(exp.Mul(this=_literal(abs(a)), expression=plain))
    if a < 0 and isinstance(inner, _ORDER_STATISTICS):
        plain = _reversed(plain)
        if plain is None:
            return None
    return exp.paren(exp.Add(this=exp.Mul(this=_literal(a), expression=plain), expression=_literal(b)))


def _reversed(node: exp.Expression) -> exp.Expression | None:
    """The order statistic of the other end: MAX for MIN, the 1 − q quantile for the q quantile."""
    inner = node.this if isinstance(node, exp.WithinGroup) else node
    if isinstance(inner, (exp.Min, exp.Max)):
        return (exp.Max if isinstance(inner, exp.Min) else exp.Min)(this=inner.this)
    if isinstance(inner, exp.Median):
        return node
    fraction = inner.this if isinstance(node, exp.WithinGroup) else (inner.args.get("quantile") if isinstance(inner, exp.Quantile) else inner.expression)
    value = number_of(fraction) if fraction is not None else None
    if value is None:
        return None
    fraction.replace(_literal(1 - value))
    return node


def _literal(number: float) -> exp.Expression:
    text = repr(int(number)) if float(number).is_integer() else repr(number)
    return exp.Neg(this=exp.Literal.number(text[1:])) if text.startswith("-") else exp.Literal.number(text)


def core_statements(bound: Sequence[Bound]) -> list[Statement]:
    """The statements the pipeline plans for a request: each plain statement, and each shell's cores."""
    return [s for b in bound for s in ([b] if isinstance(b, Statement) else [c.statement for c in b.cores])]

