"""The variables, connections and pools pages: what the store holds, escaped, with every
secret hidden as the logs hide it (``dagrun.store.sensitive``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagrun.store import Store
from dagrun.store import connections as conn_store
from dagrun.store import pools as pool_store
from dagrun.store import variables as var_store
from dagrun.webapp import WebApp
from tests.helpers import queue_run, write_dag
from tests.store.test_sensitive import EXTRA, Conn
from tests.webapp.test_webapp import call

PASSWORD = "pw-s3cr3t"
XSS = "<img src=x onerror=alert(1)>"

POOLED_DAG = """
    from dagrun import DAG, task

    with DAG("pooled", schedule=None):
        @task(pool="ghost")
        def waits():
            return 1

        waits()
    """


@pytest.fixture
def app(sqlite_store: Store, tmp_path: Path) -> WebApp:
    now = sqlite_store.now()
    with sqlite_store.write() as conn:
        var_store.set_variable(conn, "api_token", "tok-12345", "the <b>API</b>", now)
        var_store.set_variable(conn, "region", XSS, None, now)
        var_store.set_variable(conn, "dsn", f"postgresql://etl:{PASSWORD}@db/sales", None, now)
        var_store.set_variable(conn, "big", "x" * 5000, None, now)
        conn_store.set_connection(
            conn, Conn("warehouse", password=PASSWORD, extra=EXTRA), f"copy of {PASSWORD}", now
        )
        conn_store.set_connection(conn, Conn("public", host=XSS), None, now)
        pool_store.set_pool(conn, "db", 2, XSS)
    return WebApp(sqlite_store, logs_root=tmp_path / "logs")


def test_variables_show_values_and_hide_secrets_as_logs_do(app):
    reply = call(app, "/variables")
    assert reply.status == 200
    page = reply.text
    assert "tok-12345" not in page and 'data-key="api_token"' in page
    assert "the &lt;b&gt;API&lt;/b&gt;" in page  # descriptions are escaped too
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and XSS not in page
    # a connection's password inside another value is masked there too, as in a log
    assert PASSWORD not in page and "postgresql://etl:***@db/sales" in page
    assert "5,000 characters in all" in page and "dagrun variables get big" in page


def test_connections_hide_passwords_and_sensitive_extra_fields(app):
    reply = call(app, "/connections")
    assert reply.status == 200
    page = reply.text
    for secret in (PASSWORD, "key-three", "nested-four", "123456", "pem-five"):
        assert secret not in page, secret
    assert "&#34;api_key&#34;: &#34;***&#34;" in page and "&#34;timeout&#34;: 30" in page
    assert "copy of ***" in page  # the password in the description, replaced
    assert "&lt;img src=x" in page and XSS not in page


def test_pools_show_slots_tasks_and_pools_tasks_wait_for(app, sqlite_store, tmp_path):
    write_dag(tmp_path / "dags", "pooled.py", POOLED_DAG)
    queue_run(sqlite_store, tmp_path / "dags", "pooled")
    reply = call(app, "/pools")
    assert reply.status == 200
    page = reply.text
    assert 'data-pool="db"' in page and "&lt;img src=x" in page and XSS not in page
    assert 'data-pool="ghost"' in page and "dagrun pools set ghost SLOTS" in page


def test_every_page_links_to_pools_variables_and_connections(app):
    page = call(app, "/").text
    for href in ("/pools", "/variables", "/connections"):
        assert f'<a href="{href}">' in page


def test_empty_pages_say_how_to_add_one(sqlite_store, tmp_path):
    app = WebApp(sqlite_store, logs_root=tmp_path / "logs")
    assert "dagrun variables set KEY VALUE" in call(app, "/variables").text
    assert "dagrun connections add CONN_ID" in call(app, "/connections").text
    assert "dagrun pools set NAME SLOTS" in call(app, "/pools").text
