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
from dagrun.store.protocol import SCHEMA_VERSION as SCHEMA_VERSION

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
#: One scheduled or backfill run per (DAG, logical date); manual runs are unique by run id
#: only, so two triggers at one instant with different keys make two runs.
ONE_RUN_PER_DATE = (
    "CREATE UNIQUE INDEX uq_dag_run_logical_date ON dag_run (dag_id, logical_date) "
    "WHERE run_type <> 'manual'"
)


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
    # JSON list of the file's warnings from its last parse (arguments accepted but not acted
    # on), each {"line", "message"}.
    Column("warnings", Text),
    # The file's size and modification time (ns) when content_hash was read: a sync that
    # finds them unchanged reads the file no more (``parsing.discovery``); null while the
    # file was too recent for them to tell its next edit.
    Column("size", BigInteger),
    Column("mtime_ns", BigInteger),
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

#: What a task pushed besides its return value (``ti.xcom_push(key, value)``), JSON, per
#: task instance and key: written with the attempt's fenced completion, so a stale attempt
#: pushes nothing.
xcom = Table(
    "xcom",
    metadata,
    Column("run_pk", Integer, ForeignKey("dag_run.id", ondelete="CASCADE"), primary_key=True),
    Column("task_id", String(250), primary_key=True),
    Column("map_index", Integer, primary_key=True),
    Column("key", String(250), primary_key=True),
    Column("value", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
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

#: The last beat of each scheduler and worker process (``/health``, the page's banner,
#: ``/metrics``), with the difference between its host's clock and the database's.
heartbeat = Table(
    "heartbeat",
    metadata,
    Column("owner", String(128), primary_key=True),
    Column("role", String(16), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("beat_at", UtcDateTime, nullable=False),
    Column("clock_offset", Float),
    Index("ix_heartbeat_role_beat", "role", "beat_at"),
)

#: Who may use the web page and the API off loopback: scrypt hashes, never passwords.
account = Table(
    "account",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("password_hash", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

#: Bearer tokens of the API, stored hashed (a token is shown once, when it is made).
api_token = Table(
    "api_token",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("account", String(64), ForeignKey("account.name", ondelete="CASCADE"), nullable=False),
    Column("token_hash", String(128), nullable=False, unique=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("last_used_at", UtcDateTime),
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

#: The last asset event each asset-scheduled DAG has looked at (per partition key), or that
#: its last asset-triggered run consumed (an Airflow-style condition: ``asset_triggers``).
asset_cursor = Table(
    "asset_cursor",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("last_event_id", Integer, nullable=False),
)

#: The events an asset-triggered run of an Airflow-style condition was made from (each event
#: once per DAG: the DAG's cursor in ``asset_cursor`` moves past them in the same commit).
asset_trigger = Table(
    "asset_trigger",
    metadata,
    Column(
        "run_pk",
        Integer,
        ForeignKey("dag_run.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("event_id", Integer, primary_key=True),
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
