"""Schema loading (YAML, JSON, dict), domain sizes and labels, and validation errors that name the column."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

import dpsql
from dpsql.schema import ColumnDomain, Schema

ISSUE_SCHEMA_YAML = """
privacy_unit: person_id        # or null for one row = one unit
max_rows_per_unit: 3
columns:
  sex:       {categories: [F, M]}
  race:      {categories: [0, 1, 2, 3, 4]}
  age:       {range: [17, 90]}                 # integers, ordered
  income:    {bins: [0, 10000, 50000, 100000, 1000000]}   # ordered bins, left-closed
  browser:   unknown                          # no public domain
"""


def _check_issue_schema(schema: Schema) -> None:
    assert schema.privacy_unit == "person_id"
    assert schema.contributions == 3
    sizes = {c.name: (c.kind, c.size, c.is_ordered) for c in schema.columns}
    assert sizes == {
        "sex": ("categories", 2, False),
        "race": ("categories", 5, False),
        "age": ("range", 74, True),
        "income": ("bins", 4, True),
        "browser": ("unknown", 0, False),
    }


def test_issue_schema_loads_from_yaml_json_and_dict(tmp_path: Path) -> None:
    document = yaml.safe_load(ISSUE_SCHEMA_YAML)
    (tmp_path / "s.yaml").write_text(ISSUE_SCHEMA_YAML)
    (tmp_path / "s.json").write_text(json.dumps(document))
    for source in (tmp_path / "s.yaml", str(tmp_path / "s.json"), document, ISSUE_SCHEMA_YAML):
        _check_issue_schema(Schema.load(source))


def test_labels_of_each_kind() -> None:
    assert ColumnDomain("race", "categories", (0, 1, 2)).labels() == (0, 1, 2)
    assert ColumnDomain("age", "range", (17, 19), nullable=True).labels() == (17, 18, 19, None)
    assert ColumnDomain("income", "bins", (0, 10000, 1.5e6)).labels() == ("[0, 10000)", "[10000, 1.5e+06)")
    assert ColumnDomain("income", "bins", (0, 10, 20), nullable=True).null_cell == 2


def test_unlisted_column_is_unknown() -> None:
    schema = Schema.load({"privacy_unit": None, "columns": {}})
    assert schema.column("anything").kind == "unknown"
    assert schema.contributions == 1


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"columns": {"age": {"range": [90, 17]}}}, "'age'.*lo <= hi"),
        ({"columns": {"age": {"range": [17]}}}, "'age'.*two integers"),
        ({"columns": {"age": {"range": [17.5, 20]}}}, "'age'.*two integers"),
        ({"columns": {"income": {"bins": [0, 10, 10]}}}, "'income'.*strictly increasing"),
        ({"columns": {"income": {"bins": [0]}}}, "'income'.*at least two"),
        ({"columns": {"sex": {"categories": []}}}, "'sex'.*must not be empty"),
        ({"columns": {"sex": {"categories": ["F", "F"]}}}, "'sex'.*repeat"),
        ({"columns": {"sex": {"categories": ["F", 1]}}}, "'sex'.*mix types"),
        ({"columns": {"sex": {"categories": ["F", None]}}}, "'sex'.*nullable"),
        ({"columns": {"sex": {"categories": ["F"], "range": [1, 2]}}}, "'sex'.*exactly one"),
        ({"columns": {"sex": {"values": ["F"]}}}, "'sex'.*unknown key"),
        ({"columns": {"sex": "categorical"}}, "'sex'.*'unknown' or a mapping"),
        ({"columns": {"sex": {"categories": ["F"], "nullable": "yes"}}}, "'sex'.*nullable must be"),
        ({"privacy_unit": None, "max_rows_per_unit": 3}, "max_rows_per_unit must be 1"),
        ({"privacy_unit": "pid", "max_rows_per_unit": 0}, "max_rows_per_unit must be a positive"),
        ({"privacy_unit": 5}, "privacy_unit must be"),
        ({"tables": {}}, "unknown schema key"),
    ],
)
def test_invalid_schemas_name_the_problem(document: dict, message: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=message):
        Schema.load(document)


def test_unreadable_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(dpsql.ProgrammingError, match="cannot read schema file"):
        Schema.load(tmp_path / "missing.yaml")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(dpsql.ProgrammingError, match="cannot parse"):
        Schema.load(tmp_path / "bad.json")


def test_register_checks_schema_against_the_table() -> None:
    frame = pd.DataFrame({"pid": [1, 2], "sex": ["F", "M"], "age": [30, 40]})
    connection = dpsql.connect(budget=dpsql.Budget(1.0))
    with pytest.raises(dpsql.ProgrammingError, match=r"\['height'\]"):
        connection.register("t", frame, schema={"privacy_unit": "pid", "columns": {"height": {"range": [0, 3]}}})
    with pytest.raises(dpsql.ProgrammingError, match=r"\['person'\]"):
        connection.register("t", frame, schema={"privacy_unit": "person", "columns": {}})
    with pytest.raises(dpsql.ProgrammingError, match="'sex'.*needs numbers"):
        connection.register("t", frame, schema={"columns": {"sex": {"range": [0, 1]}}})
    with pytest.raises(dpsql.ProgrammingError, match="'age'.*categories \\['young', 'old'\\] do not all cast.*Could not convert"):
        connection.register("t", frame, schema={"columns": {"age": {"categories": ["young", "old"]}}})
    with pytest.raises(dpsql.ProgrammingError, match="needs schema="):
        connection.register("t", frame)
