"""One rule for what is secret, for the logs and the web page alike: sensitive variables,
connection passwords, and the fields of a connection's extra under a sensitive key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagrun.store import Store
from dagrun.store import connections as conn_store
from dagrun.store import variables as var_store
from dagrun.store.sensitive import (
    REPLACEMENT,
    extra_secrets,
    masked_extra,
    secrets_pattern,
)

EXTRA = {
    "timeout": 30,
    "api_key": "key-three",
    "auth": {"client_secret": "nested-four", "user": "etl"},
    "headers": [{"Authorization-Token": 123456}],
    "private_key": {"pem": "pem-five", "passphrase": None},
}


@dataclass(frozen=True)
class Conn:
    conn_id: str
    conn_type: str = "http"
    host: str | None = "api.example.com"
    port: int | None = None
    login: str | None = "etl"
    password: str | None = None
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def test_an_extras_fields_under_sensitive_keys_are_secrets_at_any_depth():
    assert sorted(extra_secrets(EXTRA)) == ["123456", "key-three", "nested-four", "pem-five"]
    assert masked_extra(EXTRA) == {
        "timeout": 30,
        "api_key": REPLACEMENT,
        "auth": {"client_secret": REPLACEMENT, "user": "etl"},
        "headers": [{"Authorization-Token": REPLACEMENT}],
        "private_key": REPLACEMENT,
    }
    assert list(extra_secrets("not an object")) == [] and masked_extra(None) is None


def test_the_pattern_hides_the_longest_secret_whole_and_never_a_short_one():
    pattern = secrets_pattern(["hunter2", "hunter2-and-more", "abc"])
    assert pattern is not None
    assert pattern.sub(REPLACEMENT, "a hunter2-and-more b hunter2 c abc") == "a *** b *** c abc"
    assert secrets_pattern(["abc", ""]) is None


def test_the_stored_secrets_include_the_sensitive_fields_of_connection_extras(store: Store):
    now = store.now()
    with store.write() as conn:
        var_store.set_variable(conn, "db_PASSWORD", "var-one", None, now)
        var_store.set_variable(conn, "region", "eu-west-1", None, now)
        conn_store.set_connection(conn, Conn("api", password="pw-two", extra=EXTRA), None, now)
        conn_store.set_connection(conn, Conn("plain"), None, now)
    with store.read() as conn:
        found = var_store.stored_secrets(conn)
    assert sorted(found) == sorted(
        ["var-one", "pw-two", "key-three", "nested-four", "123456", "pem-five"]
    )
