"""``pg_catalog`` and ``information_schema`` of the served tables, in a DuckDB database of their own.

What clients and BI tools send to browse a database — psql's ``\\dt`` and ``\\d``, pgjdbc's
``getTables``/``getColumns``, SQLAlchemy's inspector (1.4 and 2.x), Superset's dataset columns — is
ordinary SQL over PostgreSQL's catalog tables and functions. Rather than recognising each query, the
server keeps the slice of the catalog they read as real tables (``pg_class``, ``pg_attribute``,
``pg_type``, ``pg_description`` with each column's declared domain as its comment, …) and PostgreSQL's
catalog functions as DuckDB macros (``format_type``, ``col_description``, ``pg_table_is_visible``, …),
and runs the client's statement there: sqlglot reads it as PostgreSQL once, a few rewrites map what
DuckDB spells differently (``pg_catalog.``/``information_schema.`` names, ``::regclass``-style casts),
and DuckDB executes it. The database holds table names, column names, types and declared domains —
public facts of the configuration — and never a row of data.

Each session queries through a cursor of its own (its user name and database in DuckDB variables); a
statement that runs longer than :data:`CATALOG_SECONDS` is interrupted (57014).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import duckdb
import sqlglot
from pg_mimic import BOOL, FLOAT8, INT8, TEXT, PgError, ResultColumn
from sqlglot import exp
from sqlglot.errors import SqlglotError

import dpsql

CATALOG_SECONDS = 5.0  # a catalog statement running longer is interrupted
MAX_CATALOG_BYTES = 1 << 16  # longer catalog statements are refused before they are parsed
INT2, INT4, OID, FLOAT4, TEXT_ARRAY, INT2_ARRAY, OID_ARRAY = 21, 23, 26, 700, 1009, 1005, 1028
PUBLIC, PG_CATALOG, INFORMATION_SCHEMA = 2200, 11, 13000
# catalog tables clients name by oid (pg_description.classoid = 'pg_class'::regclass): rows of pg_class too
SYSTEM_RELATIONS = (("pg_class", 1259), ("pg_type", 1247), ("pg_attribute", 1249), ("pg_proc", 1255),
                    ("pg_namespace", 2615), ("pg_constraint", 2606), ("pg_database", 1262), ("pg_description", 2609))
FIRST_TABLE_OID = 16384
OWNER = 10

# (oid, name, format_type name, length, category, array oid) of the types the catalog describes
TYPES = (
    (16, "bool", "boolean", 1, "B", 1000), (17, "bytea", "bytea", -1, "U", 1001), (18, "char", '"char"', 1, "S", 1002),
    (19, "name", "name", 64, "S", 1003), (20, "int8", "bigint", 8, "N", 1016), (21, "int2", "smallint", 2, "N", 1005),
    (23, "int4", "integer", 4, "N", 1007), (25, "text", "text", -1, "S", 1009), (26, "oid", "oid", 4, "N", 1028),
    (114, "json", "json", -1, "U", 199), (700, "float4", "real", 4, "N", 1021), (701, "float8", "double precision", 8, "N", 1022),
    (1042, "bpchar", "character", -1, "S", 1014), (1043, "varchar", "character varying", -1, "S", 1015),
    (1082, "date", "date", 4, "D", 1182), (1083, "time", "time without time zone", 8, "D", 1183),
    (1114, "timestamp", "timestamp without time zone", 8, "D", 1115),
    (1184, "timestamptz", "timestamp with time zone", 8, "D", 1185), (1186, "interval", "interval", 16, "T", 1187),
    (1700, "numeric", "numeric", -1, "N", 1231), (2950, "uuid", "uuid", 16, "U", 2951), (3802, "jsonb", "jsonb", -1, "U", 3807),
    (2205, "regclass", "regclass", 4, "N", 2210), (2206, "regtype", "regtype", 4, "N", 2211), (24, "regproc", "regproc", 4, "N", 1008),
)
_ARRAY_ELEMENT = {array: oid for oid, _, _, _, _, array in TYPES}
_TYPE_OIDS = {name: oid for oid, _, name, _, _, _ in TYPES} | {"double": 701, "real": 700}

# DuckDB result types → PostgreSQL type OIDs (catalog answers)
_RESULT_OIDS = {
    "BOOLEAN": BOOL, "TINYINT": INT2, "SMALLINT": INT2, "INTEGER": INT4, "BIGINT": INT8, "HUGEINT": 1700,
    "UTINYINT": INT2, "USMALLINT": INT4, "UINTEGER": OID, "UBIGINT": 1700, "FLOAT": FLOAT4, "DOUBLE": FLOAT8,
    "VARCHAR": TEXT, "DATE": 1082, "TIMESTAMP": 1114, "TIMESTAMP WITH TIME ZONE": 1184, "JSON": 114,
    "VARCHAR[]": TEXT_ARRAY, "SMALLINT[]": INT2_ARRAY, "UINTEGER[]": OID_ARRAY, "INTEGER[]": 1007, "BIGINT[]": 1016,
}

# pg_catalog tables: name → columns ("name TYPE"); rows are inserted for the ones listed in _rows()
_TABLES = {
    "pg_namespace": "oid UINTEGER, nspname VARCHAR, nspowner UINTEGER, nspacl VARCHAR[]",
    "pg_class": (
        "oid UINTEGER, relname VARCHAR, relnamespace UINTEGER, reltype UINTEGER, reloftype UINTEGER, relowner UINTEGER, "
        "relam UINTEGER, relfilenode UINTEGER, reltablespace UINTEGER, relpages INTEGER, reltuples REAL, relallvisible INTEGER, "
        "reltoastrelid UINTEGER, relhasindex BOOLEAN, relisshared BOOLEAN, relpersistence VARCHAR, relkind VARCHAR, "
        "relnatts SMALLINT, relchecks SMALLINT, relhasrules BOOLEAN, relhastriggers BOOLEAN, relhassubclass BOOLEAN, "
        "relrowsecurity BOOLEAN, relforcerowsecurity BOOLEAN, relispopulated BOOLEAN, relreplident VARCHAR, "
        "relispartition BOOLEAN, relrewrite UINTEGER, relfrozenxid UINTEGER, relminmxid UINTEGER, relacl VARCHAR[], "
        "reloptions VARCHAR[], relpartbound VARCHAR"
    ),
    "pg_attribute": (
        "attrelid UINTEGER, attname VARCHAR, atttypid UINTEGER, attstattarget INTEGER, attlen SMALLINT, attnum SMALLINT, "
        "attndims INTEGER, attcacheoff INTEGER, atttypmod INTEGER, attbyval BOOLEAN, attalign VARCHAR, attstorage VARCHAR, "
        "attcompression VARCHAR, attnotnull BOOLEAN, atthasdef BOOLEAN, atthasmissing BOOLEAN, attidentity VARCHAR, "
        "attgenerated VARCHAR, attisdropped BOOLEAN, attislocal BOOLEAN, attinhcount INTEGER, attcollation UINTEGER, "
        "attacl VARCHAR[], attoptions VARCHAR[], attfdwoptions VARCHAR[], attmissingval VARCHAR"
    ),
    "pg_type": (
        "oid UINTEGER, typname VARCHAR, typnamespace UINTEGER, typowner UINTEGER, typlen SMALLINT, typbyval BOOLEAN, "
        "typtype VARCHAR, typcategory VARCHAR, typispreferred BOOLEAN, typisdefined BOOLEAN, typdelim VARCHAR, "
        "typrelid UINTEGER, typsubscript VARCHAR, typelem UINTEGER, typarray UINTEGER, typinput VARCHAR, typoutput VARCHAR, "
        "typreceive VARCHAR, typsend VARCHAR, typmodin VARCHAR, typmodout VARCHAR, typanalyze VARCHAR, typalign VARCHAR, "
        "typstorage VARCHAR, typnotnull BOOLEAN, typbasetype UINTEGER, typtypmod INTEGER, typndims INTEGER, "
        "typcollation UINTEGER, typdefaultbin VARCHAR, typdefault VARCHAR, typacl VARCHAR[]"
    ),
    "pg_description": "objoid UINTEGER, classoid UINTEGER, objsubid INTEGER, description VARCHAR",
    "pg_database": (
        "oid UINTEGER, datname VARCHAR, datdba UINTEGER, encoding INTEGER, datlocprovider VARCHAR, datistemplate BOOLEAN, "
        "datallowconn BOOLEAN, datconnlimit INTEGER, dattablespace UINTEGER, datcollate VARCHAR, datctype VARCHAR, "
        "daticulocale VARCHAR, daticurules VARCHAR, datcollversion VARCHAR, datacl VARCHAR[]"
    ),
    "pg_roles": (
        "oid UINTEGER, rolname VARCHAR, rolsuper BOOLEAN, rolinherit BOOLEAN, rolcreaterole BOOLEAN, rolcreatedb BOOLEAN, "
        "rolcanlogin BOOLEAN, rolreplication BOOLEAN, rolconnlimit INTEGER, rolpassword VARCHAR, rolvaliduntil TIMESTAMP, "
        "rolbypassrls BOOLEAN, rolconfig VARCHAR[]"
    ),
    "pg_auth_members": "oid UINTEGER, roleid UINTEGER, member UINTEGER, grantor UINTEGER, admin_option BOOLEAN",
    "pg_publication_namespace": "oid UINTEGER, pnpubid UINTEGER, pnnspid UINTEGER",
    "pg_am": "oid UINTEGER, amname VARCHAR, amhandler VARCHAR, amtype VARCHAR",
    "pg_settings": "name VARCHAR, setting VARCHAR, unit VARCHAR, category VARCHAR, short_desc VARCHAR, vartype VARCHAR",
    "pg_tablespace": "oid UINTEGER, spcname VARCHAR, spcowner UINTEGER",
    "pg_attrdef": "oid UINTEGER, adrelid UINTEGER, adnum SMALLINT, adbin VARCHAR",
    "pg_index": (
        "indexrelid UINTEGER, indrelid UINTEGER, indnatts SMALLINT, indnkeyatts SMALLINT, indisunique BOOLEAN, "
        "indisprimary BOOLEAN, indisexclusion BOOLEAN, indimmediate BOOLEAN, indisclustered BOOLEAN, indisvalid BOOLEAN, "
        "indisready BOOLEAN, indislive BOOLEAN, indisreplident BOOLEAN, indkey SMALLINT[], indcollation UINTEGER[], "
        "indclass UINTEGER[], indoption SMALLINT[], indexprs VARCHAR, indpred VARCHAR, indnullsnotdistinct BOOLEAN"
    ),
    "pg_constraint": (
        "oid UINTEGER, conname VARCHAR, connamespace UINTEGER, contype VARCHAR, condeferrable BOOLEAN, condeferred BOOLEAN, "
        "convalidated BOOLEAN, conrelid UINTEGER, contypid UINTEGER, conindid UINTEGER, conparentid UINTEGER, "
        "confrelid UINTEGER, confupdtype VARCHAR, confdeltype VARCHAR, confmatchtype VARCHAR, conislocal BOOLEAN, "
        "coninhcount INTEGER, connoinherit BOOLEAN, conkey SMALLINT[], confkey SMALLINT[], conbin VARCHAR"
    ),
    "pg_inherits": "inhrelid UINTEGER, inhparent UINTEGER, inhseqno INTEGER, inhdetachpending BOOLEAN",
    "pg_sequence": "seqrelid UINTEGER, seqtypid UINTEGER, seqstart BIGINT, seqincrement BIGINT, seqmax BIGINT, seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN",
    "pg_collation": "oid UINTEGER, collname VARCHAR, collnamespace UINTEGER, collowner UINTEGER, collprovider VARCHAR",
    "pg_enum": "oid UINTEGER, enumtypid UINTEGER, enumsortorder REAL, enumlabel VARCHAR",
    "pg_proc": (
        "oid UINTEGER, proname VARCHAR, pronamespace UINTEGER, proowner UINTEGER, prokind VARCHAR, prorettype UINTEGER, "
        "proargtypes UINTEGER[], proretset BOOLEAN, provolatile VARCHAR, proparallel VARCHAR, prosecdef BOOLEAN, "
        "proleakproof BOOLEAN, prolang UINTEGER, prosrc VARCHAR, proacl VARCHAR[]"
    ),
    "pg_trigger": "oid UINTEGER, tgrelid UINTEGER, tgname VARCHAR, tgenabled VARCHAR, tgisinternal BOOLEAN",
    "pg_rewrite": "oid UINTEGER, rulename VARCHAR, ev_class UINTEGER",
    "pg_policy": "oid UINTEGER, polname VARCHAR, polrelid UINTEGER, polcmd VARCHAR, polpermissive BOOLEAN, polroles UINTEGER[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_statistic_ext": "oid UINTEGER, stxrelid UINTEGER, stxname VARCHAR, stxnamespace UINTEGER, stxkind VARCHAR[], stxstattarget INTEGER",
    "pg_foreign_table": "ftrelid UINTEGER, ftserver UINTEGER",
    "pg_partitioned_table": "partrelid UINTEGER, partstrat VARCHAR",
    "pg_publication": "oid UINTEGER, pubname VARCHAR, puballtables BOOLEAN",
    "pg_publication_rel": "oid UINTEGER, prpubid UINTEGER, prrelid UINTEGER, prqual VARCHAR, prattrs SMALLINT[]",
    "pg_publication_tables": "pubname VARCHAR, schemaname VARCHAR, tablename VARCHAR",
    "pg_extension": "oid UINTEGER, extname VARCHAR, extnamespace UINTEGER, extversion VARCHAR",
    "pg_depend": "classid UINTEGER, objid UINTEGER, objsubid INTEGER, refclassid UINTEGER, refobjid UINTEGER, refobjsubid INTEGER, deptype VARCHAR",
    "pg_views": "schemaname VARCHAR, viewname VARCHAR, viewowner VARCHAR, definition VARCHAR",
    "pg_matviews": "schemaname VARCHAR, matviewname VARCHAR, matviewowner VARCHAR, definition VARCHAR",
    "pg_language": "oid UINTEGER, lanname VARCHAR",
    "pg_opclass": "oid UINTEGER, opcname VARCHAR, opcnamespace UINTEGER, opcdefault BOOLEAN",
    "pg_event_trigger": "oid UINTEGER, evtname VARCHAR",
    "pg_shdescription": "objoid UINTEGER, classoid UINTEGER, description VARCHAR",
    "pg_user": "usename VARCHAR, usesysid UINTEGER, usesuper BOOLEAN",
}
_VIEWS = {
    "pg_tables": (
        "SELECT n.nspname AS schemaname, c.relname AS tablename, 'dpsql' AS tableowner, NULL::VARCHAR AS tablespace, "
        "false AS hasindexes, false AS hasrules, false AS hastriggers, false AS rowsecurity "
        f"FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND c.relnamespace = {PUBLIC}"
    ),
    "information_schema_schemata": (
        "SELECT getvariable('dpsql_database') AS catalog_name, nspname AS schema_name, 'dpsql' AS schema_owner, "
        "NULL::VARCHAR AS default_character_set_catalog, NULL::VARCHAR AS default_character_set_schema, "
        "NULL::VARCHAR AS default_character_set_name, NULL::VARCHAR AS sql_path FROM pg_namespace"
    ),
    "information_schema_tables": (
        "SELECT getvariable('dpsql_database') AS table_catalog, 'public' AS table_schema, relname AS table_name, "
        "'BASE TABLE' AS table_type, NULL::VARCHAR AS self_referencing_column_name, NULL::VARCHAR AS reference_generation, "
        "NULL::VARCHAR AS user_defined_type_catalog, NULL::VARCHAR AS user_defined_type_schema, "
        "NULL::VARCHAR AS user_defined_type_name, 'NO' AS is_insertable_into, 'NO' AS is_typed, NULL::VARCHAR AS commit_action "
        f"FROM pg_class WHERE relkind = 'r' AND relnamespace = {PUBLIC}"
    ),
    "information_schema_columns": (
        "SELECT getvariable('dpsql_database') AS table_catalog, 'public' AS table_schema, c.relname AS table_name, "
        "a.attname AS column_name, a.attnum::INTEGER AS ordinal_position, NULL::VARCHAR AS column_default, "
        "CASE WHEN a.attnotnull THEN 'NO' ELSE 'YES' END AS is_nullable, format_type(a.atttypid, a.atttypmod) AS data_type, "
        "NULL::INTEGER AS character_maximum_length, NULL::INTEGER AS character_octet_length, "
        "NULL::INTEGER AS numeric_precision, NULL::INTEGER AS numeric_precision_radix, NULL::INTEGER AS numeric_scale, "
        "NULL::INTEGER AS datetime_precision, NULL::VARCHAR AS interval_type, NULL::INTEGER AS interval_precision, "
        "NULL::VARCHAR AS collation_name, NULL::VARCHAR AS domain_catalog, NULL::VARCHAR AS domain_schema, "
        "NULL::VARCHAR AS domain_name, getvariable('dpsql_database') AS udt_catalog, 'pg_catalog' AS udt_schema, "
        "t.typname AS udt_name, a.attnum::INTEGER AS dtd_identifier, 'NO' AS is_self_referencing, 'NO' AS is_identity, "
        "NULL::VARCHAR AS identity_generation, 'NEVER' AS is_generated, NULL::VARCHAR AS generation_expression, "
        "'NO' AS is_updatable "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_type t ON t.oid = a.atttypid"
    ),
    "information_schema_views": "SELECT NULL::VARCHAR AS table_catalog, NULL::VARCHAR AS table_schema, NULL::VARCHAR AS table_name, NULL::VARCHAR AS view_definition WHERE false",
    "information_schema_table_constraints": (
        "SELECT NULL::VARCHAR AS constraint_catalog, NULL::VARCHAR AS constraint_schema, NULL::VARCHAR AS constraint_name, "
        "NULL::VARCHAR AS table_catalog, NULL::VARCHAR AS table_schema, NULL::VARCHAR AS table_name, "
        "NULL::VARCHAR AS constraint_type WHERE false"
    ),
    "information_schema_key_column_usage": (
        "SELECT NULL::VARCHAR AS constraint_name, NULL::VARCHAR AS table_schema, NULL::VARCHAR AS table_name, "
        "NULL::VARCHAR AS column_name, NULL::INTEGER AS ordinal_position WHERE false"
    ),
    "information_schema_routines": "SELECT NULL::VARCHAR AS routine_schema, NULL::VARCHAR AS routine_name, NULL::VARCHAR AS routine_type WHERE false",
}
_MACROS = (
    "format_type(type_oid, typmod) AS (CASE WHEN type_oid IS NULL THEN NULL ELSE coalesce((SELECT min(name) FROM dpsql_type_names WHERE oid = type_oid), '???') END)",
    "col_description(relation, attnum) AS (SELECT description FROM pg_description WHERE objoid = relation AND objsubid = attnum)",
    "obj_description(object, catalog) AS (SELECT description FROM pg_description WHERE objoid = object AND objsubid = 0)",
    "shobj_description(object, catalog) AS NULL::VARCHAR",
    "pg_table_is_visible(x) AS true", "pg_type_is_visible(x) AS true", "pg_function_is_visible(x) AS true",
    "pg_collation_is_visible(x) AS true",
    "pg_get_userbyid(x) AS getvariable('dpsql_user')", "pg_get_expr(x, y) AS NULL::VARCHAR, (x, y, z) AS NULL::VARCHAR", "pg_get_indexdef(x) AS NULL::VARCHAR, (x, y, z) AS NULL::VARCHAR",
    "pg_get_constraintdef(x) AS NULL::VARCHAR, (x, y) AS NULL::VARCHAR", "pg_get_viewdef(x) AS NULL::VARCHAR", "pg_get_partkeydef(x) AS NULL::VARCHAR",
    "pg_get_serial_sequence(x, y) AS NULL::VARCHAR", "pg_get_statisticsobjdef_columns(x) AS NULL::VARCHAR",
    "pg_relation_size(x) AS 0::BIGINT", "pg_total_relation_size(x) AS 0::BIGINT", "pg_table_size(x) AS 0::BIGINT",
    "pg_size_pretty(x) AS '0 bytes'", "pg_encoding_to_char(x) AS 'UTF8'", "pg_char_to_encoding(x) AS 6",
    "has_table_privilege(x, y) AS true, (x, y, z) AS true", "has_schema_privilege(x, y) AS true, (x, y, z) AS true",
    "has_database_privilege(x, y) AS true, (x, y, z) AS true",
    "current_schemas(implicit) AS (CASE WHEN implicit THEN ['pg_catalog', 'public'] ELSE ['public'] END)",
    "array_upper(a, dimension) AS len(a)", "array_lower(a, dimension) AS (CASE WHEN len(a) > 0 THEN 1 END)",
    "dpsql_regclass(x) AS (SELECT CASE WHEN TRY_CAST(x AS UINTEGER) IS NOT NULL THEN TRY_CAST(x AS UINTEGER) "
    "ELSE (SELECT min(oid) FROM pg_class WHERE relname = regexp_replace(CAST(x AS VARCHAR), '^(public|pg_catalog)\\.|\"', '', 'g')) END)",
    "dpsql_regtype(x) AS (SELECT CASE WHEN TRY_CAST(x AS UINTEGER) IS NOT NULL THEN TRY_CAST(x AS UINTEGER) "
    "ELSE (SELECT min(oid) FROM dpsql_type_names WHERE name = lower(regexp_replace(CAST(x AS VARCHAR), '^pg_catalog\\.|\"', '', 'g')) "
    "OR oid = (SELECT min(oid) FROM pg_type WHERE typname = lower(regexp_replace(CAST(x AS VARCHAR), '^pg_catalog\\.|\"', '', 'g')))) END)",
    "dpsql_regclass_name(x) AS (SELECT coalesce((SELECT relname FROM pg_class WHERE oid = TRY_CAST(x AS UINTEGER)), CAST(x AS VARCHAR)))",
    "dpsql_regtype_name(x) AS (SELECT coalesce((SELECT name FROM dpsql_type_names WHERE oid = TRY_CAST(x AS UINTEGER)), CAST(x AS VARCHAR)))",
    "to_regtype(x) AS dpsql_regtype(x)", "to_regclass(x) AS dpsql_regclass(x)",
    "quote_ident(x) AS (CASE WHEN regexp_full_match(x, '[a-z_][a-z0-9_]*') THEN x ELSE '\"' || replace(x, '\"', '\"\"') || '\"' END)",
    "pg_backend_pid() AS getvariable('dpsql_pid')", "current_database() AS getvariable('dpsql_database')",
    "current_schema() AS 'public'", "version() AS getvariable('dpsql_version')",
    "current_setting(name) AS getvariable('dpsql_settings')[lower(name)], (name, missing_ok) AS getvariable('dpsql_settings')[lower(name)]",
    "set_config(name, value, local) AS value",
    "pg_get_function_result(x) AS NULL::VARCHAR", "pg_get_function_arguments(x) AS NULL::VARCHAR",
    "pg_get_function_identity_arguments(x) AS NULL::VARCHAR", "pg_tablespace_location(x) AS NULL::VARCHAR",
    "pg_database_size(x) AS 0::BIGINT", "pg_relation_is_publishable(x) AS false", "pg_is_in_recovery() AS false", "txid_current() AS 1::BIGINT", "inet_server_addr() AS NULL::VARCHAR",
)
_OBJECT_TYPES = {"REGCLASS": "dpsql_regclass", "REGTYPE": "dpsql_regtype", "REGPROC": None, "REGPROCEDURE": None, "OID": None,
                 "REGNAMESPACE": None, "REGROLE": None, "REGOPER": None, "REGCONFIG": None}
_NAMED = {"dpsql_regclass": "dpsql_regclass_name", "dpsql_regtype": "dpsql_regtype_name"}
_FUNCTION_NAMES = {exp.CurrentVersion: "version", exp.CurrentSchema: "current_schema", exp.CurrentDatabase: "current_database",
                   exp.CurrentUser: "current_user", exp.SessionUser: "session_user"}
_SESSION = {exp.CurrentUser: "dpsql_user", exp.SessionUser: "dpsql_user", exp.CurrentDatabase: "dpsql_database"}


@dataclass(frozen=True)
class CatalogColumn:
    name: str
    type_oid: int
    not_null: bool
    comment: str


@dataclass(frozen=True)
class CatalogTable:
    name: str
    columns: tuple[CatalogColumn, ...]
    comment: str


def type_oid(postgres_type: str) -> int:
    """The OID of a PostgreSQL type name as the served tables report it (text for anything else)."""
    return _TYPE_OIDS.get(postgres_type.lower(), 25)


def domain_comment(schema: dpsql.Schema, column: str) -> str:
    """What a column's comment says: its declared domain (or that it has none), whether it is the privacy unit."""
    if column == schema.privacy_unit:
        return "privacy unit: identifies whose rows these are; it can be counted (COUNT(DISTINCT ...)), never shown"
    if column not in schema.column_names:
        return "no declared domain: dpsql cannot group by or filter on it"
    domain = schema.column(column)
    if not domain.is_known:
        return "no declared domain: GROUP BY releases keys selected privately (partition selection)"
    values = ", ".join(str(v) for v in domain.values[:50]) + (", ..." if len(domain.values) > 50 else "")
    nullable = "; NULL is a category" if domain.nullable else ""
    bounds = domain.value_bounds
    bounded = f"; SUM/AVG clamp to [{bounds[0]}, {bounds[1]}]" if bounds is not None else ""
    return f"declared domain: {domain.kind} [{values}]{nullable}{bounded}"


