"""The store contract, run on SQLite and PostgreSQL alike (the ``store`` fixture).

Schema and version, unique keys, UTC instants, dialect upserts, the DAG registry, and the
basic claim -> complete cycle of ``dagrun.store.transitions`` with its fencing.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import delete, func, insert, inspect, select, update
from sqlalchemy.exc import IntegrityError, StatementError

from dagrun import DAG, BashTask
from dagrun.errors import DagNotFound, StoreError
from dagrun.parsing.loader import build_spec
from dagrun.parsing.spec import DagSpec
from dagrun.states import AttemptOutcome, RunState, RunType, TaskState
from dagrun.store import (
    Store,
    attempts,
    dag_reads,
    migrations,
    registry,
    runs,
    schema,
    statements,
    upkeep,
)
from dagrun.store.schema import audit_log, dag_run, meta, task_attempt, task_instance
from dagrun.store.sql import dialect_insert
from dagrun.timing.timetable import DataInterval

ti = task_instance
T0 = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = "worker-1"


def make_spec(
    dag_id: str = "pipe", *, max_active_runs: int = 16, retries: int = 0, path: str = "/d/p.py"
) -> DagSpec:
    """extract >> load >> report, daily from 2026-01-01 UTC."""
    with DAG(
        dag_id,
        schedule="@daily",
        start_date="2026-01-01",
        max_active_runs=max_active_runs,
        default_args={"retries": retries, "retry_delay": 10, "max_retry_delay": 600},
    ) as dag:
        extract = BashTask("extract", command="echo")
        load = BashTask("load", command="echo")
        report = BashTask("report", command="echo")
        extract >> load >> report
    return build_spec(dag, path)


def days(n: int) -> list[DataInterval]:
    return [DataInterval(T0 + timedelta(days=i), T0 + timedelta(days=i + 1)) for i in range(n)]


def register(store: Store, *specs: DagSpec) -> None:
    with store.write() as conn:
        for spec in specs:
            registry.save_file(conn, spec.fileloc, "hash", [spec], None, None, store.now(conn))


def count(store: Store, table, *where) -> int:
    with store.read() as conn:
        return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()


def ti_row(store: Store, run_pk: int, task_id: str):
    with store.read() as conn:
        return conn.execute(select(ti).where(ti.c.run_pk == run_pk, ti.c.task_id == task_id)).one()


def ti_states(store: Store, run_pk: int) -> dict[str, str]:
    with store.read() as conn:
        rows = conn.execute(select(ti.c.task_id, ti.c.state).where(ti.c.run_pk == run_pk))
        return dict(rows.all())


def run_state(store: Store, run_pk: int) -> str:
    with store.read() as conn:
        return conn.execute(select(dag_run.c.state).where(dag_run.c.id == run_pk)).scalar_one()


def attempt_rows(store: Store, ti_id: int) -> list:
    with store.read() as conn:
        stmt = select(task_attempt).where(task_attempt.c.ti_id == ti_id)
        return conn.execute(stmt.order_by(task_attempt.c.id)).all()


# ---------------------------------------------------------------- schema and version


def test_schema_is_created_on_first_use_with_its_version(store: Store):
    with store.read() as conn:
        tables = set(inspect(conn).get_table_names())
        assert store.schema_version(conn) == schema.SCHEMA_VERSION
    assert set(schema.metadata.tables) <= tables
    assert count(store, meta) == 1


def test_a_second_store_on_the_same_url_shares_the_database(store: Store):
    register(store, make_spec())
    other = Store(store.url)
    try:
        with other.read() as conn:
            assert other.schema_version(conn) == schema.SCHEMA_VERSION
            assert dag_reads.get_dag(conn, "pipe").spec == make_spec()
    finally:
        other.dispose()
    assert count(store, meta) == 1


def test_stores_opened_at_once_on_a_fresh_database_all_succeed(db_url: str):
    errors: list[BaseException] = []
    stores: list[Store] = []
    barrier = threading.Barrier(4)

    def open_store() -> None:
        barrier.wait(timeout=30)
        try:
            stores.append(Store(db_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert count(stores[0], meta) == 1
    for s in stores:
        s.dispose()


def test_a_database_from_a_newer_dagrun_is_refused(store: Store):
    with store.write() as conn:
        conn.execute(
            update(meta)
            .where(meta.c.key == "schema_version")
            .values(value=str(schema.SCHEMA_VERSION + 1))
        )
    with pytest.raises(StoreError, match=f"schema version {schema.SCHEMA_VERSION + 1}, newer"):
        Store(store.url)


#: What turns a new database back into one made by schema version 1.
VERSION_1_FROM_2 = [
    "ALTER TABLE task_attempt DROP COLUMN log_offset",
    "ALTER TABLE task_attempt DROP COLUMN log_length",
    "ALTER TABLE dag_file DROP COLUMN depends_on",
    *(f"DROP INDEX {name}" for name in ("ix_ti_queued", "ix_ti_running_lease", "ix_ti_retry_at")),
    "DROP INDEX ix_ti_failed",
    "DROP INDEX ix_ti_pool_state",
    "CREATE INDEX ix_ti_claim_order ON task_instance (state, priority_weight DESC, id)",
    "CREATE INDEX ix_ti_state_lease ON task_instance (state, lease_until)",
    "CREATE INDEX ix_ti_state_next_try ON task_instance (state, next_try_at)",
    "CREATE INDEX ix_ti_pool_state ON task_instance (pool, state)",
]


#: Undoes migration 3 on a new database: a version-2 layout.
VERSION_2_FROM_3 = [
    "ALTER TABLE task_instance RENAME COLUMN infra_failures TO lease_losses",
    "ALTER TABLE task_attempt DROP COLUMN late_result",
    "ALTER TABLE dag_file DROP COLUMN good_source",
]


#: Undoes migration 4 on PostgreSQL: one run per logical date for every run type again, and
#: an audit log without run ids.
VERSION_3_FROM_4_POSTGRESQL = [
    "DROP INDEX uq_dag_run_logical_date",
    "DROP INDEX ix_dag_run_dag_date",
    "ALTER TABLE dag_run ADD CONSTRAINT uq_dag_run_logical_date UNIQUE (dag_id, logical_date)",
    "DROP INDEX ix_audit_log_dag_at",
    "ALTER TABLE audit_log DROP COLUMN run_id",
]


#: Undoes migration 5 (both engines): no callback outbox, no per-DAG task caps.
VERSION_4_FROM_5 = [
    "DROP TABLE callback",
    "DROP TABLE dag_cap",
    "ALTER TABLE task_instance DROP COLUMN capped",
]


#: Undoes migration 8 (both engines): callbacks and partition writes found by run no more.
VERSION_7_FROM_8 = ["DROP INDEX ix_callback_run", "DROP INDEX ix_partition_write_run"]

#: Undoes migration 9 (both engines): no XComs, no file warnings.
VERSION_8_FROM_9 = ["DROP TABLE xcom", "ALTER TABLE dag_file DROP COLUMN warnings"]

#: Undoes migration 10 (both engines): no record of what asset-triggered runs consumed.
VERSION_9_FROM_10 = ["DROP TABLE asset_trigger"]
#: Undoes migration 11: no heartbeats, accounts or API tokens.
VERSION_10_FROM_11 = ["DROP TABLE api_token", "DROP TABLE account", "DROP TABLE heartbeat"]
#: Undoes migration 12: DAG files without their size and modification time.
VERSION_11_FROM_12 = [
    "ALTER TABLE dag_file DROP COLUMN mtime_ns",
    "ALTER TABLE dag_file DROP COLUMN size",
]


#: Undoes migration 7 (both engines): no sensor columns, variables, connections or assets.
VERSION_6_FROM_7 = [
    "DROP INDEX ix_ti_reschedule_at",
    "ALTER TABLE task_instance DROP COLUMN first_poke_at",
    "ALTER TABLE task_instance DROP COLUMN pokes",
    *(f"DROP TABLE {t}" for t in ("variable", "connection", "asset_event", "asset_consumed")),
    "DROP TABLE asset_cursor",
]


def undo_version_6(store: Store) -> None:
    """A version-5 layout from a new database: one task instance per (run, task), no map
    index (on SQLite by copying into a table made as version 5 made it)."""
    if store.dialect == "postgresql":
        with store.write() as conn:
            for statement in [
                "ALTER TABLE task_instance DROP CONSTRAINT uq_task_instance_run_task_map",
                "ALTER TABLE task_instance DROP COLUMN map_index",
                "ALTER TABLE task_instance ADD CONSTRAINT uq_task_instance_run_task "
                "UNIQUE (run_pk, task_id)",
            ]:
                conn.exec_driver_sql(statement)
        return
    v5 = (
        migrations._TASK_INSTANCE_V6_SQLITE.replace("task_instance_v6", "task_instance_v5")
        .replace("map_index INTEGER DEFAULT -1 NOT NULL, ", "")
        .replace(
            "uq_task_instance_run_task_map UNIQUE (run_pk, task_id, map_index)",
            "uq_task_instance_run_task UNIQUE (run_pk, task_id)",
        )
    )
    columns = migrations._TASK_INSTANCE_COLUMNS
    _rebuild_sqlite(
        store,
        [
            v5,
            f"INSERT INTO task_instance_v5 ({columns}) SELECT {columns} FROM task_instance",
            "DROP TABLE task_instance",
            "ALTER TABLE task_instance_v5 RENAME TO task_instance",
            "CREATE INDEX ix_ti_dag_task ON task_instance (dag_id, task_id)",
            *migrations._V2_PARTIAL_INDEXES,
        ],
    )


def _rebuild_sqlite(store: Store, statements: list[str]) -> None:
    """Run table rebuilds on the SQLite file with foreign keys off, as a migration does."""
    db = sqlite3.connect(store.engine.url.database, isolation_level=None)
    try:
        db.execute("PRAGMA foreign_keys=OFF")
        db.execute("BEGIN IMMEDIATE")
        for statement in statements:
            db.execute(statement)
        db.execute("COMMIT")
    finally:
        db.close()


def undo_version_4(store: Store) -> None:
    """A version-3 layout from a new database. SQLite keeps a table's UNIQUE constraints in
    its definition: the runs are copied into a table made as version 3 made it, with foreign
    keys off (as migration 4 does the other way) so no task instance goes with the old one."""
    if store.dialect == "postgresql":
        with store.write() as conn:
            for statement in VERSION_3_FROM_4_POSTGRESQL:
                conn.exec_driver_sql(statement)
        return
    v3 = migrations._DAG_RUN_V4_SQLITE.replace("dag_run_v4", "dag_run_v3").replace(
        "CONSTRAINT uq_dag_run_run_id",
        "CONSTRAINT uq_dag_run_logical_date UNIQUE "
        "(dag_id, logical_date), CONSTRAINT uq_dag_run_run_id",
    )
    columns = migrations._DAG_RUN_COLUMNS
    _rebuild_sqlite(
        store,
        [
            v3,
            f"INSERT INTO dag_run_v3 ({columns}) SELECT {columns} FROM dag_run",
            "DROP TABLE dag_run",
            "ALTER TABLE dag_run_v3 RENAME TO dag_run",
            "CREATE INDEX ix_dag_run_dag_state ON dag_run (dag_id, state)",
            "CREATE INDEX ix_dag_run_state ON dag_run (state)",
            "DROP INDEX ix_audit_log_dag_at",
            "ALTER TABLE audit_log DROP COLUMN run_id",
        ],
    )


def reopened_from(store: Store, statements: list[str], version: int) -> Store:
    """``store`` taken back to schema ``version`` by ``statements`` and opened again: the
    new store's migrations bring it up to date."""
    with store.write() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value=str(version)))
    store.dispose()
    return Store(store.url)


