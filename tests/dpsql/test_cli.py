"""The ``dpsql`` command line: query (formats, ledger across calls, error exit codes) and demo."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
import yaml

import dpsql.testing
from dpsql import cli, demo

SCHEMA = {"privacy_unit": "pid", "max_rows_per_unit": 2, "columns": {"sex": {"categories": ["F", "M"]}, "age": {"range": [18, 99]}}}
QUERY = "SELECT sex, COUNT(*) AS n FROM people WHERE age >= 30 GROUP BY sex"


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "people.csv"
    data.write_text("pid,sex,age\n1,F,40\n1,F,41\n2,M,25\n3,M,35\n4,F,31\n")
    schema = tmp_path / "people.yaml"
    schema.write_text(yaml.safe_dump(SCHEMA))
    return {"data": str(data), "schema": str(schema), "ledger": str(tmp_path / "people.ledger")}


def _run(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(arguments)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_query_prints_rows_with_standard_errors(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with dpsql.testing.noise_disabled():
        code, out, err = _run(["query", "--data", files["data"], "--schema", files["schema"], "--budget-epsilon", "0.5", "--epsilon", "0.5", "--format", "json", QUERY], capsys)
    assert code == 0
    rows = json.loads(out)
    assert [(r["sex"], round(r["n"], 6)) for r in rows] == [("F", 3.0), ("M", 1.0)]
    scale = 2 / 0.5  # discrete Laplace, b = k/ε, variance 2e^{-1/b}/(1-e^{-1/b})² (docs/math.md §1)
    laplace_sd = math.sqrt(2 * math.exp(-1 / scale) / (1 - math.exp(-1 / scale)) ** 2)
    assert [r["n_stderr"] for r in rows] == pytest.approx([laplace_sd, laplace_sd], rel=1e-6)
    assert "budget left: epsilon = 0" in err


def test_query_csv_and_table_formats(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    common = ["query", "--data", files["data"], "--schema", files["schema"], "--budget-epsilon", "5", "--epsilon", "0.5", QUERY]
    code, out, _ = _run(common + ["--format", "csv"], capsys)
    assert code == 0
    table = list(csv.reader(io.StringIO(out)))
    assert table[0] == ["sex", "n", "n_stderr"] and [r[0] for r in table[1:]] == ["F", "M"]
    code, out, _ = _run(common + ["--explain"], capsys)
    assert code == 0 and out.splitlines()[0].split() == ["sex", "n", "n_stderr"]
    assert "at most 2 random row(s) per 'pid'" in out


def test_ledger_is_shared_across_calls(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    common = ["query", "--data", files["data"], "--schema", files["schema"], "--ledger", files["ledger"]]
    code, _, err = _run(common + ["--budget-epsilon", "1", "--epsilon", "0.6", QUERY], capsys)
    assert code == 0 and "budget left: epsilon = 0.4" in err
    code, _, err = _run(common + ["--epsilon", "0.6", QUERY], capsys)
    assert code == cli.EXIT_BUDGET and "BudgetExceededError" in err
    code, _, err = _run(common + ["--epsilon", "0.4", QUERY], capsys)
    assert code == 0 and "budget left: epsilon = 0" in err


def test_bad_input_exits_with_a_one_line_message(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    common = ["query", "--data", files["data"], "--schema", files["schema"], "--budget-epsilon", "1", "--epsilon", "0.5"]
    code, _, err = _run(common + ["SELECT * FROM people"], capsys)
    assert code == cli.EXIT_BAD_INPUT and err.startswith("dpsql: NotSupportedError: SELECT *")
    code, _, err = _run(["query", "--data", files["data"] + ".missing.csv", "--schema", files["schema"], "--budget-epsilon", "1", "--epsilon", "1", QUERY], capsys)
    assert code == cli.EXIT_BAD_INPUT and "no such data file" in err


def test_demo_data_is_seeded_and_census_like() -> None:
    first, again = demo.generate_census(2000, seed=5), demo.generate_census(2000, seed=5)
    assert all((first[c] == again[c]).all() for c in first if c != "occupation")
    rows = len(first["person_id"])
    assert 2000 * 2 < rows < 2000 * 3  # 1-4 waves per person, 2.5 on average
    assert int(max(__import__("collections").Counter(first["person_id"]).values())) <= demo.MAX_WAVES_PER_PERSON
    assert set(first["sex"]) == {"F", "M"} and set(first["race"]) <= set(demo.RACES)


def test_demo_tour_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["demo", "--persons", "3000"], capsys)
    assert code == 0
    assert out.count("budget left") == len(demo.TOUR)
    assert "NotSupportedError: WHERE: column 'browser'" in out
    assert "BudgetExceededError" in out
    assert "strategy:" in out
