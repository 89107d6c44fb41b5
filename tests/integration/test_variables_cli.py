"""``dagrun variables`` and ``dagrun connections`` as a user runs them (a subprocess per
command on a fresh SQLite home): every change audited, no password or secret printed, bad
input one line with exit 2; and a DAG reading both in templates under ``dagrun run``, with
the environment's overrides and a connection URI that does not parse."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import cli_json, db_rows, run_cli, write_dag

TOKEN = "tok-9f8e7d6c"
PASSWORD = "pa:ss-4b3a"
URI = "postgresql://etl:pa%3Ass-4b3a@db.example.com:5432/sales?sslmode=require"

CONFIGURED = """
from dagrun import DAG, BashTask

with DAG("configured", schedule=None):
    BashTask(
        "show",
        command="echo region={{ var.value.region }} daily={{ var.json.limits.daily }} "
        "host={{ conn.db.host }} pw={{ conn.db.password }}",
    )
"""


def dagrun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, timeout=60)


def ok(*args: str, env: dict[str, str]) -> str:
    result = dagrun(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    for word in words:
        assert word in result.stderr
    return result.stderr


def audited(env: dict[str, str]) -> list[tuple[str, dict]]:
    rows = db_rows(env, "SELECT action, detail FROM audit_log ORDER BY id")
    return [(action, json.loads(detail)) for action, detail in rows]


@pytest.mark.slow
def test_variables_are_set_read_listed_and_deleted_with_secrets_masked(cli_env):
    ok("variables", "set", "region", "EU", "--description", "where we sell", env=cli_env)
    ok("variables", "set", "api_token", TOKEN, env=cli_env)
    ok("variables", "set", "limits", '{ "daily" : 5 }', "--json", env=cli_env)
    assert dagrun("variables", "get", "region", env=cli_env).stdout == "EU\n"
    assert dagrun("variables", "get", "api_token", env=cli_env).stdout == "***\n"
    assert dagrun("variables", "get", "api_token", "--reveal", env=cli_env).stdout == f"{TOKEN}\n"
    listed = ok("variables", "list", env=cli_env)
    assert "api_token  ***" in listed and "where we sell" in listed and TOKEN not in listed
    assert [(v["key"], v["value"]) for v in cli_json("variables", "list", env=cli_env)] == [
        ("api_token", "***"),
        ("limits", '{"daily": 5}'),
        ("region", "EU"),
    ]
    assert ok("variables", "delete", "region", env=cli_env) == "variable region deleted\n"
    one_line_error(dagrun("variables", "get", "region", env=cli_env), "no variable 'region'")
    assert audited(cli_env) == [
        ("variable_set", {"key": "region"}),
        ("variable_set", {"key": "api_token"}),
        ("variable_set", {"key": "limits"}),
        ("variable_delete", {"key": "region"}),
    ]


@pytest.mark.slow
def test_connections_are_added_read_listed_and_deleted_without_their_password(cli_env):
    shown = ok("connections", "add", "db", "--uri", URI, env=cli_env)
    shown += ok("connections", "add", "db", "--uri", URI, "--description", "dw", env=cli_env)
    shown += ok(
        "connections",
        "add",
        "api",
        "--conn-type",
        "http",
        "--host",
        "api.example.com",
        "--password",
        TOKEN,
        "--extra",
        '{"timeout": 5}',
        env=cli_env,
    )
    got = ok("connections", "get", "db", env=cli_env)
    assert "host: db.example.com\n" in got and "password: ***\n" in got
    assert 'extra: {"sslmode": "require"}\n' in got and "description: dw\n" in got
    as_json = cli_json("connections", "get", "api", env=cli_env)
    assert as_json["password"] == "***" and as_json["extra"] == {"timeout": 5}
    listed = ok("connections", "list", env=cli_env)
    listed += json.dumps(cli_json("connections", "list", env=cli_env))
    shown += got + json.dumps(as_json) + listed
    shown += ok("connections", "delete", "api", env=cli_env)
    for secret in (PASSWORD, "pa%3Ass-4b3a", TOKEN):
        assert secret not in shown
        assert secret not in json.dumps(audited(cli_env))
    assert db_rows(cli_env, "SELECT conn_id, password FROM connection") == [("db", PASSWORD)]
    assert [action for action, _ in audited(cli_env)] == [
        "connection_add",
        "connection_add",
        "connection_add",
        "connection_delete",
    ]
    assert audited(cli_env)[1][1] == {"conn_id": "db", "conn_type": "postgresql", "replaced": True}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("variables", "get", "nowhere"), ["no variable 'nowhere'"]),
        (("variables", "delete", "nowhere"), ["no variable 'nowhere'"]),
        (("variables", "set", "limits", "{daily: 5}", "--json"), ["'limits'", "not JSON"]),
        (("variables", "set", "my key", "v"), ["a key is 1-250"]),
        (("connections", "get", "nowhere"), ["no connection 'nowhere'"]),
        (("connections", "add", "db", "--uri", "db.example.com:5432"), ["--uri: not a"]),
        (("connections", "add", "db", "--uri", "postgresql://u:hunter2/x@h/db"), ["--uri"]),
        (("connections", "add", "db", "--uri", URI, "--host", "h"), ["not both"]),
        (("connections", "add", "db"), ["give --uri URI or --conn-type TYPE"]),
        (("connections", "add", "db", "--conn-type", "http", "--extra", "[1]"), ["--extra"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli_env, args, words):
    error = one_line_error(dagrun(*args, env=cli_env), *words)
    assert "hunter2" not in error
    opened = (Path(cli_env["DAGRUN_HOME"]) / "dagrun.db").exists()  # not for bad arguments
    assert not opened or db_rows(cli_env, "SELECT count(*) FROM audit_log") == [(0,)]


@pytest.fixture
def configured(cli_env: dict[str, str], dags_dir: Path) -> dict[str, str]:
    write_dag(dags_dir, "configured.py", CONFIGURED)
    ok("variables", "set", "region", "EU", env=cli_env)
    ok("variables", "set", "limits", '{"daily": 5}', "--json", env=cli_env)
    ok("connections", "add", "db", "--uri", URI, env=cli_env)
    return cli_env


def shown_by(env: dict[str, str], run_id: str) -> str:
    """The line the task echoed, from its log."""
    log = ok("logs", "configured", "show", "--run-id", run_id, env=env)
    return next(line for line in log.splitlines() if line.startswith("region="))


@pytest.mark.slow
def test_templates_read_variables_and_connections_and_the_environment_overrides(configured):
    ok("run", "configured", "--run-id", "stored", env=configured)
    assert shown_by(configured, "stored") == "region=EU daily=5 host=db.example.com pw=***"
    overridden = {
        **configured,
        "DAGRUN_VAR_REGION": "US",
        "DAGRUN_VAR_LIMITS": '{"daily": 7}',
        "DAGRUN_CONN_DB": "postgresql://etl:env%2Fsecret@env-host:6432/dw",
    }
    ok("run", "configured", "--run-id", "overridden", env=overridden)
    assert shown_by(configured, "overridden") == "region=US daily=7 host=env-host pw=***"
    log = ok("logs", "configured", "show", "--run-id", "overridden", env=configured)
    assert "env/secret" not in log and PASSWORD not in log


@pytest.mark.slow
def test_a_connection_uri_that_does_not_parse_fails_the_task_in_one_line(configured):
    broken = {**configured, "DAGRUN_CONN_DB": "postgresql://etl:hunter2/x@db:5432/sales"}
    result = dagrun("run", "configured", "--run-id", "broken", env=broken)
    assert result.returncode == 1, result.stdout + result.stderr
    [failed] = cli_json("tasks", "failed", "configured", env=configured)
    assert failed["error"].startswith("InvalidConnection: DAGRUN_CONN_DB: not a connection URI")
    assert "\n" not in failed["error"]
    log = ok("logs", "configured", "show", "--run-id", "broken", env=configured)
    assert "hunter2" not in failed["error"] + log + result.stdout + result.stderr
