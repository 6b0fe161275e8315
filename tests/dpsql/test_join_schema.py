"""Schemas for joins: public tables, declared foreign keys, and the privacy unit they share — each mistake refused at
load or at register() (in either order of registration) with one line that says what to declare."""

from __future__ import annotations

import pandas as pd
import pytest

import dpsql
from dpsql.schema import ForeignKey, Schema

PERSONS = pd.DataFrame({"id": [1, 2, 3], "age": [30, 40, 50]})
VISITS = pd.DataFrame({"person_id": [1, 1, 2], "clinic_id": [10, 11, 10], "cost": [5, 7, 9]})
CLINICS = pd.DataFrame({"id": [10, 11], "region": ["north", "south"]})
VISITS_SCHEMA = {"privacy_unit": "person_id", "max_rows_per_unit": 3, "foreign_keys": {"person_id": "persons.id", "clinic_id": "clinics.id"}}


def test_a_schema_declares_public_tables_and_foreign_keys() -> None:
    visits = Schema.load(VISITS_SCHEMA)
    assert visits.foreign_keys == (ForeignKey("person_id", "persons", "id"), ForeignKey("clinic_id", "clinics", "id"))
    assert not visits.public and visits.key_columns == ("person_id", "clinic_id")
    assert Schema.load({"foreign_keys": {"k": "public.clinics.id"}}).foreign_key("k") == ForeignKey("k", "public.clinics", "id")
    clinics = Schema.load("public: true\ncolumns:\n  region: {categories: [north, south]}\n")
    assert clinics.public and clinics.privacy_unit is None and clinics.column("region").size == 2


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"public": True, "privacy_unit": "id"}, r"a public table has no privacy unit and no contribution bounds: remove \['privacy_unit'\]"),
        ({"public": True, "max_rows_per_unit": 2}, r"remove \['max_rows_per_unit'\]"),
        ({"public": "yes"}, "public must be true or false"),
        ({"foreign_keys": ["person_id"]}, "foreign_keys must map columns to the table.column they reference"),
        ({"foreign_keys": {"person_id": "persons"}}, r"must name the referenced table and column as table.column \(e.g. person_id: persons.id\)"),
        ({"foreign_keys": {"person_id": "persons."}}, "table.column"),
    ],
)
def test_schema_mistakes_are_refused_at_load(document: dict[str, object], message: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=message):
        Schema.load(document)


@pytest.fixture()
def connection() -> dpsql.Connection:
    return dpsql.connect(budget=dpsql.Budget(1.0))


@pytest.mark.parametrize("persons_first", [True, False])
def test_a_unit_must_reference_the_unit_of_the_private_table_whatever_the_order(connection: dpsql.Connection, persons_first: bool) -> None:
    """The key is checked when the second of the two tables is registered, and that registration is refused."""
    wrong = PERSONS.rename(columns={"id": "pid"}).assign(id=[7, 8, 9])  # has an id column, but the unit is pid
    first, second = (("persons", wrong, {"privacy_unit": "pid"}), ("visits", VISITS, VISITS_SCHEMA))
    if not persons_first:
        first, second = second, first
    connection.register(*first[:2], schema=first[2])
    with pytest.raises(dpsql.ProgrammingError, match=r"the privacy unit of 'visits' references a private table, so it must reference its unit, "
                       r"but 'persons' protects units in 'pid': reference persons.pid"):
        connection.register(*second[:2], schema=second[2])
    assert len(connection.tables()) == 1  # the refused registration left nothing behind


def test_register_time_key_checks(connection: dpsql.Connection) -> None:
    connection.register("visits", VISITS, schema=VISITS_SCHEMA)
    with pytest.raises(dpsql.ProgrammingError, match=r"'persons' has no column 'id'; its columns are \['pid', 'age'\]"):
        connection.register("persons", PERSONS.rename(columns={"id": "pid"}), schema={"privacy_unit": "pid"})
    with pytest.raises(dpsql.ProgrammingError, match=r"has no privacy unit column \(one row is one unit\): declare that table's privacy unit"):
        connection.register("persons", PERSONS, schema={"privacy_unit": None})
    with pytest.raises(dpsql.ProgrammingError, match="clinic_id has type BIGINT and clinics.id VARCHAR; a key compares values of one kind"):
        connection.register("clinics", CLINICS.assign(id=CLINICS.id.astype(str)), public=True)
    with pytest.raises(dpsql.ProgrammingError, match=r"names column\(s\) \['clinic'\] that the data does not have"):
        connection.register("other", VISITS, schema={"privacy_unit": "person_id", "foreign_keys": {"clinic": "clinics.id"}})
    connection.register("persons", PERSONS, schema={"privacy_unit": "id"})
    connection.register("clinics", CLINICS, public=True)
    assert connection._session.public_names() == frozenset({"clinics"})
    with pytest.raises(dpsql.ProgrammingError, match=r"a public table may reference public tables only \('visits' is private\)"):
        connection.register("clinic_visits", CLINICS, schema={"public": True, "foreign_keys": {"id": "visits.clinic_id"}})
    with pytest.raises(dpsql.ProgrammingError, match="'clinics' is a registered public table; give the private table another name"):
        connection.register("clinics", CLINICS, schema={"privacy_unit": "id"})
    with pytest.raises(dpsql.ProgrammingError, match="'visits' is a registered private table; give the public table another name"):
        connection.register("visits", CLINICS, public=True)
    with pytest.raises(dpsql.ProgrammingError, match=r"public=True\) takes no schema, or a public one"):
        connection.register("regions", CLINICS, schema={"privacy_unit": "id"}, public=True)


def test_units_that_reference_each_other_in_a_cycle_are_refused(connection: dpsql.Connection) -> None:
    a = pd.DataFrame({"u": [1, 2]})
    connection.register("a", a, schema={"privacy_unit": "u", "foreign_keys": {"u": "b.u"}})
    with pytest.raises(dpsql.ProgrammingError, match=r"the privacy units of \['b', 'a'\] reference each other in a cycle"):
        connection.register("b", a, schema={"privacy_unit": "u", "foreign_keys": {"u": "a.u"}})


def test_a_public_table_is_in_the_backend_and_in_the_engine_of_shells(connection: dpsql.Connection) -> None:
    connection.register("clinics", CLINICS, schema={"public": True, "columns": {"region": {"categories": ["north", "south", "west"]}}})
    session = connection._session
    table = session.public_tables["clinics"]
    assert table is not None and table.schema.column("region").size == 3
    assert session.backend.run(f'SELECT COUNT(*) AS n FROM "{table.relation}"')["n"][0] == 2
    assert session.public.connection.execute("SELECT COUNT(*) FROM clinics").fetchone() == (2,)
    session.backend.connection.execute("CREATE TABLE regions AS SELECT 'north' AS region, 1 AS zone")  # a table of the engine, by name
    connection.register("regions", public=True)
    assert session.public.connection.execute("SELECT region, zone FROM regions").fetchall() == [("north", 1)]
