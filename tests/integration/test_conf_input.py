"""``--conf`` as every command that takes it reads it: inline, ``@FILE`` or ``-`` (stdin),
a conf too big for a command line from a file, and bad input as one line naming its file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dagrun.cli.options import MAX_CONF_BYTES
from dagrun.store import Store
from tests.helpers import cli_json, db_rows, run_cli, table_counts, write_dag

SHOWN = """
from dagrun import DAG, Param, task

with DAG("shown", schedule=None, params={"n": Param(5, type="integer", minimum=1)}):

    @task
    def show(conf, params):
        print(f"conf={conf!r} n={params['n']}")

    show()
"""


@pytest.fixture
def shown(cli_env, dags_dir):
    write_dag(dags_dir, "shown.py", SHOWN)
    return cli_env


@pytest.mark.slow
def test_trigger_reads_the_conf_from_a_file_and_from_stdin(shown, tmp_path):
    conf_file = tmp_path / "conf.json"
    conf_file.write_text('{"n": 3, "region": "EU"}')
    cli_json("trigger", "shown", "--run-id", "from-file", "--conf", f"@{conf_file}", env=shown)
    piped = run_cli(
        "trigger", "shown", "--run-id", "from-stdin", "--conf", "-", env=shown, input='{"n": 7}'
    )
    assert piped.returncode == 0, piped.stderr
    confs = {r["run_id"]: r["conf"] for r in cli_json("runs", "list", "shown", env=shown)}
    assert confs == {"from-file": {"n": 3, "region": "EU"}, "from-stdin": {"n": 7}}


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ("run", "shown"),
        ("test", "shown", "2026-01-05"),
        ("tasks", "test", "shown", "show", "2026-01-05"),
    ],
    ids=["run", "test", "tasks-test"],
)
def test_every_command_taking_a_conf_reads_it_from_a_file_and_stdin(shown, tmp_path, command):
    conf_file = tmp_path / "conf.json"
    conf_file.write_text('{"n": 3}')
    for given, piped in ((f"@{conf_file}", None), ("-", '{"n": 4}')):
        done = run_cli(*command, "--conf", given, env=shown, input=piped)
        assert done.returncode == 0, done.stdout + done.stderr
        n = 3 if piped is None else 4
        shown_by = done.stdout + done.stderr
        if command[0] == "run":  # its task logs to its attempt's log, not the terminal
            shown_by = run_cli("logs", "shown", "show", "--run-id", _last_run(shown), env=shown)
            shown_by = shown_by.stdout
        assert f"conf={{'n': {n}}} n={n}" in shown_by


def _last_run(env: dict[str, str]) -> str:
    return db_rows(env, "SELECT run_id FROM dag_run ORDER BY id DESC")[0][0]


@pytest.mark.parametrize(
    ("given", "content", "words"),
    [
        ("@{folder}/missing.json", None, ["--conf @", "missing.json", "No such file"]),
        ("@{folder}/broken.json", '{"n": ', ["--conf @", "broken.json", "is not JSON"]),
        ("@{folder}/list.json", "[1, 2]", ["--conf @", "list.json", "must be a JSON object"]),
        ("@{folder}/bytes.json", b"\xff\xfe\x00{", ["bytes.json", "is not JSON"]),
        ("@{folder}", None, ["--conf @", "Is a directory"]),
        ("-", "nope", ["--conf - (stdin) is not JSON"]),
        ("-", "3", ["--conf - (stdin) must be a JSON object"]),
    ],
    ids=["missing", "broken", "not-an-object", "not-utf8", "a-folder", "stdin-broken", "stdin-3"],
)
def test_a_bad_conf_file_or_stdin_is_one_line_exit_2_and_makes_no_run(
    shown, tmp_path, given, content, words
):
    given = given.format(folder=tmp_path)
    if content is not None and given != "-":
        target = Path(given[1:])
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    Path(shown["DAGRUN_HOME"]).mkdir()
    Store(shown["DAGRUN_DB_URL"]).dispose()  # the schema, for the counts
    before = table_counts(shown)
    piped = content if given == "-" else None
    failed = run_cli("trigger", "shown", "--conf", given, env=shown, input=piped)
    assert failed.returncode == 2, failed.stdout + failed.stderr
    [line] = failed.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in failed.stderr
    for word in words:
        assert word in line
    assert table_counts(shown) == before


def test_a_conf_file_over_the_limit_is_refused_before_it_is_read(shown, tmp_path):
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:  # sparse: nothing is written, the size is what counts
        handle.truncate(MAX_CONF_BYTES + 1)
    started = time.monotonic()
    failed = run_cli("trigger", "shown", "--conf", f"@{huge}", env=shown)
    assert failed.returncode == 2
    [line] = failed.stderr.splitlines()
    size = f"{MAX_CONF_BYTES + 1:,} bytes"
    assert f"--conf @{huge} is {size}: a conf holds at most 256 MiB of JSON" in line
    assert time.monotonic() - started < 10


@pytest.mark.slow
def test_a_200_mb_conf_from_a_file_is_stored_whole_and_the_run_page_stays_small(
    cli_env, dags_dir, db_url, tmp_path
):
    """Too big for any command line (a single argument holds 128 KiB on Linux), not for a
    file: the run keeps it whole on either engine, and its page says how to print it
    instead of rendering 200 MB of HTML."""
    from dagrun.webapp import WebApp
    from tests.webapp.test_webapp import call

    env = {**cli_env, "DAGRUN_DB_URL": db_url}
    write_dag(dags_dir, "shown.py", SHOWN)
    conf_file = tmp_path / "big.json"
    text = json.dumps({"n": 2, "rows": "x" * 200_000_000})
    conf_file.write_text(text)
    done = run_cli("trigger", "shown", "--run-id", "big", "--conf", f"@{conf_file}", env=env)
    assert done.returncode == 0, done.stderr
    assert db_rows(env, "SELECT length(conf) FROM dag_run WHERE run_id = 'big'") == [(len(text),)]
    store = Store(db_url)
    try:
        page = call(WebApp(store), "/dags/shown/runs/big")
    finally:
        store.dispose()
    assert page.status == 200 and len(page.body) < 100_000
    assert "191 MiB of JSON, too big for this page" in page.text
    assert "dagrun runs show shown big --json" in page.text
