"""How a database made by an older dagrun is brought up to this schema: one step per
version, each the statements that take a database of the version before it to its own.

Steps are plain SQL that SQLite and PostgreSQL both accept, or one list per dialect, run in
one transaction with the version bump (on SQLite with foreign keys off, see
``engine._migrate``). A step creates what existed at its version, never what a later step
adds: the tables and indexes as they were then are written out here, not taken from
``schema``'s current ones.
"""

from __future__ import annotations

from dagrun.store.schema import ONE_RUN_PER_DATE, PARTIAL_INDEXES

#: The partial indexes schema version 2 made (and version 6 remade with its table): a
#: migration step creates what existed at its version, never an index a later step adds.
_V2_PARTIAL_INDEXES = [
    ddl for name, ddl in PARTIAL_INDEXES.items() if name != "ix_ti_reschedule_at"
]

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
    # XComs pushed by a task (``ti.xcom_push``) beside its return value, written with its
    # fenced completion; a DAG file's warnings (arguments accepted but not acted on).
    9: {
        dialect: [
            "CREATE TABLE xcom (run_pk INTEGER NOT NULL, task_id VARCHAR(250) NOT NULL, "
            "map_index INTEGER NOT NULL, key VARCHAR(250) NOT NULL, value TEXT NOT NULL, "
            f"created_at {ts} NOT NULL, PRIMARY KEY (run_pk, task_id, map_index, key), "
            "FOREIGN KEY(run_pk) REFERENCES dag_run (id) ON DELETE CASCADE)",
            "ALTER TABLE dag_file ADD COLUMN warnings TEXT",
        ]
        for dialect, ts in (("sqlite", "DATETIME"), ("postgresql", "TIMESTAMP WITH TIME ZONE"))
    },
    # Airflow-style asset conditions: the events each asset-triggered run was made from.
    10: [
        "CREATE TABLE asset_trigger (run_pk INTEGER NOT NULL, event_id INTEGER NOT NULL, "
        "PRIMARY KEY (run_pk, event_id), "
        "FOREIGN KEY(run_pk) REFERENCES dag_run (id) ON DELETE CASCADE)",
    ],
    # Heartbeats of schedulers and workers (``/health``), and the web page's accounts and
    # API tokens (a login off loopback).
    11: {
        dialect: [
            "CREATE TABLE heartbeat (owner VARCHAR(128) NOT NULL, role VARCHAR(16) NOT NULL, "
            f"host VARCHAR(255) NOT NULL, pid INTEGER NOT NULL, started_at {ts} NOT NULL, "
            f"beat_at {ts} NOT NULL, clock_offset FLOAT, PRIMARY KEY (owner))",
            "CREATE INDEX ix_heartbeat_role_beat ON heartbeat (role, beat_at)",
            "CREATE TABLE account (name VARCHAR(64) NOT NULL, password_hash TEXT NOT NULL, "
            f"created_at {ts} NOT NULL, PRIMARY KEY (name))",
            f"CREATE TABLE api_token (id {serial} NOT NULL, account VARCHAR(64) NOT NULL, "
            f"token_hash VARCHAR(128) NOT NULL, created_at {ts} NOT NULL, last_used_at {ts}, "
            "PRIMARY KEY (id), UNIQUE (token_hash), "
            "FOREIGN KEY(account) REFERENCES account (name) ON DELETE CASCADE)",
        ]
        for dialect, serial, ts in (
            ("sqlite", "INTEGER", "DATETIME"),
            ("postgresql", "SERIAL", "TIMESTAMP WITH TIME ZONE"),
        )
    },
    # A DAG file's size and modification time beside its hash: a sync with nothing changed
    # reads no file (the files recorded before have none, so each is hashed once more).
    12: [
        "ALTER TABLE dag_file ADD COLUMN size BIGINT",
        "ALTER TABLE dag_file ADD COLUMN mtime_ns BIGINT",
    ],
}


def migration(version: int, dialect: str) -> list[str]:
    """The statements of one migration step on ``dialect``."""
    steps = MIGRATIONS.get(version, [])
    return steps.get(dialect, []) if isinstance(steps, dict) else steps
