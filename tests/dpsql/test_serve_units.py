"""The parts of ``dpsql serve`` that need no network: SCRAM verifiers and exchanges (RFC 7677's
example), the configuration's checks, the statement text the server reads, SQLSTATE mapping, and
result column types."""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

import pytest
import yaml

import dpsql
from dpsql import cli
from dpsql.serve.config import ServeConfig
from dpsql.serve.passwords import ScramExchange, ScramVerifier, decoy_verifier, hash_password
from dpsql.serve.session import result_columns
from dpsql.serve.sqlstate import as_pg_error
from dpsql.result import OutputColumn
from dpsql.serve.sqltext import first_words, mentions_catalog, placeholders_to_qmark, split_statements
from dpsql.sql.settings import cost_comment

# RFC 7677, section 3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC_SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_exchange_reproduces_rfc_7677() -> None:
    verifier = ScramVerifier.of_password("pencil", RFC_SALT, 4096)
    exchange = ScramExchange(ScramVerifier.parse(verifier.text()), server_nonce=RFC_SERVER_NONCE)
    assert exchange.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert exchange.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


@pytest.mark.parametrize(
    "broken",
    [
        ScramVerifier.of_password("pencil2", RFC_SALT, 4096),  # another password
        ScramVerifier.of_password("pencil", RFC_SALT[::-1], 4096),  # another salt
        decoy_verifier("user", b"secret"),  # an unknown user's decoy
    ],
)
def test_scram_exchange_refuses_a_proof_for_another_verifier(broken: ScramVerifier) -> None:
    exchange = ScramExchange(broken, server_nonce=RFC_SERVER_NONCE)
    exchange.first(RFC_CLIENT_FIRST)
    assert exchange.final(RFC_CLIENT_FINAL) is None


@pytest.mark.parametrize(
    "client_final",
    [
        RFC_CLIENT_FINAL.replace("r=rOpr", "r=xOpr"),  # another nonce (a replay)
        RFC_CLIENT_FINAL.replace("c=biws", "c=cD10bHMtdW5pcXVlLCw="),  # channel binding we did not offer
        RFC_CLIENT_FINAL[:-4] + "AAA=",  # a flipped proof
        "garbage",
    ],
)
def test_scram_exchange_refuses_tampered_messages(client_final: str) -> None:
    exchange = ScramExchange(ScramVerifier.of_password("pencil", RFC_SALT, 4096), server_nonce=RFC_SERVER_NONCE)
    exchange.first(RFC_CLIENT_FIRST)
    assert exchange.final(client_final) is None


def test_verifiers_are_salted_and_never_hold_the_password() -> None:
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first != second and "correct horse" not in first
    assert ScramVerifier.parse(first).iterations == 4096
    with pytest.raises(dpsql.ProgrammingError, match="plain-text passwords are refused"):
        ScramVerifier.parse("correct horse")
    with pytest.raises(dpsql.ProgrammingError, match="at least 4096"):
        hash_password("x", iterations=10)
    assert decoy_verifier("mallory", b"k") == decoy_verifier("mallory", b"k") != decoy_verifier("eve", b"k")


def test_hash_password_command_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("pencil\n"))
    assert cli.main(["hash-password", "--iterations", "5000"]) == 0
    verifier = ScramVerifier.parse(capsys.readouterr().out)
    assert verifier == ScramVerifier.of_password("pencil", verifier.salt, 5000)


