"""The statements of ``assets`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import insert

from dagrun.store.schema import asset_consumed, asset_cursor, asset_event
from dagrun.store.sql import Statement, binds, name_all, upsert

INSERT_ASSET_EVENTS = Statement(
    "Record that a task produced a partition of an asset (outlets), with its fingerprint.",
    insert(asset_event).values(
        **binds("asset partition_key fingerprint dag_id run_pk task_id created_at")
    ),
)


UPSERT_CONSUMED = Statement(
    "Record the event of an asset a DAG's run for a key was made or re-run for.",
    upsert(
        asset_consumed,
        ("dag_id", "asset", "partition_key"),
        ("event_id", "fingerprint", "consumed_at"),
    ),
)


UPSERT_ASSET_CURSOR = Statement(
    "Move a DAG's asset cursor past the events it looked at.",
    upsert(asset_cursor, "dag_id", ("last_event_id",)),
)


name_all(globals(), prefix="assets.")