class Catalog:
    """The catalog database of a server's tables; :meth:`session` gives a session its cursor."""

    def __init__(self, tables: Sequence[CatalogTable], version: str) -> None:
        self.version = version
        self._database = duckdb.connect()
        self._create(tables)

    def _create(self, tables: Sequence[CatalogTable]) -> None:
        db = self._database
        for name, columns in _TABLES.items():
            db.execute(f"CREATE TABLE {name} ({columns})")
        db.execute("CREATE TABLE dpsql_type_names (oid UINTEGER, name VARCHAR)")
        db.executemany("INSERT INTO dpsql_type_names VALUES (?, ?)", [(oid, name) for oid, _, name, _, _, _ in TYPES]
                       + [(array, name + "[]") for _, _, name, _, _, array in TYPES])
        db.executemany("INSERT INTO pg_namespace VALUES (?, ?, ?, NULL)",
                       [(PG_CATALOG, "pg_catalog", OWNER), (PUBLIC, "public", OWNER), (INFORMATION_SCHEMA, "information_schema", OWNER)])
        types = []
        for oid, name, _, length, category, array in TYPES:
            for this, typname, element, cat in ((oid, name, 0, category), (array, "_" + name, oid, "A")):
                types.append((this, typname, PG_CATALOG, OWNER, length if element == 0 else -1, 0 < length <= 8 and element == 0, "b", cat,
                              False, True, ",", 0, None, element, array if element == 0 else 0, "array_in" if element else f"{typname}in",
                              "array_out" if element else f"{typname}out", None, None, None, None, None, "i", "p", False, 0, -1, 0, 0,
                              None, None, None))
        db.executemany(f"INSERT INTO pg_type VALUES ({', '.join(['?'] * 32)})", types)
        for position, table in enumerate(tables):
            oid = FIRST_TABLE_OID + position
            db.execute(
                "INSERT INTO pg_class (oid, relname, relnamespace, reltype, reloftype, relowner, relam, relfilenode, reltablespace, "
                "relpages, reltuples, relallvisible, reltoastrelid, relhasindex, relisshared, relpersistence, relkind, relnatts, "
                "relchecks, relhasrules, relhastriggers, relhassubclass, relrowsecurity, relforcerowsecurity, relispopulated, "
                "relreplident, relispartition, relrewrite, relfrozenxid, relminmxid) VALUES "
                "(?, ?, ?, 0, 0, ?, 2, 0, 0, 0, -1, 0, 0, false, false, 'p', 'r', ?, 0, false, false, false, false, false, true, "
                "'d', false, 0, 0, 0)",
                [oid, table.name, PUBLIC, OWNER, len(table.columns)],
            )
            db.execute("INSERT INTO pg_description VALUES (?, 1259, 0, ?)", [oid, table.comment])
            for number, column in enumerate(table.columns, start=1):
                db.execute(
                    "INSERT INTO pg_attribute (attrelid, attname, atttypid, attstattarget, attlen, attnum, attndims, attcacheoff, "
                    "atttypmod, attbyval, attalign, attstorage, attcompression, attnotnull, atthasdef, atthasmissing, attidentity, "
                    "attgenerated, attisdropped, attislocal, attinhcount, attcollation) VALUES "
                    "(?, ?, ?, -1, -1, ?, 0, -1, -1, false, 'i', 'p', '', ?, false, false, '', '', false, true, 0, 0)",
                    [oid, column.name, column.type_oid, number, column.not_null],
                )
                db.execute("INSERT INTO pg_description VALUES (?, 1259, ?, ?)", [oid, number, column.comment])
        for name, oid in SYSTEM_RELATIONS:
            db.execute(
                "INSERT INTO pg_class (oid, relname, relnamespace, relowner, relam, relkind, relpersistence, relnatts, relhasindex, "
                "relispartition) VALUES (?, ?, ?, ?, 2, 'r', 'p', 0, false, false)", [oid, name, PG_CATALOG, OWNER])
        db.execute("INSERT INTO pg_am VALUES (2, 'heap', 'heap_tableam_handler', 't')")
        db.execute("INSERT INTO pg_roles VALUES (?, 'dpsql', false, true, false, false, true, false, -1, NULL, NULL, false, NULL)", [OWNER])
        db.execute("INSERT INTO pg_database VALUES (16383, 'dpsql', ?, 6, 'c', false, true, -1, 1663, 'C', 'C', NULL, NULL, NULL, NULL)", [OWNER])
        db.execute("INSERT INTO pg_tablespace VALUES (1663, 'pg_default', ?)", [OWNER])
        for name, body in _VIEWS.items():
            db.execute(f"CREATE VIEW {name} AS {body}")
        for macro in _MACROS:
            db.execute(f"CREATE MACRO {macro}")

    def session(self, user: str, database: str, pid: int, settings: Mapping[str, str]) -> CatalogSession:
        """A session's cursor; ``settings``: the PostgreSQL settings ``current_setting()`` reads by default."""
        cursor = self._database.cursor()
        for name, value in (("dpsql_user", user), ("dpsql_database", database), ("dpsql_pid", pid), ("dpsql_version", self.version)):
            cursor.execute(f"SET VARIABLE {name} = ?", [value])
        _set_settings(cursor, settings)
        return CatalogSession(cursor, settings)

    def close(self) -> None:
        self._database.close()


