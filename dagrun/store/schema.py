"""The metadata schema (SQLAlchemy Core tables), identical on SQLite and PostgreSQL.

Instants are stored in UTC. The unique keys are the system's last line of defence: one run
per (dag_id, logical_date), one task instance per (run, task, map index), one attempt per
(task instance, fence token). The indexes serve the hot statements of the catalogue
(``statements.py``): claiming queued work, reaping expired leases, and waking retries whose
time has come.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_mock_engine,
    event,
    false,
    literal_column,
    text,
)
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

from dagrun.states import TaskState

#: Bump when the schema changes, and add the step to ``MIGRATIONS``.
SCHEMA_VERSION = 8

#: Partial indexes on task_instance, name -> DDL (the same text on SQLite and PostgreSQL).
#: Each holds only the rows in the state its scans look for, so a state change touches one
#: or two small indexes instead of every state index (most of what a task's three
#: transitions cost SQLite); queries name the state with ``in_state``. Plain DDL rather than
#: ``Index(..., postgresql_where=...)``, which would load the PostgreSQL dialect into every
#: command.
PARTIAL_INDEXES = {
    name: f"CREATE INDEX {name} ON task_instance ({columns}) WHERE {condition}"
    for name, columns, condition in [
        ("ix_ti_queued", "priority_weight DESC, id", "state = 'queued'"),
        ("ix_ti_running_lease", "lease_until", "state = 'running'"),
        ("ix_ti_retry_at", "next_try_at", "state = 'up_for_retry'"),
        ("ix_ti_reschedule_at", "next_try_at", "state = 'up_for_reschedule'"),
        ("ix_ti_failed", "dag_id", "state = 'failed'"),
        ("ix_ti_pool_state", "pool, state", "pool IS NOT NULL"),
    ]
}
#: The partial indexes schema version 2 made (and version 6 remade with its table): a
#: migration step creates what existed at its version, never an index a later step adds.
_V2_PARTIAL_INDEXES = [
    ddl for name, ddl in PARTIAL_INDEXES.items() if name != "ix_ti_reschedule_at"
]

#: One scheduled or backfill run per (DAG, logical date); manual runs are unique by run id
#: only, so two triggers at one instant with different keys make two runs.
ONE_RUN_PER_DATE = (
    "CREATE UNIQUE INDEX uq_dag_run_logical_date ON dag_run (dag_id, logical_date) "
    "WHERE run_type <> 'manual'"
)

#: ``dag_run`` as schema version 4 creates it on SQLite, which cannot drop a table's UNIQUE
#: constraint: migration 4 copies the runs into this table (with foreign keys off, so the
#: task instances that reference the runs stay as they are).
_DAG_RUN_V4_SQLITE = """CREATE TABLE dag_run_v4 (
    id INTEGER NOT NULL, dag_id VARCHAR(250) NOT NULL, run_id VARCHAR(250) NOT NULL,
    logical_date DATETIME NOT NULL, data_interval_start DATETIME NOT NULL,
    data_interval_end DATETIME NOT NULL, run_type VARCHAR(16) NOT NULL,
    state VARCHAR(16) NOT NULL, conf TEXT, not_before DATETIME, created_at DATETIME NOT NULL,
    start_date DATETIME, end_date DATETIME, PRIMARY KEY (id),
    CONSTRAINT uq_dag_run_run_id UNIQUE (dag_id, run_id),
    FOREIGN KEY(dag_id) REFERENCES dag (dag_id))"""
_DAG_RUN_COLUMNS = (
    "id, dag_id, run_id, logical_date, data_interval_start, data_interval_end, run_type, "
    "state, conf, not_before, created_at, start_date, end_date"
)

#: ``callback`` as schema version 5 creates it (the same text on SQLite and PostgreSQL).
_CALLBACK_V5 = """CREATE TABLE callback (
    id {serial} NOT NULL, event VARCHAR(32) NOT NULL, dag_id VARCHAR(250) NOT NULL,
    run_pk INTEGER NOT NULL, ti_id INTEGER, task_id VARCHAR(250), try_number INTEGER,
    fence_token INTEGER, error TEXT, state VARCHAR(16) NOT NULL, created_at {ts} NOT NULL,
    lease_owner VARCHAR(128), lease_until {ts}, ended_at {ts}, outcome_error TEXT,
    log_path VARCHAR(1024), log_offset BIGINT, log_length BIGINT, PRIMARY KEY (id))"""

#: ``task_instance`` as schema version 6 creates it on SQLite (which cannot change a
#: table's UNIQUE constraint in place): one row per (run, task, map index).
_TASK_INSTANCE_V6_SQLITE = """CREATE TABLE task_instance_v6 (
    id INTEGER NOT NULL, run_pk INTEGER NOT NULL, dag_id VARCHAR(250) NOT NULL,
    task_id VARCHAR(250) NOT NULL, state VARCHAR(16) NOT NULL, try_number INTEGER NOT NULL,
    failures INTEGER NOT NULL, infra_failures INTEGER NOT NULL, max_tries INTEGER NOT NULL,
    priority_weight INTEGER NOT NULL, pool VARCHAR(250), next_try_at DATETIME,
    queued_at DATETIME, lease_owner VARCHAR(128), lease_until DATETIME,
    fence_token INTEGER NOT NULL, start_date DATETIME, end_date DATETIME, duration FLOAT,
    last_error TEXT, return_value TEXT, capped BOOLEAN DEFAULT 0 NOT NULL,
    map_index INTEGER DEFAULT -1 NOT NULL, PRIMARY KEY (id),
    CONSTRAINT uq_task_instance_run_task_map UNIQUE (run_pk, task_id, map_index),
    FOREIGN KEY(run_pk) REFERENCES dag_run (id) ON DELETE CASCADE)"""
_TASK_INSTANCE_COLUMNS = (
    "id, run_pk, dag_id, task_id, state, try_number, failures, infra_failures, max_tries, "
    "priority_weight, pool, next_try_at, queued_at, lease_owner, lease_until, fence_token, "
    "start_date, end_date, duration, last_error, return_value, capped"
)

#: The tables schema version 7 adds, as it creates them (both engines).
_VARIABLE_V7 = """CREATE TABLE variable (
    key VARCHAR(250) NOT NULL, value TEXT NOT NULL, description TEXT,
    updated_at {ts} NOT NULL, PRIMARY KEY (key))"""
_CONNECTION_V7 = """CREATE TABLE connection (
    conn_id VARCHAR(250) NOT NULL, conn_type VARCHAR(64) NOT NULL, host VARCHAR(500),
    port INTEGER, login VARCHAR(500), password TEXT, schema VARCHAR(500), extra TEXT,
    description TEXT, updated_at {ts} NOT NULL, PRIMARY KEY (conn_id))"""
_ASSET_EVENT_V7 = """CREATE TABLE asset_event (
    id {serial} NOT NULL, asset VARCHAR(250) NOT NULL, partition_key VARCHAR(64) NOT NULL,
    fingerprint VARCHAR(64), dag_id VARCHAR(250), run_pk INTEGER, task_id VARCHAR(250),
    created_at {ts} NOT NULL, PRIMARY KEY (id))"""
_ASSET_CONSUMED_V7 = """CREATE TABLE asset_consumed (
    dag_id VARCHAR(250) NOT NULL, asset VARCHAR(250) NOT NULL,
    partition_key VARCHAR(64) NOT NULL, event_id INTEGER NOT NULL, fingerprint VARCHAR(64),
    consumed_at {ts} NOT NULL, PRIMARY KEY (dag_id, asset, partition_key))"""

#: ``up_for_reschedule`` is 17 characters: version 7 widens task_instance.state from 16 on
#: PostgreSQL (SQLite does not enforce a VARCHAR's length).
_WIDER_STATE_V7 = {
    "sqlite": [],
    "postgresql": ["ALTER TABLE task_instance ALTER COLUMN state TYPE VARCHAR(32)"],
}

#: Version -> the statements that bring a database of the version before up to it (plain
#: SQL both SQLite and PostgreSQL accept, or one list per dialect; run in one transaction
#: with the version bump, on SQLite with foreign keys off, see ``engine._migrate``).
MIGRATIONS: dict[int, list[str] | dict[str, list[str]]] = {
    # Attempt logs became byte ranges of shared segment files (dagrun.store.logfiles), the
    # task-instance state indexes became partial (see ``in_state``), and a DAG file keeps
    # the helpers it imported.
    2: [
        "ALTER TABLE task_attempt ADD COLUMN log_offset BIGINT",
        "ALTER TABLE task_attempt ADD COLUMN log_length BIGINT",
        "ALTER TABLE dag_file ADD COLUMN depends_on TEXT",
        "DROP INDEX ix_ti_claim_order",
        "DROP INDEX ix_ti_state_lease",
        "DROP INDEX ix_ti_state_next_try",
        "DROP INDEX ix_ti_pool_state",
        *_V2_PARTIAL_INDEXES,
    ],
    # Lost leases, children lost before their attempt started and unwritable log folders
    # share one budget (infrastructure failures, not the task's own); an attempt's outcome
    # is written once, and a result reported after it is kept beside it; a file that breaks
    # keeps the source of its last good parse.
    3: [
        "ALTER TABLE task_instance RENAME COLUMN lease_losses TO infra_failures",
        "ALTER TABLE task_attempt ADD COLUMN late_result TEXT",
        "ALTER TABLE dag_file ADD COLUMN good_source TEXT",
    ],
    # Manual runs are unique by run id, not by logical date; the audit log names the run
    # an action changed.
    4: {
        "sqlite": [
            _DAG_RUN_V4_SQLITE,
            f"INSERT INTO dag_run_v4 ({_DAG_RUN_COLUMNS}) SELECT {_DAG_RUN_COLUMNS} FROM dag_run",
            "DROP TABLE dag_run",
            "ALTER TABLE dag_run_v4 RENAME TO dag_run",
            "CREATE INDEX ix_dag_run_dag_date ON dag_run (dag_id, logical_date)",
            "CREATE INDEX ix_dag_run_dag_state ON dag_run (dag_id, state)",
            "CREATE INDEX ix_dag_run_state ON dag_run (state)",
            ONE_RUN_PER_DATE,
            "ALTER TABLE audit_log ADD COLUMN run_id VARCHAR(250)",
            "CREATE INDEX ix_audit_log_dag_at ON audit_log (dag_id, at)",
        ],
        "postgresql": [
            "ALTER TABLE dag_run DROP CONSTRAINT uq_dag_run_logical_date",
            "CREATE INDEX ix_dag_run_dag_date ON dag_run (dag_id, logical_date)",
            ONE_RUN_PER_DATE,
            "ALTER TABLE audit_log ADD COLUMN run_id VARCHAR(250)",
            "CREATE INDEX ix_audit_log_dag_at ON audit_log (dag_id, at)",
        ],
    },
    # Callbacks are an outbox written with the state change that fires them; a DAG's
    # max_active_tasks is counted under its own lock row, for the task instances it caps.
    5: {
        dialect: [
            _CALLBACK_V5.format(serial=serial, ts=ts),
            "CREATE INDEX ix_callback_state ON callback (state, id)",
            "CREATE INDEX ix_callback_attempt ON callback (ti_id, fence_token)",
            "CREATE TABLE dag_cap (dag_id VARCHAR(250) NOT NULL, max_active_tasks INTEGER NOT "
            "NULL, PRIMARY KEY (dag_id))",
            f"ALTER TABLE task_instance ADD COLUMN capped BOOLEAN NOT NULL DEFAULT {false}",
        ]
        for dialect, serial, ts, false in (
            ("sqlite", "INTEGER", "DATETIME", "0"),
            ("postgresql", "SERIAL", "TIMESTAMP WITH TIME ZONE", "false"),
        )
    },
    # A mapped task has one task instance per element (map_index 0..n-1); an unmapped one,
    # or a mapped one not expanded yet, has map_index -1.
    6: {
        "sqlite": [
            _TASK_INSTANCE_V6_SQLITE,
            f"INSERT INTO task_instance_v6 ({_TASK_INSTANCE_COLUMNS}) "
            f"SELECT {_TASK_INSTANCE_COLUMNS} FROM task_instance",
            "DROP TABLE task_instance",
            "ALTER TABLE task_instance_v6 RENAME TO task_instance",
            "CREATE INDEX ix_ti_dag_task ON task_instance (dag_id, task_id)",
            *_V2_PARTIAL_INDEXES,
        ],
        "postgresql": [
            "ALTER TABLE task_instance ADD COLUMN map_index INTEGER NOT NULL DEFAULT -1",
            "ALTER TABLE task_instance DROP CONSTRAINT uq_task_instance_run_task",
            "ALTER TABLE task_instance ADD CONSTRAINT uq_task_instance_run_task_map "
            "UNIQUE (run_pk, task_id, map_index)",
        ],
    },
    # Sensors wait between pokes holding nothing (up_for_reschedule, due at next_try_at);
    # variables and connections live in the store; assets record events per partition key,
    # and each asset-scheduled DAG the events it has consumed.
    7: {
        dialect: [
            "ALTER TABLE task_instance ADD COLUMN first_poke_at " + ts,
            "ALTER TABLE task_instance ADD COLUMN pokes INTEGER NOT NULL DEFAULT 0",
            *_WIDER_STATE_V7[dialect],
            PARTIAL_INDEXES["ix_ti_reschedule_at"],
            _VARIABLE_V7.format(ts=ts),
            _CONNECTION_V7.format(ts=ts),
            _ASSET_EVENT_V7.format(serial=serial, ts=ts),
            "CREATE INDEX ix_asset_event_key ON asset_event (asset, partition_key, id)",
            _ASSET_CONSUMED_V7.format(ts=ts),
            "CREATE TABLE asset_cursor (dag_id VARCHAR(250) NOT NULL, "
            "last_event_id INTEGER NOT NULL, PRIMARY KEY (dag_id))",
        ]
        for dialect, serial, ts in (
            ("sqlite", "INTEGER", "DATETIME"),
            ("postgresql", "SERIAL", "TIMESTAMP WITH TIME ZONE"),
        )
    },
    # Retention (``dagrun db clean``) deletes a batch of runs' callbacks and partition
    # writes by run, in the transaction that deletes the runs: an index, not a scan per batch.
    8: [
        "CREATE INDEX ix_callback_run ON callback (run_pk)",
        "CREATE INDEX ix_partition_write_run ON partition_write (run_pk)",
    ],
}


def migration(version: int, dialect: str) -> list[str]:
    """The statements of one migration step on ``dialect``."""
    steps = MIGRATIONS.get(version, [])
    return steps.get(dialect, []) if isinstance(steps, dict) else steps


class UtcDateTime(TypeDecorator):
    """Aware UTC datetimes in Python; naive UTC on SQLite, timestamptz on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} cannot be stored; use an aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = MetaData()