@pytest.mark.slow
def test_a_version_1_database_is_brought_up_to_date_keeping_its_rows(store: Store):
    """Version 1 had no log ranges: opening it adds them (2), renames the lease-loss budget
    and adds late results and good sources (3), lets manual runs share a logical date and
    the audit log name runs (4), adds the callback outbox and task caps (5), map indexes
    (6), sensor columns, variables, connections and assets (7), the indexes retention
    deletes by (8), XComs and file warnings (9), what asset-triggered runs consumed (10),
    heartbeats, accounts and API tokens (11), DAG files' sizes and modification times
    (12), keeps every run, task instance and attempt, records 12."""
    spec = make_spec()
    start(store, spec, 2, 2)
    claim(store, limit=1)
    with store.write() as conn:
        for statement in (
            VERSION_11_FROM_12
            + VERSION_10_FROM_11
            + VERSION_9_FROM_10
            + VERSION_8_FROM_9
            + VERSION_7_FROM_8
            + VERSION_6_FROM_7
        ):
            conn.exec_driver_sql(statement)
    store.dispose()
    undo_version_6(store)
    with store.write() as conn:
        for statement in VERSION_4_FROM_5:
            conn.exec_driver_sql(statement)
    store.dispose()
    undo_version_4(store)
    with store.write() as conn:
        for statement in VERSION_2_FROM_3 + VERSION_1_FROM_2:
            conn.exec_driver_sql(statement)
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value="1"))
    attempts, tis = count(store, task_attempt), count(store, ti)
    migrated = Store(store.url)
    try:
        with migrated.read() as conn:
            assert migrated.schema_version(conn) == schema.SCHEMA_VERSION == 12
            for table, index in [("callback", "ix_callback_run"), ("partition_write", None)]:
                names = {i["name"] for i in inspect(conn).get_indexes(table)}
                assert (index or "ix_partition_write_run") in names
            tables = set(inspect(conn).get_table_names())
            assert {"variable", "connection", "asset_event", "asset_consumed", "xcom"} <= tables
            assert "asset_trigger" in tables
            assert {"heartbeat", "account", "api_token"} <= tables
            file_columns = {c["name"] for c in inspect(conn).get_columns("dag_file")}
            assert {"warnings", "size", "mtime_ns"} <= file_columns
            assert {"callback", "dag_cap"} <= set(inspect(conn).get_table_names())
            assert "run_id" in {c["name"] for c in inspect(conn).get_columns("audit_log")}
            run_indexes = {i["name"] for i in inspect(conn).get_indexes("dag_run")}
            assert {i.name for i in dag_run.indexes} <= run_indexes
            columns = {c["name"] for c in inspect(conn).get_columns("task_attempt")}
            assert {"log_offset", "log_length", "late_result"} <= columns
            columns = {c["name"] for c in inspect(conn).get_columns("task_instance")}
            assert "infra_failures" in columns and "lease_losses" not in columns
            assert {"capped", "map_index", "first_poke_at", "pokes"} <= columns
            indexes = {i["name"] for i in inspect(conn).get_indexes("task_instance")}
            expected = {i.name for i in ti.indexes} | set(schema.PARTIAL_INDEXES)
            assert indexes - {"uq_task_instance_run_task_map"} == expected
            uniques = inspect(conn).get_unique_constraints("task_instance")
            assert [u["column_names"] for u in uniques] == [["run_pk", "task_id", "map_index"]]
        assert count(migrated, task_attempt) == attempts > 0
        assert count(migrated, ti) == tis > 0
        claimed, _ = claim(migrated)  # the migrated database works as a new one does
        assert len(claimed) == 1
        with migrated.write() as conn:  # two manual runs at one logical date: two runs
            instant = datetime(2030, 1, 1, tzinfo=UTC)
            for key in ("a", "b"):
                _, created = runs.create_manual_run(
                    conn, spec, DataInterval(instant, instant), key, migrated.now(conn)
                )
                assert created
    finally:
        migrated.dispose()


