"""Fixtures: a fresh store per test on SQLite and on PostgreSQL (its own schema per test)."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dagrun.store import Store
from dagrun.store.location import normalise_url
from tests.helpers import cli_env_in

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

# What a test does not give a home of its own (the venvs of Python tasks, a store opened
# without a URL) goes to a folder of this test process, never to the checkout's .dagrun.
os.environ["DAGRUN_HOME"] = tempfile.mkdtemp(prefix="dagrun-tests-")


def _pg_base_url() -> str | None:
    """DAGRUN_TEST_PG_URL, or a local server that answers; None means skip PG tests."""
    url = os.environ.get("DAGRUN_TEST_PG_URL")
    if url:
        return url
    try:
        engine = create_engine(normalise_url(DEFAULT_PG_URL), connect_args={"connect_timeout": 2})
        with engine.connect():
            pass
        engine.dispose()
        return DEFAULT_PG_URL
    except Exception:
        return None


_PG_BASE = _pg_base_url()


@contextmanager
def _pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a schema made for the caller alone."""
    if _PG_BASE is None:
        pytest.skip("PostgreSQL not available: set DAGRUN_TEST_PG_URL or start a local server")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(normalise_url(_PG_BASE))
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in _PG_BASE else "?"
    yield f"{_PG_BASE}{sep}options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture
def pg_url():
    """A PostgreSQL URL whose search_path is a schema made for this test alone."""
    with _pg_schema_url() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'dagrun.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request) -> str:
    """The same test on both engines (the store contract suite)."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return request.getfixturevalue(name)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def module_db_url(request, tmp_path_factory) -> Iterator[str]:
    """``db_url`` shared by the tests of a module that fill one store and only read it."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('store') / 'dagrun.db'}"
        return
    with _pg_schema_url() as url:
        yield url


@pytest.fixture
def store(db_url: str):
    s = Store(db_url)
    yield s
    s.dispose()


@pytest.fixture
def sqlite_store(sqlite_url: str):
    s = Store(sqlite_url)
    yield s
    s.dispose()


@pytest.fixture
def dags_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    return folder


@pytest.fixture
def cli_env(tmp_path: Path, dags_dir: Path) -> dict[str, str]:
    """Environment for running the CLI in a subprocess against a temporary home."""
    return cli_env_in(tmp_path)
