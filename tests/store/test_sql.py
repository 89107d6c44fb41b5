"""dagrun's one way to run SQL (dagrun.store.sql) and its catalogue of statements: the same
rows, values and errors as SQLAlchemy's, on SQLite and PostgreSQL; a loud failure if the
SQLAlchemy internals it reads change; every statement named and described."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from dagrun.errors import StoreError
from dagrun.store import Store, sql, statements
from dagrun.store.schema import meta, pool, task_instance
from tests.store import store_statements

T0 = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


def test_many_rows_in_one_executemany_with_shared_and_own_values(store: Store):
    statement = insert(pool).values(
        name=bindparam("b_name"), slots=bindparam("b_slots"), description=bindparam("b_note")
    )
    rows = [
        {"b_name": f"p{i}", "b_slots": i, "b_note": None if i % 2 else "even"} for i in range(5)
    ]
    with store.write() as conn:
        assert sql.execute_many(conn, statement, rows) == 5
        assert sql.execute_many(conn, statement, []) == 0
    with store.read() as conn:
        got = conn.execute(select(pool.c.name, pool.c.slots, pool.c.description)).all()
    assert sorted(got) == [(f"p{i}", i, None if i % 2 else "even") for i in range(5)]


def test_in_lists_of_any_length_and_empty(store: Store):
    with store.write() as conn:
        sql.execute_many(
            conn,
            insert(meta).values(key=bindparam("b_key"), value=bindparam("b_value")),
            [{"b_key": k, "b_value": k.upper()} for k in ("a", "b", "c")],
        )
    statement = select(meta.c.key, meta.c.value).where(
        meta.c.key.in_(bindparam("b_keys", expanding=True))
    )
    with store.read() as conn:
        assert sorted(sql.rows(conn, statement, {"b_keys": ["a", "c", "zz"]})) == [
            ("a", "A"),
            ("c", "C"),
        ]
        assert sql.rows(conn, statement, {"b_keys": []}) == []
        (row,) = sql.rows(conn, statement, {"b_keys": ["b"]})
        assert (row.key, row.value) == ("b", "B")  # rows are named by column


def test_instants_round_trip_as_sqlalchemy_stores_them(store: Store):
    """Bind and result processors are SQLAlchemy's: aware UTC in, aware UTC out, and the
    same stored text either way (the memo of a batch's shared instant included)."""
    from dagrun.store.schema import audit_log

    statement = insert(audit_log).values(at=bindparam("b_at"), action=bindparam("b_action"))
    instants = [T0, T0, T0 + timedelta(microseconds=1), T0.astimezone(UTC) + timedelta(hours=1)]
    with store.write() as conn:
        sql.execute_many(
            conn, statement, [{"b_at": at, "b_action": f"a{i}"} for i, at in enumerate(instants)]
        )
        conn.execute(insert(audit_log).values(at=T0, action="by-sqlalchemy"))
    query = select(audit_log.c.action, audit_log.c.at).order_by(audit_log.c.id)
    with store.read() as conn:
        ours = sql.rows(conn, query)
        theirs = conn.execute(query).all()
    assert [tuple(r) for r in ours] == [tuple(r) for r in theirs]
    assert [r.at for r in ours] == [*instants, T0]
    assert all(r.at.tzinfo is not None for r in ours)


def test_a_driver_error_is_sqlalchemys_error(store: Store):
    statement = insert(meta).values(key=bindparam("b_key"), value=bindparam("b_value"))
    with pytest.raises(IntegrityError), store.write() as conn:
        sql.execute_many(conn, statement, [{"b_key": "dup", "b_value": "1"}] * 2)
    with store.read() as conn:
        assert sql.rows(conn, select(meta.c.key).where(meta.c.key == "dup")) == []


def test_numbers_and_booleans_read_as_sqlalchemy_reads_them(store: Store):
    """Result processors depend on the type the server sent (PostgreSQL's floats)."""
    query = select(task_instance.c.duration, task_instance.c.priority_weight).limit(1)
    with store.read() as conn:
        assert sql.rows(conn, query) == []  # a typed, empty result reads fine
        (value,) = sql.scalars(conn, select(meta.c.value).where(meta.c.key == "schema_version"))
    assert value.isdigit()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_sqlalchemy_internals_read_are_there(dialect):
    sql.check_internals(_dialect(dialect))


def test_changed_internals_fail_loudly_naming_the_version(monkeypatch):
    """A SQLAlchemy whose IN-list marker is not the one dagrun substitutes must stop dagrun,
    not run wrong SQL (simulated: dagrun looking for another marker)."""
    import re

    monkeypatch.setattr(sql, "_POSTCOMPILE", re.compile(r"__\[EXPANDING_(\w+)\]"))
    with pytest.raises(StoreError, match=r"SQLAlchemy \d+\.\d+.*pyproject\.toml"):
        sql.check_internals(_dialect("sqlite"))


def _dialect(name: str):
    from sqlalchemy.dialects import postgresql, sqlite

    return (sqlite if name == "sqlite" else postgresql).dialect()


def test_every_statement_of_the_catalogue_is_named_described_and_renders(store: Store):
    """The catalogue is the concurrency story: each entry says what it does, and renders
    on both databases."""
    assert len(statements.CATALOGUE) >= 40
    for name, statement in statements.CATALOGUE.items():
        assert statement.name == name and name.islower()
        assert len(statement.purpose) > 20 and statement.purpose.endswith("."), name
        for dialect in ("sqlite", "postgresql"):
            assert statement.prepared(dialect).sql, (name, dialect)


def test_every_statement_of_the_store_is_named_after_its_module_described_and_renders(
    store: Store,
):
    """Statements outside the catalogue (the reads, the configuration rows', retention's)
    are named like its own, after their module, so their rendering is kept too."""
    found = store_statements()
    assert len(found) > len(statements.CATALOGUE) + 100
    for name, (module, statement) in found.items():
        if module == "statements":
            assert name in statements.CATALOGUE, name
        else:
            assert name.startswith(f"{module}.") and name.islower(), name
        assert len(statement.purpose) > 10 and statement.purpose.endswith("."), name
        for dialect in ("sqlite", "postgresql"):
            assert statement.prepared(dialect).sql, (name, dialect)


def test_transitions_name_the_state_they_expect():
    """Every UPDATE of task_instance or dag_run that sets a state is guarded by the state it
    expects (or, for a held attempt, by owner and fence too)."""
    from sqlalchemy import Update

    from dagrun.store.schema import dag_run

    for name, statement in statements.CATALOGUE.items():
        expression = statement.expression("sqlite")
        if not isinstance(expression, Update):
            continue
        table = expression.table
        sets_state = any(getattr(k, "key", k) == "state" for k in expression._values or {})
        if table in (task_instance, dag_run) and sets_state:
            where = str(expression.whereclause)
            assert ".state" in where, name
