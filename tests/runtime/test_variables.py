"""Variables: the store's round trip on SQLite and PostgreSQL, the environment over the
store, JSON both ways, typed errors that name the key, templates, and the stored secrets
masking reads (the SQL rule checked against the Python one)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dagrun.runtime import masking
from dagrun.runtime.connections import Connection
from dagrun.runtime.current import set_current
from dagrun.runtime.rendering import render
from dagrun.runtime.variables import VAR, InvalidVariable, Variable, VariableNotFound
from dagrun.store import audit
from dagrun.store import connections as conn_store
from dagrun.store import variables as var_store
from dagrun.store.sensitive import is_sensitive
from tests.helpers import task_context

NOW = datetime(2026, 1, 5, tzinfo=UTC)


@pytest.fixture
def cache(monkeypatch):
    """A fresh secret cache for this process, so what a test registers is seen alone."""
    fresh = masking.SecretCache()
    monkeypatch.setattr(masking, "CACHE", fresh)
    return fresh


@pytest.fixture
def outside(monkeypatch, store):
    """Outside an attempt, the API reads this process's database: the test's store."""
    monkeypatch.setenv("DAGRUN_DB_URL", store.url)
    return store


def test_set_and_get_round_trip_text_and_json(outside, cache):
    Variable.set("region", "EU")
    Variable.set("limits", {"daily": 5, "tags": ["a", None]}, serialize_json=True)
    assert Variable.get("region") == "EU"
    assert Variable.get("limits", deserialize_json=True) == {"daily": 5, "tags": ["a", None]}
    assert json.loads(Variable.get("limits")) == {"daily": 5, "tags": ["a", None]}
    assert not cache.masker, "no key named a secret"


def test_a_missing_key_is_a_key_error_naming_it_unless_there_is_a_default(outside):
    with pytest.raises(KeyError) as info:
        Variable.get("nowhere")
    assert isinstance(info.value, VariableNotFound) and info.value.key == "nowhere"
    assert str(info.value) == (
        "no variable 'nowhere' (see `dagrun variables list`; or set DAGRUN_VAR_NOWHERE)"
    )
    assert Variable.get("nowhere", default=None) is None
    assert Variable.get("nowhere", {"a": 1}, deserialize_json=True) == {"a": 1}


def test_the_environment_overrides_the_store_with_the_key_upper_cased(monkeypatch, outside):
    Variable.set("region", "EU")
    monkeypatch.setenv("DAGRUN_VAR_REGION", "US")
    monkeypatch.setenv("DAGRUN_VAR_ONLY_HERE", '{"n": 1}')
    assert Variable.get("region") == "US"
    assert Variable.get("only_here", deserialize_json=True) == {"n": 1}


def test_json_that_does_not_parse_names_the_key_not_the_value(outside):
    Variable.set("api_token", "not-json-s3cr3t")
    with pytest.raises(InvalidVariable) as info:
        Variable.get("api_token", deserialize_json=True)
    assert info.value.key == "api_token" and "s3cr3t" not in str(info.value)
    assert str(info.value).startswith("variable 'api_token': not JSON: Expecting value")


@pytest.mark.parametrize(
    ("key", "value", "serialize_json", "said"),
    [
        ("my key", "v", False, "a key is 1-250"),
        ("k\n", "v", False, "a key is 1-250"),
        ("x" * 251, "v", False, "a key is 1-250"),
        ("k", 5, False, "a value is a str (or pass serialize_json=True), not int"),
        ("k", {1, 2}, True, "cannot be written as JSON"),
    ],
)
def test_what_cannot_be_stored_is_refused_before_the_store(key, value, serialize_json, said):
    with pytest.raises(InvalidVariable, match=said.replace("(", r"\(").replace(")", r"\)")):
        Variable.set(key, value, serialize_json=serialize_json)


def test_a_task_setting_a_secret_is_audited_without_its_value_and_masked(store, cache):
    set_current(task_context(store.url, NOW))
    try:
        Variable.set("db_password", "s3cr3t-value")
        assert Variable.get("db_password") == "s3cr3t-value"
    finally:
        set_current(None)
    assert "s3cr3t-value" in cache.masker
    with store.read() as conn:
        [entry] = audit.entries(conn)
    assert (entry.action, entry.dag_id, entry.run_id) == ("variable_set", "d", "r")
    assert entry.detail == {"key": "db_password", "task_id": "t"}


def test_the_store_lists_by_key_keeps_a_description_and_deletes(store):
    with store.write() as conn:
        var_store.set_variable(conn, "b", "1", "the b", NOW)
        var_store.set_variable(conn, "a", "2", None, NOW)
        var_store.set_variable(conn, "b", "3", None, NOW)
    with store.read() as conn:
        rows = var_store.list_variables(conn)
    assert [(r.key, r.value, r.description) for r in rows] == [
        ("a", "2", None),
        ("b", "3", "the b"),
    ]
    with store.write() as conn:
        assert var_store.delete_variable(conn, "a")
        assert not var_store.delete_variable(conn, "a")
        assert var_store.get_variable(conn, "a") is None


#: Keys judged by both the query and ``is_sensitive``: the words in any case, anywhere, and
#: near misses ('_' in the words is a character, not SQL's one-character wildcard).
KEYS = [
    "db_password",
    "DB_PASSWORD",
    "Secret",
    "github_token",
    "TOKENS",
    "stripe_api_key",
    "ssh_PRIVATE_KEY",
    "apixkey",
    "private-key",
    "passwd",
    "region",
    "tok_en",
]


def test_the_stored_secrets_are_what_is_sensitive_says_and_every_password(store):
    with store.write() as conn:
        for key in KEYS:
            var_store.set_variable(conn, key, f"value of {key}", None, NOW)
        for conn_id, password in [("a", "pw-of-a"), ("b", None)]:
            connection = Connection(conn_id, "postgresql", host="h", password=password)
            conn_store.set_connection(conn, connection, None, NOW)
    with store.read() as conn:
        found = var_store.stored_secrets(conn)
    expected = [f"value of {k}" for k in KEYS if is_sensitive(k)] + ["pw-of-a"]
    assert sorted(found) == sorted(expected)
    assert len(expected) == 8  # the near misses are not secrets


def test_templates_read_variables_as_text_json_or_with_a_default(monkeypatch):
    monkeypatch.setenv("DAGRUN_VAR_REGION", "EU")
    monkeypatch.setenv("DAGRUN_VAR_LIMITS", '{"daily": 5}')
    monkeypatch.setenv("DAGRUN_VAR_MY-KEY", "dashed")
    names = {"var": VAR}
    assert render("{{ var.value.region }} {{ var.json.limits.daily }}", names) == "EU 5"
    assert render("{{ var.value['my-key'] }}", names) == "dashed"
    assert render("{{ var.value.get('nowhere', 'fallback') }}", names) == "fallback"
    with pytest.raises(VariableNotFound):
        render("{{ var.value.nowhere }}", names)