def test_a_version_9_database_gets_the_record_of_asset_triggered_runs(store: Store):
    """Migration 10 adds ``asset_trigger``: a run's consumed events, gone with the run."""
    spec = make_spec()
    start(store, spec, 1, 1)
    migrated = reopened_from(store, VERSION_11_FROM_12 + VERSION_10_FROM_11 + VERSION_9_FROM_10, 9)
    try:
        with migrated.write() as conn:
            assert migrated.schema_version(conn) == 12
            pk = inspect(conn).get_pk_constraint("asset_trigger")["constrained_columns"]
            assert pk == ["run_pk", "event_id"]
            [fk] = inspect(conn).get_foreign_keys("asset_trigger")
            assert (fk["referred_table"], fk["options"].get("ondelete")) == ("dag_run", "CASCADE")
            run_pk = conn.execute(select(dag_run.c.id)).scalars().first()
            conn.execute(insert(schema.asset_trigger).values(run_pk=run_pk, event_id=1))
        with migrated.write() as conn:
            conn.execute(delete(dag_run).where(dag_run.c.id == run_pk))
        assert count(migrated, schema.asset_trigger) == 0, "deleted with its run"
    finally:
        migrated.dispose()


def test_state_scans_use_their_partial_index(sqlite_store: Store):
    """Claims, reaping and retries find their rows through the small per-state indexes
    (SQLite's plan; the statements name their state literally for that)."""
    from sqlalchemy.dialects import sqlite

    now = datetime(2026, 1, 1, tzinfo=UTC)
    scans = {
        "ix_ti_queued": statements.CLAIM.expression("sqlite"),
        "ix_ti_running_lease": select(ti.c.id).where(
            schema.in_state(TaskState.RUNNING), ti.c.lease_until < now
        ),
        "ix_ti_retry_at": update(ti)
        .where(schema.in_state(TaskState.UP_FOR_RETRY), ti.c.next_try_at <= now)
        .values(state="queued"),
    }
    with sqlite_store.read() as conn:
        for index, statement in scans.items():
            sql = str(statement.compile(dialect=sqlite.dialect()))
            params = [1] * sql.count("?")
            plan = " ".join(
                str(r) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", tuple(params))
            )
            assert index in plan, (index, plan)


