"""Connections: Airflow-style URIs read exactly (a table of them, good and bad), the
environment over the store, and the store's round trip on SQLite and PostgreSQL."""

from __future__ import annotations

import traceback
from datetime import UTC, datetime

import pytest

from dagrun.runtime import masking
from dagrun.runtime.connections import (
    CONN,
    Connection,
    ConnectionNotFound,
    check_id,
)
from dagrun.runtime.current import set_current
from dagrun.runtime.environment import InvalidConnection, uri_secrets
from dagrun.runtime.rendering import render
from dagrun.store import connections as conn_store
from tests.helpers import task_context

NOW = datetime(2026, 1, 5, tzinfo=UTC)

#: URI -> the fields it gives (those left out are None, extra {}).
GOOD = [
    (
        "postgresql://etl:pw@db.example.com:5432/sales?sslmode=require",
        dict(
            conn_type="postgresql",
            host="db.example.com",
            port=5432,
            login="etl",
            password="pw",
            schema="sales",
            extra={"sslmode": "require"},
        ),
    ),
    (  # every part percent-encoded, as Airflow decodes them
        "postgresql://us%40er:p%40ss%2Fw%3Ard%3F@db:5432/my%2Fdb?opt=a%20b&empty=",
        dict(
            conn_type="postgresql",
            host="db",
            port=5432,
            login="us@er",
            password="p@ss/w:rd?",
            schema="my/db",
            extra={"opt": "a b", "empty": ""},
        ),
    ),
    (  # a socket folder as the host keeps its case
        "postgres://etl@%2Fvar%2Frun%2FPG/sales",
        dict(conn_type="postgres", host="/var/run/PG", login="etl", schema="sales"),
    ),
    ("redis://cache:6379", dict(conn_type="redis", host="cache", port=6379)),
    (  # no host; a type with '-' (URI schemes have no '_') is Airflow's '_'
        "google-cloud-platform://?project=p1",
        dict(conn_type="google_cloud_platform", extra={"project": "p1"}),
    ),
    (  # __extra__ is extra whole, values of any JSON type
        "http://api.example.com/?__extra__=%7B%22retries%22%3A+3%2C+%22tls%22%3A+true%7D",
        dict(conn_type="http", host="api.example.com", extra={"retries": 3, "tls": True}),
    ),
    ("mysql://root:@h/db", dict(conn_type="mysql", host="h", login="root", schema="db")),
]


@pytest.mark.parametrize(("uri", "fields"), GOOD)
def test_a_uri_gives_its_fields(uri, fields):
    expected = Connection(conn_id="c", **fields)
    assert Connection.from_uri("c", uri) == expected


@pytest.mark.parametrize(("uri", "fields"), GOOD)
def test_get_uri_reads_back_as_the_same_connection(uri, fields):
    connection = Connection(conn_id="c", **fields)
    assert Connection.from_uri("c", connection.get_uri()) == connection


def test_get_uri_spells_a_connection_as_airflow_does():
    connection = Connection(
        "c", "postgresql", "db", 5432, "us@er", "p@ss/w", "sales", {"sslmode": "require"}
    )
    assert connection.get_uri() == "postgresql://us%40er:p%40ss%2Fw@db:5432/sales?sslmode=require"


#: URI -> the word its error must say; none of them may show its password, "hunter2".
BAD = [
    ("hunter2", "must start with its type"),
    ("db.example.com:5432/sales?pw=hunter2", "must start with its type"),
    (" postgresql://u:hunter2@h/db", "must start with its type"),
    ("postgresql://u:hunter2/x@h/db", "host or port does not parse"),  # '/' not encoded
    ("postgresql://u:hunter2@h:99999/db", "host or port does not parse"),
    ("postgresql://u:hunter2@h:port/db", "host or port does not parse"),
    ("http://u:hunter2@[::1/x", "host or port does not parse"),
    ("http://u:hunter2@h/?__extra__=[1]", "__extra__ parameter is not a JSON object"),
    ("http://u:hunter2@h/?__extra__=hunter2", "__extra__ parameter is not a JSON object"),
]


@pytest.mark.parametrize(("uri", "said"), BAD)
def test_a_bad_uri_is_one_line_naming_its_source_and_never_the_password(uri, said):
    with pytest.raises(InvalidConnection) as info:
        Connection.from_uri("db", uri, source="DAGRUN_CONN_DB")
    message = str(info.value)
    assert message.startswith("DAGRUN_CONN_DB: ") and said in message
    assert "hunter2" not in message and "\n" not in message
    assert "hunter2" not in "".join(traceback.format_exception(info.value))
    # Masking still finds the password where the URI's authority parses.
    assert uri_secrets(uri) == ({"hunter2"} if "__extra__" in said else set())


