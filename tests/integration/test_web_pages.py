"""The read-only pages of what ran and with what, over real HTTP from ``dagrun web``: a DAG's
source, variables, connections and pools with their secrets hidden, a task's values, and the
log of an attempt a real worker is running, followed as it grows."""

from __future__ import annotations

import html
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagrun.store import Store
from tests.helpers import queue_run, run_cli, start_cli, stop_process, wait_until, write_dag
from tests.integration import test_web_server
from tests.integration.test_web_server import Served

pytestmark = pytest.mark.slow
#: A fixture: starts ``dagrun web --port 0`` as test_web_server does, with ``cli_env``.
web_server = test_web_server.serve

SECRETS = ("tok-secret-1", "pw-secret-2", "key-secret-3")
OPS_DAG = """
    import time
    from pathlib import Path

    from dagrun import DAG, task

    GO, STOP = Path({go!r}), Path({stop!r})

    with DAG("ops", schedule=None):
        @task
        def produce(ti):
            ti.xcom_push(key="note", value={{"html": "<b>bold</b>", "rows": 3}})
            return {{"big": "x" * 70000}}

        @task
        def talk():
            print("before the page loaded", flush=True)
            while not GO.exists():
                time.sleep(0.05)
            print("after the page loaded", flush=True)
            while not STOP.exists():
                time.sleep(0.05)

        produce()
        talk()
    """


@pytest.fixture
def cli_env(cli_env, db_url):
    """The CLI's environment on each engine (``web_server`` starts ``dagrun web`` with it)."""
    return {**cli_env, "DAGRUN_DB_URL": db_url}


def get(served: Served, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(served.base + path, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def page(served: Served, path: str) -> str:
    status, body = get(served, path)
    assert status == 200, (path, body[-2000:])
    return body


def cli(env: dict[str, str], *args: str) -> None:
    result = run_cli(*args, env=env, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def working(cli_env, dags_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """The ops DAG queued with a worker running it, and variables, connections and a pool
    set through the CLI; yields the folder of the files that let ``talk`` go on and end."""
    for args in (
        ("variables", "set", "api_token", SECRETS[0]),
        ("variables", "set", "region", "<i>eu-west-1</i>"),
        ("connections", "add", "warehouse", "--uri", f"postgresql://etl:{SECRETS[1]}@db/s"),
        ("connections", "add", "api", "--conn-type", "http", "--host", "api.example.com"),
        ("pools", "set", "db", "3", "--description", "the warehouse"),
    ):
        cli(cli_env, *args)
    extra = json.dumps({"api_key": SECRETS[2], "timeout": 30})
    cli(cli_env, "connections", "add", "keyed", "--conn-type", "http", "--extra", extra)
    source = OPS_DAG.format(go=str(tmp_path / "go"), stop=str(tmp_path / "stop"))
    write_dag(dags_dir, "ops.py", source)
    store = Store(cli_env["DAGRUN_DB_URL"])
    queue_run(store, dags_dir, "ops", run_id="R")
    store.dispose()
    worker = start_cli("worker", "-c", "2", "--poll", "0.2", env=cli_env, log=tmp_path / "w.log")
    try:
        yield tmp_path
    finally:
        (tmp_path / "go").touch()
        (tmp_path / "stop").touch()
        stop_process(worker)


def test_source_variables_connections_and_pools_pages(working, web_server, dags_dir):
    served = web_server()
    source = page(served, "/dags/ops/source")
    assert f'<code class="path">{dags_dir / "ops.py"}</code>' in source
    assert '<span class="kn">import</span>' in source and "style=" not in source
    assert "&lt;b&gt;bold&lt;/b&gt;" in source  # the DAG's own text, escaped
    assert 'href="/dags/ops/source"' in page(served, "/dags/ops/grid")

    listed = {path: page(served, path) for path in ("/variables", "/connections", "/pools")}
    for body in listed.values():
        assert not any(secret in body for secret in SECRETS)
    assert "&lt;i&gt;eu-west-1&lt;/i&gt;" in listed["/variables"]
    connections = listed["/connections"]
    assert "postgresql" in connections and "&#34;timeout&#34;: 30" in connections
    assert 'data-pool="db"' in listed["/pools"] and "the warehouse" in listed["/pools"]

    status, body = get(served, "/dags/nope/source")
    assert status == 404 and "unknown DAG &#39;nope&#39;" in body


def test_a_tasks_values_and_a_running_attempts_log_followed_as_it_grows(working, web_server):
    served = web_server()
    values = "/dags/ops/runs/R/tasks/produce/values"
    body = wait_until(lambda: _values_once_done(served, values), 60, what="produce's values")
    assert "&#34;html&#34;: &#34;&lt;b&gt;bold&lt;/b&gt;&#34;" in body
    assert "characters of JSON: the first 65,536 are shown" in body
    link = html.unescape(re.search(r'href="([^"]+/values/download[^"]+)"', body)[1])
    assert json.loads(page(served, link)) == {"big": "x" * 70000}
    assert 'href="/dags/ops/runs/R/tasks/produce/values"' in page(served, "/dags/ops/runs/R")

    log = "/dags/ops/runs/R/tasks/talk/tries/1/log"
    shown = wait_until(lambda: _log_showing(served, log), 60, what="talk's first line")
    assert "after the page loaded" not in shown
    follow = html.unescape(re.search(r'data-follow="([^"]+)"', shown)[1])
    offset = int(re.search(r'data-offset="(\d+)"', shown)[1])
    chunk = json.loads(page(served, f"{follow}?offset={offset}"))
    assert (chunk["text"], chunk["running"], chunk["found"]) == ("", True, True)

    (working / "go").touch()
    chunk = wait_until(lambda: _new_text(served, follow, offset), 30, what="the next line")
    assert chunk["text"] == "after the page loaded\n" and chunk["running"]
    (working / "stop").touch()
    ended = wait_until(
        lambda: _ended(served, follow, chunk["offset"]), 60, what="the attempt to end"
    )
    assert "success" in ended["text"] and not ended["running"]
    assert "after the page loaded" in page(served, log)  # the recorded range, whole

    for path in (
        "/dags/ops/runs/R/tasks/nope/values",
        "/dags/ops/runs/NOPE/tasks/talk/values",
        "/dags/ops/runs/R/tasks/talk/tries/9/log",
        "/api/dags/ops/runs/R/tasks/talk/tries/9/log",
    ):
        assert get(served, path)[0] == 404, path


def _values_once_done(served: Served, path: str) -> str | None:
    status, body = get(served, path)
    return body if status == 200 and 'data-key="note"' in body else None


def _log_showing(served: Served, path: str) -> str | None:
    status, body = get(served, path)
    return body if status == 200 and "before the page loaded" in body else None


def _new_text(served: Served, follow: str, offset: int) -> dict | None:
    chunk = json.loads(page(served, f"{follow}?offset={offset}"))
    return chunk if chunk["text"] else None


def _ended(served: Served, follow: str, offset: int) -> dict | None:
    chunk = json.loads(page(served, f"{follow}?offset={offset}"))
    return chunk if not chunk["running"] else None