def test_an_unreachable_server_is_a_store_error():
    with pytest.raises(StoreError, match=r"127\.0\.0\.1"):
        Store("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_an_unusable_sqlite_path_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError):
        Store(f"sqlite:///{blocker}/sub/dagrun.db")


def test_postgresql_urls_mean_psycopg3():
    from dagrun.store.location import normalise_url

    assert normalise_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalise_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalise_url("sqlite:///x.db") == "sqlite:///x.db"


def test_sqlite_pragmas(sqlite_store: Store):
    with sqlite_store.engine.connect() as conn:
        pragma = lambda name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731
        assert pragma("journal_mode") == "wal"
        assert pragma("foreign_keys") == 1
        assert pragma("busy_timeout") >= 5000


def test_capabilities_name_the_dialect_differences(store: Store):
    postgres = store.dialect == "postgresql"
    assert store.caps.server_clock is postgres
    assert store.caps.notifies is postgres


def test_foreign_keys_are_enforced(store: Store):
    with pytest.raises(IntegrityError), store.write() as conn:
        conn.execute(
            insert(dag_run).values(
                dag_id="no_such_dag",
                run_id="r",
                logical_date=T0,
                data_interval_start=T0,
                data_interval_end=T0,
                run_type="manual",
                state="waiting",
                created_at=T0,
            )
        )


# ---------------------------------------------------------------- instants


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC),
        datetime(2026, 3, 1, 18, 30, tzinfo=timezone(timedelta(hours=6))),
        datetime(2025, 11, 2, 1, 30, tzinfo=timezone(timedelta(hours=-4))),
        datetime(1999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-12))),
    ],
    ids=["utc-micro", "plus6", "minus4", "minus12"],
)
def test_utc_datetime_round_trip(store: Store, value: datetime):
    with store.write() as conn:
        pk = conn.execute(
            insert(audit_log).values(at=value, action="t").returning(audit_log.c.id)
        ).scalar_one()
    with store.read() as conn:
        back = conn.execute(select(audit_log.c.at).where(audit_log.c.id == pk)).scalar_one()
        found = conn.execute(select(audit_log.c.id).where(audit_log.c.at == value)).scalar()
    assert back == value
    assert back.tzinfo is UTC
    assert back.utcoffset() == timedelta(0)
    assert found == pk