def _config(tmp_path: Path, **changes: object) -> Path:
    raw: dict[str, object] = {
        "tables": {"t": {"source": "t.csv", "schema": "t.yaml"}},
        "analysts": {"ann": {"password": hash_password("pw"), "budget": {"epsilon": 1.0}}},
    }
    raw.update(changes)
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_configuration_reads_budgets_groups_and_paths(tmp_path: Path) -> None:
    verifier = hash_password("pw")
    path = _config(
        tmp_path,
        ledgers="books",
        groups={"team": {"budget": {"rho": 0.5, "delta": 1e-6}}},
        analysts={
            "ann": {"password": verifier, "budget": {"epsilon": 2.0, "delta": 1e-7}, "default_epsilon": 0.1},
            "ben": {"password": verifier, "group": "team", "noise": "gaussian"},
        },
        tables={"t": {"source": "postgresql://u@h/db", "table": "visits", "schema": {"privacy_unit": None, "max_rows_per_unit": 1, "columns": {}}}},
    )
    config = ServeConfig.load(path)
    assert config.ledgers == tmp_path / "books" and config.port == 5433 and config.tls is None
    ann, ben = config.analysts["ann"], config.analysts["ben"]
    assert ann.budget == dpsql.Budget(2.0, 1e-7) and ann.ledger == "ann" and ann.default_epsilon == 0.1
    assert ben.ledger == "group-team" and ben.noise == "gaussian"
    assert math.isclose(ben.budget.rho, 0.5, rel_tol=1e-9)  # a rho budget, stored as the (epsilon, delta) it converts to
    assert config.tables[0].kind == "postgresql" and config.tables[0].relation == "visits"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"analysts": {"ann": {"password": "pw", "budget": {"epsilon": 1}}}}, "plain-text passwords are refused"),
        ({"analysts": {}}, "anonymous access is never allowed"),
        ({"analysts": {"ann": {"password": hash_password("pw"), "group": "nope"}}}, "no group 'nope'"),
        ({"analysts": {"ann": {"password": hash_password("pw")}}}, "give either budget"),
        ({"analysts": {"ann": {"password": hash_password("pw"), "budget": {"epsilon": 1}, "noise": "gaussian"}}}, "delta > 0"),
        ({"analysts": {"ann": {"password": hash_password("pw"), "budget": {"epsilon": -1}}}}, "positive number"),
        ({"tables": {}}, "serve at least one table"),
        ({"tables": {"t": {"source": "t.csv"}}}, "give source"),
        ({"listen": 5}, "unknown key"),
        ({"tls": {"certificate": "c.pem"}}, "both certificate and key"),
        ({"port": 70000}, "port must be"),
    ],
)
def test_configuration_mistakes_name_what_to_change(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    with pytest.raises(dpsql.ProgrammingError, match=message):
        ServeConfig.load(_config(tmp_path, **changes))


def test_statement_text() -> None:
    assert placeholders_to_qmark("SELECT a FROM t WHERE b = $2 AND c = '$1' -- $3\nAND d = $1") == (
        "SELECT a FROM t WHERE b = ? AND c = '$1' -- $3\nAND d = ?", (1, 0)
    )
    assert cost_comment("/* dpsql: epsilon=0.5, non_negative=on */ SELECT 1") == {"epsilon": "0.5", "non_negative": "on"}
    assert cost_comment("SELECT 1 /* other */") == {}
    with pytest.raises(dpsql.ProgrammingError, match="cannot read the dpsql comment"):
        cost_comment("/* dpsql: budget=all */ SELECT 1")
    assert split_statements("SET dpsql.epsilon = 0.1; SELECT ';' -- ;\n FROM t ;; ") == ["SET dpsql.epsilon = 0.1", "SELECT ';' -- ;\n FROM t"]
    assert first_words("/* dpsql: epsilon=1 */ -- hi\n select  sex") == "SELECT SEX"
    assert mentions_catalog("SELECT relname FROM pg_catalog.pg_class") and not mentions_catalog("SELECT COUNT(*) FROM t WHERE job = 'pg_x'")


def test_a_cost_comment_counts_only_as_a_block_comment_in_code() -> None:
    assert cost_comment("SELECT COUNT(*) FROM t -- /* dpsql: epsilon=9 */") == {}  # inside a line comment: not honoured
    assert cost_comment("SELECT COUNT(*) FROM t WHERE job = '/* dpsql: epsilon=9 */'") == {}  # inside a string
    assert cost_comment("SELECT COUNT(*) -- a note\n FROM t /* dpsql: epsilon=0.5 */") == {"epsilon": "0.5"}


def test_backend_errors_are_withheld_and_dpsql_errors_keep_their_message() -> None:
    withheld = as_pg_error(dpsql.OperationalError("Could not convert string 'secret-42' to INT32"))
    assert withheld.sqlstate == "58000" and "secret-42" not in withheld.message
    internal = as_pg_error(KeyError("row 'secret-43'"))
    assert internal.sqlstate == "XX000" and "secret-43" not in internal.message
    for error, code in ((dpsql.BudgetExceededError("no budget"), "53Z01"), (dpsql.NotSupportedError("no JOIN"), "0A000"),
                        (dpsql.ProgrammingError("bad"), "42601"), (dpsql.DataError("out of domain"), "22000")):
        assert (as_pg_error(error).sqlstate, as_pg_error(error).message) == (code, str(error))


def test_result_column_types_follow_the_layout_and_errors_add_stderr_columns() -> None:
    layout = [OutputColumn("sex", "text", True, False), OutputColumn("race", "integer", False, False),
              OutputColumn("n", "float", False, True), OutputColumn("day", "date", True, False)]
    assert [(c.name, c.oid) for c in result_columns(layout, errors=False)] == [("sex", 25), ("race", 20), ("n", 701), ("day", 1082)]
    assert [c.name for c in result_columns(layout, errors=True)] == ["sex", "race", "n", "n_stderr", "day"]