def test_uri_secrets_are_the_password_decoded_and_as_written():
    assert uri_secrets("postgresql://u:p%40ss%2Fw@h/db") == {"p@ss/w", "p%40ss%2Fw"}
    assert uri_secrets("postgresql://u:plain@h/db") == {"plain"}
    assert uri_secrets("postgresql://u@h/db") == set()
    assert uri_secrets("not a uri") == set()


def test_repr_leaves_the_password_out():
    shown = repr(Connection.from_uri("db", "postgresql://etl:hunter2@h/db"))
    assert "hunter2" not in shown and "etl" in shown


@pytest.mark.parametrize("conn_id", ["", "my db", "db\n", "x" * 251, 7])
def test_ids_that_cannot_be_stored_are_refused(conn_id):
    with pytest.raises(InvalidConnection, match="an id is 1-250"):
        check_id(conn_id)


@pytest.fixture
def cache(monkeypatch):
    """A fresh secret cache for this process, so what a test registers is seen alone."""
    fresh = masking.SecretCache()
    monkeypatch.setattr(masking, "CACHE", fresh)
    return fresh


def test_the_environment_overrides_the_store_and_is_upper_cased(monkeypatch, store, cache):
    _save(store, Connection("warehouse", "postgresql", host="stored-host", password="stored-pw"))
    monkeypatch.setenv("DAGRUN_DB_URL", store.url)
    assert Connection.get("warehouse").host == "stored-host"
    monkeypatch.setenv("DAGRUN_CONN_WAREHOUSE", "postgresql://etl:env%40pw@env-host:6432/dw")
    found = Connection.get("warehouse")
    assert (found.host, found.port, found.password) == ("env-host", 6432, "env@pw")
    assert "env@pw" in cache.masker, "a password fetched is masked from then on"


def test_a_bad_uri_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("DAGRUN_CONN_DB", "postgresql://etl:hunter2/x@h/db")
    with pytest.raises(InvalidConnection) as info:
        Connection.get("db")
    assert str(info.value).startswith("DAGRUN_CONN_DB: not a connection URI")
    assert "hunter2" not in str(info.value)


def test_a_missing_connection_is_a_key_error_naming_it(monkeypatch, sqlite_store):
    monkeypatch.setenv("DAGRUN_DB_URL", sqlite_store.url)
    with pytest.raises(KeyError) as info:
        Connection.get("nowhere")
    assert isinstance(info.value, ConnectionNotFound) and info.value.conn_id == "nowhere"
    assert str(info.value) == (
        "no connection 'nowhere' (see `dagrun connections list`; or set DAGRUN_CONN_NOWHERE)"
    )


def test_in_an_attempt_the_attempts_store_is_read(monkeypatch, store, sqlite_url, cache):
    monkeypatch.setenv("DAGRUN_DB_URL", sqlite_url)  # another database: not read in an attempt
    _save(store, Connection("db", "postgresql", host="from-the-attempts-store"))
    set_current(task_context(store.url, NOW))
    try:
        assert Connection.get("db").host == "from-the-attempts-store"
    finally:
        set_current(None)


def test_the_store_keeps_every_field_and_replaces_whole(store):
    first = Connection("db", "postgresql", "h", 5432, "etl", "pw", "sales", {"a": [1, {"b": None}]})
    _save(store, first, description="the warehouse")
    replacement = Connection("db", "mysql", host="other")
    _save(store, replacement, description=None)
    _save(store, Connection("api", "http", host="api"), description="the API")
    with store.read() as conn:
        assert Connection(**conn_store.get_connection(conn, "db")) == Connection(
            "db", "mysql", host="other", description="the warehouse"
        )
        assert [c["conn_id"] for c in conn_store.list_connections(conn)] == ["api", "db"]
    with store.write() as conn:
        assert conn_store.delete_connection(conn, "db")
        assert not conn_store.delete_connection(conn, "db")
        assert conn_store.get_connection(conn, "db") is None


def test_templates_read_connections_by_attribute_or_item(monkeypatch):
    monkeypatch.setenv("DAGRUN_CONN_DB", "postgresql://etl@db.example.com:5432/sales")
    monkeypatch.setenv("DAGRUN_CONN_MY-DB", "redis://cache:6379")
    names = {"conn": CONN}
    assert render("{{ conn.db.host }}:{{ conn.db.port }}", names) == "db.example.com:5432"
    assert render("{{ conn['my-db'].host }}", names) == "cache"
    with pytest.raises(ConnectionNotFound):
        render("{{ conn.elsewhere.host }}", names)


def _save(store, connection: Connection, description: str | None = None) -> None:
    with store.write() as conn:
        conn_store.set_connection(conn, connection, description, NOW)