def test_utc_datetimes_compare_as_instants(store: Store):
    early = datetime(2026, 1, 1, 23, 0, tzinfo=timezone(timedelta(hours=-5)))  # 04:00 UTC Jan 2
    late = datetime(2026, 1, 2, 5, 0, tzinfo=UTC)
    with store.write() as conn:
        conn.execute(
            insert(audit_log), [{"at": late, "action": "late"}, {"at": early, "action": "early"}]
        )
    with store.read() as conn:
        order = conn.execute(select(audit_log.c.action).order_by(audit_log.c.at)).scalars().all()
        before = (
            conn.execute(
                select(audit_log.c.action).where(
                    audit_log.c.at < datetime(2026, 1, 2, 4, 30, tzinfo=UTC)
                )
            )
            .scalars()
            .all()
        )
    assert order == ["early", "late"]
    assert before == ["early"]


def test_naive_datetimes_are_refused(store: Store):
    with pytest.raises(StatementError, match="naive datetime"), store.write() as conn:
        conn.execute(insert(audit_log).values(at=datetime(2026, 1, 1), action="naive"))
    assert count(store, audit_log) == 0


def test_store_clock_is_aware_utc(store: Store):
    now = store.now()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    assert abs(now - datetime.now(UTC)) < timedelta(minutes=5)


# ---------------------------------------------------------------- upserts and unique keys


def test_dialect_insert_upserts(store: Store):
    def value(conn) -> str:
        return conn.execute(select(meta.c.value).where(meta.c.key == "k")).scalar_one()

    with store.write() as conn:
        conn.execute(dialect_insert(conn.dialect.name, meta).values(key="k", value="1"))
        conn.execute(
            dialect_insert(conn.dialect.name, meta)
            .values(key="k", value="2")
            .on_conflict_do_update(index_elements=["key"], set_={"value": "2"})
        )
        assert value(conn) == "2"
        conn.execute(
            dialect_insert(conn.dialect.name, meta)
            .values(key="k", value="3")
            .on_conflict_do_nothing()
        )
        assert value(conn) == "2"


def test_one_scheduled_run_per_logical_date_and_manual_runs_by_run_id(store: Store):
    spec = make_spec()
    register(store, spec)
    with store.write() as conn:
        runs.create_runs(conn, spec, days(3), RunType.SCHEDULED, T0)
    assert count(store, dag_run) == 3
    with store.write() as conn:
        runs.create_runs(conn, spec, days(4), RunType.SCHEDULED, T0)
        runs.create_runs(conn, spec, days(4), RunType.BACKFILL, T0)
    assert count(store, dag_run) == 4
    with store.read() as conn:
        dates = conn.execute(select(dag_run.c.logical_date).order_by(dag_run.c.id)).scalars()
        assert list(dates) == [i.start for i in days(4)]

    def insert_run(run_id: str, run_type: str) -> None:
        with store.write() as conn:
            conn.execute(
                insert(dag_run).values(
                    dag_id="pipe",
                    run_id=run_id,
                    logical_date=T0,
                    data_interval_start=T0,
                    data_interval_end=T0 + timedelta(days=1),
                    run_type=run_type,
                    state="waiting",
                    created_at=T0,
                )
            )

    with pytest.raises(IntegrityError):
        insert_run("backfill__other", "backfill")  # a second scheduled-kind run at T0
    insert_run("manual__a", "manual")  # manual runs share logical dates...
    insert_run("manual__b", "manual")
    with pytest.raises(IntegrityError):
        insert_run("manual__a", "manual")  # ...but never a run id
    assert count(store, dag_run) == 6


def test_create_runs_counts_the_runs_it_created(store: Store):
    spec = make_spec()
    register(store, spec)
    with store.write() as conn:
        assert runs.create_runs(conn, spec, days(3), RunType.SCHEDULED, T0) == 3
        assert runs.create_runs(conn, spec, days(4), RunType.SCHEDULED, T0) == 1
        assert runs.create_runs(conn, spec, days(4), RunType.BACKFILL, T0) == 0


