"""The hot statements' own execution path (dagrun.store.compiled): the same rows, values and
errors as SQLAlchemy's, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from dagrun.store import Store, compiled
from dagrun.store.schema import meta, pool

T0 = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


def test_many_rows_in_one_executemany_with_shared_and_own_values(store: Store):
    statement = insert(pool).values(
        name=bindparam("b_name"), slots=bindparam("b_slots"), description=bindparam("b_note")
    )
    rows = [
        {"b_name": f"p{i}", "b_slots": i, "b_note": None if i % 2 else "even"} for i in range(5)
    ]
    with store.write() as conn:
        assert compiled.execute_many(conn, statement, rows) == 5
        assert compiled.execute_many(conn, statement, []) == 0
    with store.read() as conn:
        got = conn.execute(select(pool.c.name, pool.c.slots, pool.c.description)).all()
    assert sorted(got) == [(f"p{i}", i, None if i % 2 else "even") for i in range(5)]


def test_in_lists_of_any_length_and_empty(store: Store):
    with store.write() as conn:
        compiled.execute_many(
            conn,
            insert(meta).values(key=bindparam("b_key"), value=bindparam("b_value")),
            [{"b_key": k, "b_value": k.upper()} for k in ("a", "b", "c")],
        )
    statement = select(meta.c.key, meta.c.value).where(
        meta.c.key.in_(bindparam("b_keys", expanding=True))
    )
    with store.read() as conn:
        assert sorted(compiled.rows(conn, statement, {"b_keys": ["a", "c", "zz"]})) == [
            ("a", "A"),
            ("c", "C"),
        ]
        assert compiled.rows(conn, statement, {"b_keys": []}) == []
        (row,) = compiled.rows(conn, statement, {"b_keys": ["b"]})
        assert (row.key, row.value) == ("b", "B")  # rows are named by column


def test_instants_round_trip_as_sqlalchemy_stores_them(store: Store):
    """Bind and result processors are SQLAlchemy's: aware UTC in, aware UTC out, and the
    same stored text either way (the memo of a batch's shared instant included)."""
    from dagrun.store.schema import audit_log

    statement = insert(audit_log).values(at=bindparam("b_at"), action=bindparam("b_action"))
    instants = [T0, T0, T0 + timedelta(microseconds=1), T0.astimezone(UTC) + timedelta(hours=1)]
    with store.write() as conn:
        compiled.execute_many(
            conn, statement, [{"b_at": at, "b_action": f"a{i}"} for i, at in enumerate(instants)]
        )
        conn.execute(insert(audit_log).values(at=T0, action="by-sqlalchemy"))
    query = select(audit_log.c.action, audit_log.c.at).order_by(audit_log.c.id)
    with store.read() as conn:
        ours = compiled.rows(conn, query)
        theirs = conn.execute(query).all()
    assert [tuple(r) for r in ours] == [tuple(r) for r in theirs]
    assert [r.at for r in ours] == [*instants, T0]
    assert all(r.at.tzinfo is not None for r in ours)


def test_a_driver_error_is_sqlalchemys_error(store: Store):
    statement = insert(meta).values(key=bindparam("b_key"), value=bindparam("b_value"))
    with pytest.raises(IntegrityError), store.write() as conn:
        compiled.execute_many(conn, statement, [{"b_key": "dup", "b_value": "1"}] * 2)
    with store.read() as conn:
        assert compiled.rows(conn, select(meta.c.key).where(meta.c.key == "dup")) == []
