"""A task instance's values page: what it returned (TaskFlow) and what it pushed (XComs) as
indented, escaped JSON; a value over 64 KB cut by the database, with its size and a link
that downloads it whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagrun.runtime.dag_sync import sync_dags
from dagrun.states import AttemptOutcome
from dagrun.store import Store, attempts, dag_reads, xcoms
from dagrun.store import variables as var_store
from dagrun.webapp import WebApp, run_url
from dagrun.webapp.values_view import HEAD_CHARS
from tests.helpers import queue_run, write_dag
from tests.webapp.test_webapp import call

OWNER = "test-worker"
RETURN = xcoms.RETURN_KEY
XSS = "<script>alert('xcom')</script>"
SECRET = "pw-4-the-db"
BIG = {"rows": ["é" * 100] * 1000}  # about 100,000 characters of JSON

VALUES_DAG = """
    from dagrun import DAG, task

    with DAG("vals", schedule=None):
        @task
        def shops():
            return ["berlin", "paris"]

        @task
        def per(shop):
            return shop

        @task
        def big():
            return 1

        @task
        def quiet():
            return None

        per.expand(shop=shops())
        big()
        quiet()
    """

#: What each task instance reports: (return value, pushed XComs).
RESULTS = {
    ("shops", -1): (["berlin", "paris"], {"note": XSS, "dsn": f"pg://etl:{SECRET}@db/s"}),
    ("per", 0): ("berlin", None),
    ("per", 1): ("paris", None),
    ("big", -1): (BIG, None),
    ("quiet", -1): (None, None),
}


def work_off(store: Store) -> None:
    """Claim and complete every queued task with its ``RESULTS`` until none is left."""
    with store.read() as conn:
        spec = dag_reads.get_dag(conn, "vals").spec
    while True:
        with store.write() as conn:
            claims = attempts.claim(conn, OWNER, 100, 30, store.now(conn))
        if not claims:
            return
        outcomes = []
        for c in claims:
            value, pushed = RESULTS[(c.task_id, c.map_index)]
            outcomes.append(
                attempts.Outcome.of(
                    c,
                    AttemptOutcome.SUCCESS,
                    return_value=None if value is None else json.dumps(value),
                    xcoms={k: json.dumps(v) for k, v in pushed.items()} if pushed else None,
                )
            )
        with store.write() as conn:
            attempts.complete(conn, OWNER, outcomes, lambda _: spec, store.now(conn))


@pytest.fixture
def done(store: Store, tmp_path: Path) -> Store:
    """A run of ``vals`` whose every task succeeded, on SQLite and PostgreSQL."""
    dags = tmp_path / "dags"
    write_dag(dags, "vals.py", VALUES_DAG)
    sync_dags(store, str(dags))
    queue_run(store, dags, "vals", run_id="R")
    work_off(store)
    with store.write() as conn:
        var_store.set_variable(conn, "db_password", SECRET, None, store.now(conn))
    return store


def values(app: WebApp, task_id: str, query: str = "") -> str:
    reply = call(app, f"{run_url('vals', 'R')}/tasks/{task_id}/values{query}")
    assert reply.status == 200, reply.text
    return reply.text


def test_the_return_value_and_the_pushed_values_are_indented_escaped_json(done, tmp_path):
    app = WebApp(done, logs_root=tmp_path / "logs")
    page = values(app, "shops")
    assert '<pre class="value">[\n  &#34;berlin&#34;,\n  &#34;paris&#34;\n]</pre>' in page
    assert 'data-key="dsn"' in page and 'data-key="note"' in page
    assert "&lt;script&gt;alert(" in page and XSS not in page
    assert page.index('data-key="return_value"') < page.index('data-key="dsn"')


def test_a_secret_the_store_holds_is_masked_in_values_as_in_logs(done, tmp_path):
    app = WebApp(done, logs_root=tmp_path / "logs")
    page = values(app, "shops")
    assert SECRET not in page and "pg://etl:***@db/s" in page
    download = call(app, f"{run_url('vals', 'R')}/tasks/shops/values/download?key=dsn")
    assert download.status == 200 and json.loads(download.body) == "pg://etl:***@db/s"


def test_a_mapped_tasks_instance_is_named_by_its_index(done, tmp_path):
    app = WebApp(done, logs_root=tmp_path / "logs")
    assert "&#34;paris&#34;" in values(app, "per", "?map_index=1")
    reply = call(app, f"{run_url('vals', 'R')}/tasks/per/values")
    assert reply.status == 400 and "is mapped" in reply.text
    reply = call(app, f"{run_url('vals', 'R')}/tasks/per/values?map_index=5")
    assert reply.status == 404 and "has no map index 5" in reply.text


def test_a_value_over_64_kb_is_cut_with_its_size_and_a_download_of_all_of_it(done, tmp_path):
    app = WebApp(done, logs_root=tmp_path / "logs")
    whole = json.dumps(BIG)
    page = values(app, "big")
    assert f"{len(whole):,} characters of JSON: the first {HEAD_CHARS:,} are shown" in page
    link = "/dags/vals/runs/R/tasks/big/values/download?key=return_value"
    assert f'href="{link}"' in page
    download = call(app, link)
    assert download.status == 200 and download.headers["Content-Type"].startswith(
        "application/json"
    )
    assert download.headers["Content-Disposition"] == 'attachment; filename="big.return_value.json"'
    assert json.loads(download.body) == BIG


def test_the_store_reads_only_the_head_of_each_value(done):
    with done.read() as conn:
        run_pk = conn.exec_driver_sql("SELECT id FROM dag_run").scalar_one()
        ti_id = conn.exec_driver_sql(
            "SELECT id FROM task_instance WHERE task_id = 'big'"
        ).scalar_one()
        (found,) = xcoms.instance_values(conn, ti_id, run_pk, "big", -1, 10)
    assert (found.key, found.size, found.head) == (RETURN, len(json.dumps(BIG)), '{"rows": [')
    assert not found.whole


def test_a_task_that_left_nothing_says_so_and_unknown_names_are_404s(done, tmp_path):
    app = WebApp(done, logs_root=tmp_path / "logs")
    assert "It left no values" in values(app, "quiet")
    base = run_url("vals", "R")
    for url, said in (
        (f"{base}/tasks/nope/values", "nope"),
        ("/dags/vals/runs/NOPE/tasks/big/values", "NOPE"),
        ("/dags/nope/runs/R/tasks/big/values", "unknown DAG"),
        (f"{base}/tasks/quiet/values/download?key=return_value", "left no value"),
        (f"{base}/tasks/shops/values/download?key=missing", "left no value under the key"),
    ):
        reply = call(app, url)
        assert reply.status == 404 and said in reply.text, url
    assert call(app, f"{base}/tasks/shops/values/download").status == 400


def test_the_run_page_links_each_task_instance_to_its_values(done, tmp_path):
    page = call(WebApp(done, logs_root=tmp_path / "logs"), run_url("vals", "R")).text
    assert 'href="/dags/vals/runs/R/tasks/shops/values"' in page
    assert 'href="/dags/vals/runs/R/tasks/per/values?map_index=1"' in page