class CatalogSession:
    """One session's cursor on the catalog database."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, defaults: Mapping[str, str]) -> None:
        self._cursor = cursor
        self._defaults = dict(defaults)
        self._lock = threading.Lock()

    def answer(self, sql: str, parameters: Sequence[object] | None, settings: Mapping[str, str]) -> tuple[list[ResultColumn], list[tuple[object, ...]]]:
        """Run a catalog statement (PostgreSQL text, ``$n`` parameters); its typed columns and rows.
        ``settings``: the session's PostgreSQL settings, as ``current_setting()`` reads them."""
        translated, count = duckdb_text(sql)
        values = list(parameters or ())[:count] + [None] * max(0, count - len(parameters or ()))
        with self._lock:
            if "current_setting" in translated.lower():
                _set_settings(self._cursor, {**self._defaults, **settings})
            timer = threading.Timer(CATALOG_SECONDS, self._cursor.interrupt)
            timer.start()
            try:
                result = self._cursor.execute(translated, values) if count else self._cursor.execute(translated)
                rows = result.fetchall()
                description = result.description or []
            except duckdb.InterruptException:
                raise PgError("57014", f"canceling statement due to statement timeout: a catalog query may run {CATALOG_SECONDS:g} s") from None
            except duckdb.CatalogException as error:
                raise PgError("42P01", f"dpsql's catalog does not have what this statement reads: {_first_line(error)}") from None
            except duckdb.Error as error:
                raise PgError("0A000", f"dpsql's catalog cannot answer this statement: {_first_line(error)}") from None
            finally:
                timer.cancel()
        return [ResultColumn(str(d[0]), _RESULT_OIDS.get(str(d[1]), TEXT)) for d in description], rows

    def close(self) -> None:
        self._cursor.close()