meta = Table(
    "dagrun_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

dag_file = Table(
    "dag_file",
    metadata,
    Column("path", String(1024), primary_key=True),
    Column("content_hash", String(64), nullable=False),
    Column("parsed_at", UtcDateTime, nullable=False),
    Column("dag_ids", Text, nullable=False, default="[]"),
    Column("error", Text),
    Column("error_line", Integer),
    # JSON list of the files in the dags folder the file imported (its helpers), so an edit
    # to one of them parses the file again.
    Column("depends_on", Text),
    # The source of the file's last parse that succeeded: while the file on disk fails to
    # import, workers run its DAGs from this.
    Column("good_source", Text),
)

dag = Table(
    "dag",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("fileloc", String(1024), nullable=False),
    Column("schedule", String(250)),
    Column("timezone", String(64), nullable=False),
    Column("is_paused", Boolean, nullable=False, default=False),
    Column("is_active", Boolean, nullable=False, default=True),
    Column("spec", Text, nullable=False),
    Column("spec_hash", String(64), nullable=False),
    Column("next_logical_date", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

dag_run = Table(
    "dag_run",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("dag_id", String(250), ForeignKey("dag.dag_id"), nullable=False),
    Column("run_id", String(250), nullable=False),
    Column("logical_date", UtcDateTime, nullable=False),
    Column("data_interval_start", UtcDateTime, nullable=False),
    Column("data_interval_end", UtcDateTime, nullable=False),
    Column("run_type", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("conf", Text),
    Column("not_before", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("start_date", UtcDateTime),
    Column("end_date", UtcDateTime),
    # One scheduled or backfill run per logical date is a partial unique index
    # (``ONE_RUN_PER_DATE``): manual runs are unique by run id only. Reads by date use the
    # plain index, which a query planner can use without knowing the run type.
    UniqueConstraint("dag_id", "run_id", name="uq_dag_run_run_id"),
    Index("ix_dag_run_dag_date", "dag_id", "logical_date"),
    Index("ix_dag_run_dag_state", "dag_id", "state"),
    Index("ix_dag_run_state", "state"),
)

task_instance = Table(
    "task_instance",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_pk", Integer, ForeignKey("dag_run.id", ondelete="CASCADE"), nullable=False),
    Column("dag_id", String(250), nullable=False),
    Column("task_id", String(250), nullable=False),
    Column("state", String(32), nullable=False),  # up_for_reschedule is 17 characters
    Column("try_number", Integer, nullable=False, default=0),
    Column("failures", Integer, nullable=False, default=0),
    # Lost leases, lost children, unwritable logs: their own budget, not the task's retries.
    Column("infra_failures", Integer, nullable=False, default=0),
    Column("max_tries", Integer, nullable=False, default=1),
    Column("priority_weight", Integer, nullable=False, default=1),
    Column("pool", String(250)),
    Column("next_try_at", UtcDateTime),
    Column("queued_at", UtcDateTime),
    Column("lease_owner", String(128)),
    Column("lease_until", UtcDateTime),
    Column("fence_token", Integer, nullable=False, default=0),
    Column("start_date", UtcDateTime),
    Column("end_date", UtcDateTime),
    Column("duration", Float),
    Column("last_error", Text),
    Column("return_value", Text),
    # Counted against its DAG's max_active_tasks (``dag_cap``): claimed under that lock.
    Column("capped", Boolean, nullable=False, default=False, server_default=false()),
    # The element of a mapped task this instance runs (0..n-1); -1 when not mapped.
    Column("map_index", Integer, nullable=False, default=-1, server_default=text("-1")),
    # A sensor's first poke (its timeout counts from it) and how many pokes it made.
    Column("first_poke_at", UtcDateTime),
    Column("pokes", Integer, nullable=False, server_default=text("0")),
    UniqueConstraint("run_pk", "task_id", "map_index", name="uq_task_instance_run_task_map"),
    Index("ix_ti_dag_task", "dag_id", "task_id"),
)
for _ddl in PARTIAL_INDEXES.values():
    event.listen(task_instance, "after_create", DDL(_ddl))
event.listen(dag_run, "after_create", DDL(ONE_RUN_PER_DATE))


def in_state(state: TaskState) -> ColumnElement[bool]:
    """``task_instance.state = '<state>'`` with the state written out: a query planner uses a
    partial index only when the query names its state, which a bound parameter hides."""
    return task_instance.c.state == literal_column(f"'{TaskState(state).value}'")


pool = Table(
    "pool",
    metadata,
    Column("name", String(250), primary_key=True),
    Column("slots", Integer, nullable=False),
    Column("description", Text),
)

task_attempt = Table(
    "task_attempt",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ti_id", Integer, ForeignKey("task_instance.id", ondelete="CASCADE"), nullable=False),
    Column("run_pk", Integer, nullable=False),
    Column("dag_id", String(250), nullable=False),
    Column("task_id", String(250), nullable=False),
    Column("try_number", Integer, nullable=False),
    Column("fence_token", Integer, nullable=False),
    Column("worker", String(128), nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("ended_at", UtcDateTime),
    Column("outcome", String(16)),
    Column("error", Text),
    Column("log_path", String(1024)),
    Column("log_offset", BigInteger),
    Column("log_length", BigInteger),
    # What the attempt reported after someone else had ended it (a reaper): kept beside
    # the outcome, which is written once.
    Column("late_result", Text),
    UniqueConstraint("ti_id", "fence_token", name="uq_task_attempt_fence"),
    Index("ix_task_attempt_run", "run_pk"),
    Index("ix_task_attempt_outcome", "outcome"),
)

dag_cap = Table(
    "dag_cap",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("max_active_tasks", Integer, nullable=False),
)

#: The callback outbox: one row per event a callback or notifier must hear of (a task that
#: succeeded, will retry, failed for good; a run that ended), written in the transaction
#: that decided the event, so it is never lost and never written twice. Workers claim rows
#: (leased) and run them in a child with a time limit.
callback = Table(
    "callback",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event", String(32), nullable=False),
    Column("dag_id", String(250), nullable=False),
    Column("run_pk", Integer, nullable=False),
    Column("ti_id", Integer),
    Column("task_id", String(250)),
    Column("try_number", Integer),
    Column("fence_token", Integer),
    Column("error", Text),
    Column("state", String(16), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_until", UtcDateTime),
    Column("ended_at", UtcDateTime),
    Column("outcome_error", Text),
    Column("log_path", String(1024)),
    Column("log_offset", BigInteger),
    Column("log_length", BigInteger),
    Index("ix_callback_state", "state", "id"),
    Index("ix_callback_attempt", "ti_id", "fence_token"),
    Index("ix_callback_run", "run_pk"),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", UtcDateTime, nullable=False),
    Column("action", String(32), nullable=False),
    Column("dag_id", String(250)),
    Column("run_id", String(250)),
    Column("actor", String(128)),
    Column("detail", Text),
    Index("ix_audit_log_dag_at", "dag_id", "at"),
)

#: Variables (``Variable.get``, ``{{ var.value.key }}``); ``DAGRUN_VAR_<KEY>`` overrides.
variable = Table(
    "variable",
    metadata,
    Column("key", String(250), primary_key=True),
    Column("value", Text, nullable=False),
    Column("description", Text),
    Column("updated_at", UtcDateTime, nullable=False),
)

#: Connections (``Connection.get``, ``{{ conn.id.host }}``); ``DAGRUN_CONN_<ID>`` overrides.
connection = Table(
    "connection",
    metadata,
    Column("conn_id", String(250), primary_key=True),
    Column("conn_type", String(64), nullable=False),
    Column("host", String(500)),
    Column("port", Integer),
    Column("login", String(500)),
    Column("password", Text),
    Column("schema", String(500)),
    Column("extra", Text),
    Column("description", Text),
    Column("updated_at", UtcDateTime, nullable=False),
)

#: An asset's partition was produced: a task with ``outlets`` succeeded for the key ``ds``
#: (with the partition's content fingerprint when it was written through dagrun.partition).
asset_event = Table(
    "asset_event",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("asset", String(250), nullable=False),
    Column("partition_key", String(64), nullable=False),
    Column("fingerprint", String(64)),
    Column("dag_id", String(250)),
    Column("run_pk", Integer),
    Column("task_id", String(250)),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_asset_event_key", "asset", "partition_key", "id"),
)

#: What an asset-scheduled DAG consumed: per asset and key, the event its run was made or
#: re-run for (an event with the same fingerprint triggers nothing again).
asset_consumed = Table(
    "asset_consumed",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("asset", String(250), primary_key=True),
    Column("partition_key", String(64), primary_key=True),
    Column("event_id", Integer, nullable=False),
    Column("fingerprint", String(64)),
    Column("consumed_at", UtcDateTime, nullable=False),
)

#: The last asset event each asset-scheduled DAG has looked at.
asset_cursor = Table(
    "asset_cursor",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("last_event_id", Integer, nullable=False),
)

partition_write = Table(
    "partition_write",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("dataset", String(250), nullable=False),
    Column("partition_key", String(64), nullable=False),
    Column("path", String(1024), nullable=False),
    Column("rows", Integer, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("unchanged", Boolean, nullable=False),
    Column("ti_id", Integer),
    Column("dag_id", String(250)),
    Column("task_id", String(250)),
    Column("run_pk", Integer),
    Column("try_number", Integer),
    Column("fence_token", Integer),
    Column("written_at", UtcDateTime, nullable=False),
    Index("ix_partition_write_key", "dataset", "partition_key"),
    Index("ix_partition_write_run", "run_pk"),
)


def create_statements(dialect) -> list[str]:
    """The DDL that creates this schema in an empty database of ``dialect``, as
    ``metadata.create_all`` sends it (tables, indexes, and the partial indexes of the
    ``after_create`` events), rendered without a database."""
    sent: list = []
    mock = create_mock_engine(
        f"{dialect.name}://", lambda statement, *_a, **_k: sent.append(statement)
    )
    metadata.create_all(mock, checkfirst=False)
    return [str(statement.compile(dialect=dialect)).strip() for statement in sent]