def test_one_task_instance_per_run_and_task(store: Store):
    spec = make_spec()
    register(store, spec)
    with store.write() as conn:
        runs.create_runs(conn, spec, days(1), RunType.SCHEDULED, T0)
        (pk,) = runs.admit_runs(conn, spec, 1, T0)
        runs.ensure_task_instances(conn, spec, [pk])
        runs.ensure_task_instances(conn, spec, [pk])
    assert count(store, ti) == 3
    with pytest.raises(IntegrityError), store.write() as conn:
        conn.execute(insert(ti).values(run_pk=pk, dag_id="pipe", task_id="load", state="none"))
    assert count(store, ti) == 3


# ---------------------------------------------------------------- the DAG registry


def test_registry_save_and_read(store: Store):
    one, two = make_spec("one", path="/d/one.py"), make_spec("two", path="/d/two.py")
    with store.write() as conn:
        registry.save_file(conn, "/d/one.py", "h1", [one], None, None, T0)
        registry.save_file(conn, "/d/two.py", "h2", [two], None, None, T0)
        registry.save_file(conn, "/d/bad.py", "h3", [], "SyntaxError: x", 3, T0)
    with store.read() as conn:
        known = dag_reads.known_files(conn)
        assert known["/d/one.py"].content_hash == "h1"
        assert known["/d/one.py"].dag_ids == ("one",)
        assert known["/d/bad.py"].error == "SyntaxError: x"
        assert [d.dag_id for d in dag_reads.active_dags(conn)] == ["one", "two"]
        row = dag_reads.get_dag(conn, "one")
        assert row.spec == one
        assert (row.fileloc, row.is_paused, row.cursor) == ("/d/one.py", False, None)
        errors = dag_reads.import_errors(conn)
        assert [(e.path, e.error, e.error_line) for e in errors] == [
            ("/d/bad.py", "SyntaxError: x", 3)
        ]
        assert dag_reads.load_spec(conn, "two") == two


def test_registry_resave_updates_the_file_and_the_spec(store: Store):
    register(store, make_spec())
    changed = make_spec(max_active_runs=3)
    with store.write() as conn:
        registry.save_file(conn, "/d/p.py", "h2", [changed], None, None, T0)
    with store.read() as conn:
        assert dag_reads.known_files(conn)["/d/p.py"].content_hash == "h2"
        assert dag_reads.get_dag(conn, "pipe").spec.max_active_runs == 3


def test_set_paused_round_trip(store: Store):
    register(store, make_spec())
    with store.write() as conn:
        registry.set_paused(conn, "pipe", True)
    with store.read() as conn:
        assert dag_reads.get_dag(conn, "pipe").is_paused is True
    with store.write() as conn:
        registry.set_paused(conn, "pipe", False)
    with store.read() as conn:
        assert dag_reads.get_dag(conn, "pipe").is_paused is False


def test_unknown_dags_raise_dag_not_found(store: Store):
    with store.read() as conn:
        with pytest.raises(DagNotFound, match="unknown DAG 'nope'"):
            dag_reads.get_dag(conn, "nope")
        with pytest.raises(DagNotFound):
            dag_reads.load_spec(conn, "nope")
    with pytest.raises(DagNotFound), store.write() as conn:
        registry.set_paused(conn, "nope", True)
    assert issubclass(DagNotFound, LookupError)


def test_deactivated_dags_are_not_found_but_keep_their_spec(store: Store):
    register(store, make_spec("keep", path="/d/k.py"), make_spec("gone", path="/d/g.py"))
    with store.write() as conn:
        registry.forget_files(conn, ["/d/g.py"])
        registry.deactivate_missing(conn, {"keep"})
    with store.read() as conn:
        assert [d.dag_id for d in dag_reads.active_dags(conn)] == ["keep"]
        assert "/d/g.py" not in dag_reads.known_files(conn)
        with pytest.raises(DagNotFound):
            dag_reads.get_dag(conn, "gone")
        assert dag_reads.load_spec(conn, "gone").dag_id == "gone"
    with pytest.raises(DagNotFound), store.write() as conn:
        registry.set_paused(conn, "gone", True)


# ---------------------------------------------------------------- claim and complete


def start(store: Store, spec: DagSpec, n: int, max_active: int) -> list[int]:
    """Create ``n`` daily runs, admit within ``max_active`` and start them; the started pks."""
    register(store, spec)
    with store.write() as conn:
        now = store.now(conn)
        runs.create_runs(conn, spec, days(n), RunType.SCHEDULED, now)
        admitted = runs.admit_runs(conn, spec, max_active, now)
        started = runs.start_runs(conn, spec, now)
    assert sorted(started) == sorted(admitted)
    return started


def claim(store: Store, owner: str = OWNER, limit: int = 10, lease: float = 30.0, now=None):
    with store.write() as conn:
        now = now or store.now(conn)
        return attempts.claim(conn, owner, limit, lease, now), now


def complete(store: Store, spec: DagSpec, *outcomes: attempts.Outcome, owner: str = OWNER):
    with store.write() as conn:
        return attempts.complete(conn, owner, outcomes, lambda _id: spec, store.now(conn))


