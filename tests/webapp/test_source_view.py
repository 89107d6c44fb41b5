"""A DAG's source page: the text its last good parse read, highlighted with classes only,
escaped, numbered, with its path; while the file fails, that source with the error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import update

from dagrun.runtime.dag_sync import sync_dags
from dagrun.store import Store, schema
from dagrun.webapp import WebApp, source_view
from tests.helpers import write_dag
from tests.webapp.test_webapp import Elements, call

XSS = "</pre><script>alert('src')</script>"

SOURCE_DAG = f"""
    from dagrun import DAG, task

    NOTE = {XSS!r}

    with DAG("src", schedule=None, description="shown on its source page"):
        @task
        def hello():
            return NOTE

        hello()
    """


@pytest.fixture
def served(sqlite_store: Store, tmp_path: Path) -> tuple[WebApp, Path, Path]:
    dags = tmp_path / "dags"
    path = write_dag(dags, "src.py", SOURCE_DAG)
    sync_dags(sqlite_store, str(dags))
    return WebApp(sqlite_store, logs_root=tmp_path / "logs"), dags, path


def test_the_source_page_shows_the_file_highlighted_escaped_and_numbered(served):
    app, _, path = served
    reply = call(app, "/dags/src/source")
    assert reply.status == 200
    page = reply.text
    assert f'<code class="path">{path}</code>' in page
    assert "<script>alert" not in page and "&lt;/pre&gt;&lt;script&gt;alert(" in page
    # Pygments' classes, no style attribute (the CSP allows none), a number per line
    assert '<span class="kn">from</span>' in page and "style=" not in page
    lines = path.read_text().count("\n")
    assert len([a for a in Elements(page).select("a") if a.get("href", "").startswith("#L-")]) == (
        lines
    )
    assert f"{lines} lines" in page
    assert re.search(r'<link rel="stylesheet" href="/static/source\.css\?v=\w+">', page)


def test_the_source_stylesheet_colours_only_the_source(served):
    app, _, _ = served
    reply = call(app, "/static/source.css")
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/css")
    rules = [line for line in reply.text.splitlines() if "{" in line and "@media" not in line]
    assert rules and all(line.startswith(".source") for line in rules)
    assert ".source .kn {" in reply.text  # the class of `from` above has a colour
    assert "@media (prefers-color-scheme: dark)" in reply.text


def test_every_page_of_a_dag_links_to_its_source(served):
    app, _, _ = served
    for page in ("/dags/src/grid", "/dags/src/graph", "/dags/src/durations"):
        assert 'href="/dags/src/source"' in call(app, page).text


def test_a_file_that_fails_shows_the_source_its_dags_run_from_and_the_error(served, sqlite_store):
    app, dags, path = served
    good = path.read_text()
    path.write_text(good + "\nraise RuntimeError('<b>broken</b> on purpose')\n")
    sync_dags(sqlite_store, str(dags))
    page = call(app, "/dags/src/source").text
    line = good.count("\n") + 2
    assert "The file fails to load" in page and f"line {line} of the file as it is now" in page
    assert "&lt;b&gt;broken&lt;/b&gt; on purpose" in page and "<b>broken</b>" not in page
    assert "on purpose" not in page.split('class="scroll source-view"')[1]  # the good source


def test_a_file_whose_source_the_store_did_not_keep_says_so(served, sqlite_store):
    app, _, _ = served
    with sqlite_store.write() as conn:
        conn.execute(update(schema.dag_file).values(good_source=None))
    page = call(app, "/dags/src/source").text
    assert "The store keeps no source for this file yet" in page


def test_a_source_too_long_to_colour_is_plain_text_still_escaped(served, monkeypatch):
    app, _, _ = served
    monkeypatch.setattr(source_view, "MAX_HIGHLIGHTED_CHARS", 100)
    page = call(app, "/dags/src/source").text
    assert "too long to colour" in page and '<span class="kn">' not in page
    assert "&lt;/pre&gt;&lt;script&gt;" in page


def test_an_unknown_dag_has_no_source_page(served):
    app, _, _ = served
    reply = call(app, "/dags/nope/source")
    assert reply.status == 404 and "unknown DAG" in reply.text and "nope" in reply.text
