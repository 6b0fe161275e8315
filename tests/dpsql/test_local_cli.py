"""``dpsql ldp design|simulate|answer``: files written, rows printed, errors as exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dpsql import cli, local

SCHEMA = {"privacy_unit": "pid", "columns": {"sex": {"categories": ["F", "M"]}, "age": {"range": [1, 3]}}}
BY_SEX = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
BY_AGE = "SELECT age, COUNT(*) AS n FROM people GROUP BY age"
FAST = ["--seed", "0", "--restarts", "1", "--iterations", "50"]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    schema = tmp_path / "people.yaml"
    schema.write_text(yaml.safe_dump(SCHEMA, sort_keys=False))  # cells follow the schema order
    data = tmp_path / "people.csv"
    data.write_text("pid,sex,age\n" + "".join(f"{i},{'FM'[i % 2]},{i % 3 + 1}\n" for i in range(600)))
    return {"schema": str(schema), "data": str(data), "survey": str(tmp_path / "survey.json"), "reports": str(tmp_path / "reports.json")}


def _run(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(arguments)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_design_simulate_answer(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["ldp", "design", "--schema", files["schema"], "--epsilon", "1.5", "--output", files["survey"], *FAST, BY_SEX, BY_AGE], capsys)
    assert (code, out, err) == (0, "", "")
    document = json.loads(Path(files["survey"]).read_text())
    assert document["statements"] == [BY_SEX, BY_AGE] and document["mechanism"]["epsilon"] == 1.5
    survey = local.Survey.from_json(Path(files["survey"]).read_text())
    assert survey.columns == ("sex", "age") and survey.table == "people"
    assert len(document["mechanism"]["probabilities"]) == 6  # one row per cell (user type)

    code, _, _ = _run(["ldp", "simulate", "--survey", files["survey"], "--data", files["data"], "--output", files["reports"]], capsys)
    reports = json.loads(Path(files["reports"]).read_text())
    assert code == 0 and len(reports) == 600 and all(isinstance(r, int) for r in reports)

    code, out, _ = _run(["ldp", "answer", "--survey", files["survey"], "--reports", files["reports"], "--format", "json", BY_SEX], capsys)
    rows = json.loads(out)
    assert code == 0 and [row["sex"] for row in rows] == ["F", "M"]
    expected = survey.connect(reports).answer(BY_SEX)
    assert [(row["n"], row["n_stderr"]) for row in rows] == [(r[1], e[1]) for r, e in zip(expected.rows, expected.errors)]
    assert all(abs(row["n"] - 300) <= 5 * row["n_stderr"] for row in rows)


def test_simulate_takes_no_seed(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """Earlier, ``--seed`` made real records' randomization reproducible by anyone knowing it."""
    _run(["ldp", "design", "--schema", files["schema"], "--epsilon", "1", "--output", files["survey"], *FAST, BY_SEX], capsys)
    with pytest.raises(SystemExit) as exit_status:
        cli.main(["ldp", "simulate", "--survey", files["survey"], "--data", files["data"], "--seed", "1"])
    assert exit_status.value.code == 2 and "unrecognized arguments: --seed 1" in capsys.readouterr().err


def test_design_prints_the_survey_without_output(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["ldp", "design", "--schema", files["schema"], "--epsilon", "1", *FAST, BY_SEX], capsys)
    assert code == 0 and local.Survey.from_json(out).columns == ("sex",)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["ldp", "design", "--schema", "{schema}", "--epsilon", "0", BY_SEX], "ProgrammingError: epsilon"),
        (["ldp", "design", "--schema", "{schema}", "--epsilon", "1", "SELECT pid, COUNT(*) FROM people GROUP BY pid"], "unknown column"),
        (["ldp", "answer", "--survey", "{schema}", "--reports", "{schema}", BY_SEX], "DataError: the survey is not valid JSON"),
        (["ldp", "answer", "--survey", "{survey}", "--reports", "{survey}", BY_SEX], "must hold a JSON list"),
        (["ldp", "simulate", "--survey", "{missing}", "--data", "{data}"], "cannot read"),
    ],
)
def test_errors_exit_with_status_2(files: dict[str, str], capsys: pytest.CaptureFixture[str], arguments: list[str], message: str) -> None:
    _run(["ldp", "design", "--schema", files["schema"], "--epsilon", "1", "--output", files["survey"], *FAST, BY_SEX], capsys)
    paths = {**files, "missing": files["survey"] + ".missing"}
    code, _, err = _run([a.format(**paths) for a in arguments], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