def outcome(c: attempts.Claim, result=AttemptOutcome.SUCCESS, fence=None, **kw):
    return attempts.Outcome(
        ti_id=c.ti_id,
        run_pk=c.run_pk,
        dag_id=c.dag_id,
        task_id=c.task_id,
        fence_token=c.fence_token if fence is None else fence,
        outcome=result,
        **{"try_number": c.try_number, **kw},
    )


def test_admit_respects_max_active_runs_oldest_first(store: Store):
    spec = make_spec(max_active_runs=2)
    register(store, spec)
    with store.write() as conn:
        runs.create_runs(conn, spec, days(3), RunType.SCHEDULED, T0)
        first = runs.admit_runs(conn, spec, 2, T0)
        again = runs.admit_runs(conn, spec, 2, T0)
    assert again == []
    with store.read() as conn:
        rows = conn.execute(
            select(dag_run.c.id, dag_run.c.state, dag_run.c.logical_date).order_by(
                dag_run.c.logical_date
            )
        ).all()
    assert [r.state for r in rows] == ["queued", "queued", "waiting"]
    assert sorted(first) == sorted(r.id for r in rows[:2])
    assert count(store, ti) == 6
    with store.write() as conn:
        conn.execute(update(dag_run).where(dag_run.c.id == rows[0].id).values(state="success"))
        assert runs.admit_runs(conn, spec, 2, T0) == [rows[2].id]


def test_start_runs_queues_the_roots_only(store: Store):
    spec = make_spec()
    (pk,) = start(store, spec, 1, 1)
    assert run_state(store, pk) == RunState.RUNNING
    assert ti_states(store, pk) == {"extract": "queued", "load": "none", "report": "none"}


def test_claim_sets_lease_fence_and_attempt(store: Store):
    spec = make_spec()
    (pk,) = start(store, spec, 1, 1)
    claims, now = claim(store, lease=30)
    assert [(c.task_id, c.try_number, c.fence_token) for c in claims] == [("extract", 1, 1)]
    c = claims[0]
    assert (c.dag_id, c.run_pk, c.logical_date) == ("pipe", pk, T0)
    assert c.data_interval_end == T0 + timedelta(days=1)
    row = ti_row(store, pk, "extract")
    assert row.state == TaskState.RUNNING
    assert row.lease_owner == OWNER
    assert row.lease_until == now + timedelta(seconds=30)
    assert row.fence_token == 1
    (attempt,) = attempt_rows(store, c.ti_id)
    assert (attempt.worker, attempt.fence_token, attempt.try_number) == (OWNER, 1, 1)
    assert attempt.outcome is None
    assert claim(store, owner="worker-2")[0] == []


def test_claim_takes_at_most_limit(store: Store):
    spec = make_spec()
    start(store, spec, 3, 3)
    first, _ = claim(store, limit=2)
    second, _ = claim(store, owner="worker-2", limit=2)
    assert len(first) == 2
    assert len(second) == 1
    assert not {c.ti_id for c in first} & {c.ti_id for c in second}


def test_success_advances_downstream_and_finishes_the_run(store: Store):
    spec = make_spec()
    (pk,) = start(store, spec, 1, 1)
    for task_id in ("extract", "load", "report"):
        (c,), _ = claim(store)
        assert c.task_id == task_id
        done = complete(store, spec, outcome(c, return_value='{"n": 1}', duration=0.5))
        assert done.accepted and not done.stale
        assert ti_row(store, pk, task_id).state == TaskState.SUCCESS
        assert ti_row(store, pk, task_id).lease_owner is None
        assert attempt_rows(store, c.ti_id)[-1].outcome == AttemptOutcome.SUCCESS
    assert done.finished_runs == {pk: RunState.SUCCESS}
    assert run_state(store, pk) == RunState.SUCCESS
    with store.read() as conn:
        assert attempts.upstream_values(conn, pk, ["report"]) == {"report": {"n": 1}}


def test_failure_without_retries_fails_downstream_and_the_run(store: Store):
    spec = make_spec(retries=0)
    (pk,) = start(store, spec, 1, 1)
    (c,), _ = claim(store)
    done = complete(store, spec, outcome(c, AttemptOutcome.FAILED, error="boom"))
    assert done.dead and not done.retrying
    assert ti_states(store, pk) == {
        "extract": "failed",
        "load": "upstream_failed",
        "report": "upstream_failed",
    }
    assert ti_row(store, pk, "extract").last_error == "boom"
    assert run_state(store, pk) == RunState.FAILED