def _set_settings(cursor: duckdb.DuckDBPyConnection, settings: Mapping[str, str]) -> None:
    names = list(settings)
    cursor.execute("SET VARIABLE dpsql_settings = map(?::VARCHAR[], ?::VARCHAR[])", [[n.lower() for n in names], [settings[n] for n in names]])


def _type_name(data_type: exp.DataType) -> str:
    """A cast's target as one upper-case name, without a ``pg_catalog.`` qualifier."""
    return data_type.sql(dialect="postgres").upper().split(".")[-1].strip('"')


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0][:300]


@functools.lru_cache(maxsize=512)
def duckdb_text(sql: str) -> tuple[str, int]:
    """A PostgreSQL catalog statement as DuckDB runs it over the catalog database, and its parameter count."""
    if len(sql) > MAX_CATALOG_BYTES:
        raise PgError("54000", f"a catalog statement may be at most {MAX_CATALOG_BYTES} bytes long")
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except (SqlglotError, RecursionError, ValueError) as error:
        raise PgError("42601", f"cannot parse the catalog statement: {str(error).splitlines()[0][:200]}") from None
    if isinstance(tree, exp.Select):
        _name_columns(tree)
    for dot in list(tree.find_all(exp.Dot)):  # pg_catalog.f(...) → f(...), before the rest is rewritten
        if isinstance(dot.this, exp.Identifier) and dot.this.name.lower() == "pg_catalog":
            dot.replace(dot.expression)
    for node in reversed(list(tree.walk(bfs=False))):  # children before their parents
        rewritten = _rewrite(node)
        if rewritten is not node:
            if node is tree:
                tree = rewritten
            else:
                node.replace(rewritten)
    numbers = [p.name for p in tree.find_all(exp.Parameter)] + [p.name for p in tree.find_all(exp.Placeholder)]
    count = max((int(n) for n in numbers if n.isdigit()), default=0)
    return tree.sql(dialect="duckdb"), count