def test_failure_with_retries_waits_within_the_backoff_window(store: Store):
    spec = make_spec(retries=2)
    (pk,) = start(store, spec, 1, 1)
    (c,), _ = claim(store)
    with store.write() as conn:
        now = store.now(conn)
        done = attempts.complete(
            conn, OWNER, [outcome(c, AttemptOutcome.FAILED)], lambda _id: spec, now
        )
    assert done.retrying and not done.dead
    row = ti_row(store, pk, "extract")
    assert row.state == TaskState.UP_FOR_RETRY
    assert now <= row.next_try_at <= now + timedelta(seconds=10)
    with store.write() as conn:
        assert upkeep.requeue_retries(conn, row.next_try_at + timedelta(seconds=1)) == 1
    (again,), _ = claim(store)
    assert (again.try_number, again.fence_token) == (2, 2)


def test_completion_with_a_wrong_fence_is_stale(store: Store):
    spec = make_spec()
    (pk,) = start(store, spec, 1, 1)
    (c,), _ = claim(store)
    done = complete(store, spec, outcome(c, fence=c.fence_token + 5))
    assert done.stale and not done.accepted
    row = ti_row(store, pk, "extract")
    assert (row.state, row.lease_owner, row.fence_token) == ("running", OWNER, 1)
    assert ti_states(store, pk)["load"] == "none"
    assert attempt_rows(store, c.ti_id)[0].outcome is None


def test_completion_after_the_lease_was_taken_over_is_kept_beside_the_expiry(store: Store):
    """The reaper's ``lease_expired`` is the attempt's one outcome; the late success is
    discarded and kept beside it, never over it."""
    spec = make_spec()
    (pk,) = start(store, spec, 1, 1)
    (old,), now = claim(store, lease=30)
    with store.write() as conn:
        reaped = upkeep.reap_expired(conn, lambda _id: spec, now + timedelta(seconds=31))
    assert [r.ti_id for r in reaped] == [old.ti_id]
    (new,), _ = claim(store, owner="worker-2")
    assert (new.ti_id, new.fence_token) == (old.ti_id, 2)

    done = complete(store, spec, outcome(old, AttemptOutcome.SUCCESS))
    assert done.stale and not done.accepted
    row = ti_row(store, pk, "extract")
    assert (row.state, row.lease_owner, row.fence_token) == ("running", "worker-2", 2)
    first, second = attempt_rows(store, old.ti_id)
    assert first.outcome == AttemptOutcome.LEASE_EXPIRED
    assert first.error.startswith("lease expired 1 time(s)")
    assert first.late_result.startswith("finished as success after its lease was lost")
    assert second.outcome is None and second.late_result is None
    assert ti_states(store, pk)["load"] == "none"

    done = complete(store, spec, outcome(new), owner="worker-2")
    assert done.accepted
    assert ti_states(store, pk)["load"] == "queued"


def test_a_lease_is_held_until_it_expires(store: Store):
    spec = make_spec()
    start(store, spec, 1, 1)
    (c,), now = claim(store, lease=30)
    with store.write() as conn:
        at_deadline = upkeep.reap_expired(conn, lambda _id: spec, now + timedelta(seconds=30))
    assert at_deadline == []
    with store.write() as conn:
        lost = attempts.extend_leases(conn, OWNER, [(c.ti_id, c.fence_token)], 30, now)
        lost_wrong = attempts.extend_leases(conn, "other", [(c.ti_id, c.fence_token)], 30, now)
    assert lost == set()
    assert lost_wrong == {(c.ti_id, c.fence_token)}


def test_a_version_10_database_gets_heartbeats_accounts_and_tokens(store: Store):
    """Migration 11 adds ``heartbeat``, ``account`` and ``api_token`` (gone with its account)."""
    start(store, make_spec(), 1, 1)
    migrated = reopened_from(store, VERSION_11_FROM_12 + VERSION_10_FROM_11, 10)
    try:
        now = datetime.now(UTC)
        with migrated.write() as conn:
            assert migrated.schema_version(conn) == 12
            conn.execute(
                insert(schema.account).values(name="ana", password_hash="x", created_at=now)
            )
            conn.execute(
                insert(schema.api_token).values(account="ana", token_hash="h", created_at=now)
            )
        with migrated.write() as conn:
            conn.execute(delete(schema.account).where(schema.account.c.name == "ana"))
        assert count(migrated, schema.api_token) == 0, "deleted with its account"
        assert count(migrated, schema.heartbeat) == 0
    finally:
        migrated.dispose()


def test_a_version_11_database_gets_the_stats_of_dag_files(store: Store):
    """Migration 12 adds a DAG file's size and modification time; the files recorded before
    have none (the next sync reads them once more and records them)."""
    with store.write() as conn:
        registry.save_file(conn, "/dags/one.py", "a hash", [], None, None, datetime.now(UTC))
    migrated = reopened_from(store, VERSION_11_FROM_12, 11)
    try:
        with migrated.read() as conn:
            assert migrated.schema_version(conn) == 12
            [row] = conn.execute(select(schema.dag_file)).mappings().all()
        assert (row["path"], row["size"], row["mtime_ns"]) == ("/dags/one.py", None, None)
    finally:
        migrated.dispose()