def _name_columns(select: exp.Select) -> None:
    """Output names as PostgreSQL gives them (before the rewrites): a cast is named after what it casts, a
    function call after the function, ``CASE`` "case", anything else neither a column nor aliased ``?column?``."""
    for item in list(select.expressions):
        if not isinstance(item, (exp.Alias, exp.Column, exp.Star)):
            item.replace(exp.alias_(item.copy(), _output_name(item), quoted=True))


def _output_name(item: exp.Expression) -> str:
    while isinstance(item, exp.Cast):
        item = item.this
    if isinstance(item, exp.Dot):
        item = item.expression
    if isinstance(item, exp.Column):
        return item.name
    if isinstance(item, exp.Anonymous):
        return str(item.this).lower()
    if type(item) in _FUNCTION_NAMES:
        return _FUNCTION_NAMES[type(item)]
    if isinstance(item, exp.Case):
        return "case"
    if isinstance(item, exp.Func):
        return item.sql_name().lower() or "?column?"
    return "?column?"


def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Table):
        schema = (node.db or "").lower()
        if schema not in ("pg_catalog", "information_schema", "public") and not node.catalog:
            return node
        table = node.copy()
        table.set("db", None)
        table.set("catalog", None)
        if isinstance(table.this, exp.Identifier):  # not a table function
            name = table.name.lower()
            table.set("this", exp.to_identifier(f"information_schema_{name}" if schema == "information_schema" else name))
        return table
    if isinstance(node, exp.Column) and (node.text("db") or "").lower() in ("pg_catalog", "information_schema", "public"):
        table = node.table.lower() if node.text("db").lower() != "information_schema" else f"information_schema_{node.table.lower()}"
        return exp.column(node.name, table=table, quoted=True)
    if isinstance(node, exp.Cast):
        target = _type_name(node.to)
        inner = node.this
        if target in ("TEXT", "VARCHAR", "NAME") and isinstance(inner, exp.Anonymous) and str(inner.this) in _NAMED:
            return exp.Anonymous(this=_NAMED[str(inner.this)], expressions=inner.expressions)  # regclass::text: the name
        if target in _OBJECT_TYPES:
            function = _OBJECT_TYPES[target]
            if function is not None:
                return exp.Anonymous(this=function, expressions=[inner])
            if isinstance(inner, exp.Literal) and inner.is_string:
                return exp.Literal.string(inner.name.split(".")[-1])
            return exp.Cast(this=inner, to=exp.DataType.build("UINTEGER", dialect="duckdb")) if target == "OID" else inner
        if target in ("NAME", "BPCHAR", "CHAR", '"CHAR"'):
            return exp.Cast(this=inner, to=exp.DataType.build("VARCHAR"))
        if node.to.this == exp.DataType.Type.USERDEFINED:
            try:
                return exp.Cast(this=inner, to=exp.DataType.build(target, dialect="postgres"))
            except (SqlglotError, ValueError):
                return node
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "json_build_object":
        return exp.Anonymous(this="json_object", expressions=node.expressions)
    for kind, variable in _SESSION.items():
        if isinstance(node, kind):
            return exp.Anonymous(this="getvariable", expressions=[exp.Literal.string(variable)])
    if isinstance(node, exp.Collate):
        return node.this
    if isinstance(node, exp.Operator):
        operator = str(node.args.get("operator", "")).split(".")[-1].strip()
        if operator in ("~", "!~", "~*", "!~*"):
            flags = [exp.Literal.string("i")] if "*" in operator else []
            like = exp.Anonymous(this="regexp_matches", expressions=[node.this, node.expression, *flags])
            return exp.Not(this=like) if operator.startswith("!") else like
    return node
