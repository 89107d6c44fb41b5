"""The statements of ``dag_reads`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import func, select

from dagrun.states import TaskState
from dagrun.store.schema import (
    asset_consumed,
    asset_cursor,
    asset_event,
    asset_trigger,
    dag,
    dag_file,
    dag_run,
    in_state,
    meta,
    partition_write,
    pool,
)
from dagrun.store.schema import task_instance as ti
from dagrun.store.sql import Statement, name_all
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

KNOWN_FILES = Statement(
    "Every DAG file parsed: its hash, its DAGs, its error, the helpers it imports, and the "
    "size and modification time its hash was read at.",
    select(
        *dag_file.c[
            "path",
            "content_hash",
            "dag_ids",
            "error",
            "error_line",
            "depends_on",
            "size",
            "mtime_ns",
        ]
    ),
)


META_VALUE = Statement(
    "One ``dagrun_meta`` value by its key (none before it was kept).",
    select(meta.c.value).where(meta.c.key == _b("key")),
)


IMPORT_ERRORS = Statement(
    "The DAG files whose last parse failed, with the error, by path.",
    select(dag_file.c.path, dag_file.c.content_hash, dag_file.c.error, dag_file.c.error_line)
    .where(dag_file.c.error.is_not(None))
    .order_by(dag_file.c.path),
)


FILE_WARNINGS = Statement(
    "The DAG files whose last parse left warnings, with them, by path.",
    select(dag_file.c.path, dag_file.c.warnings)
    .where(dag_file.c.warnings.is_not(None), dag_file.c.warnings != "[]")
    .order_by(dag_file.c.path),
)


GOOD_SOURCE = Statement(
    "The source of a DAG file's last parse that succeeded.",
    select(dag_file.c.good_source).where(dag_file.c.path == _b("path")),
)


FILE_SOURCE = Statement(
    "A DAG file's last good source, when it was last parsed and that parse's error.",
    select(*dag_file.c["path", "parsed_at", "good_source", "error", "error_line"]).where(
        dag_file.c.path == _b("path")
    ),
)


_DAG_SELECT = select(
    *dag.c["dag_id", "fileloc", "is_paused", "is_active", "spec_hash", "spec"],
    dag.c.next_logical_date,
    dag_file.c.error,
).outerjoin(dag_file, dag_file.c.path == dag.c.fileloc)


ACTIVE_DAGS = Statement(
    "The DAGs their files still define, by id.",
    _DAG_SELECT.where(dag.c.is_active.is_(True)).order_by(dag.c.dag_id),
)


DAG = Statement("One DAG, active or not.", _DAG_SELECT.where(dag.c.dag_id == _b("dag_id")))


ACTIVE_DAG = Statement(
    "One DAG that its file still defines.",
    _DAG_SELECT.where(dag.c.dag_id == _b("dag_id"), dag.c.is_active.is_(True)),
)


SPEC = Statement(
    "A DAG's stored spec and its hash.",
    select(dag.c.spec_hash, dag.c.spec).where(dag.c.dag_id == _b("dag_id")),
)


ACTIVE_DAG_IDS = Statement(
    "The DAGs their files still define.", select(dag.c.dag_id).where(dag.c.is_active.is_(True))
)


POOLED_STATE_COUNTS = Statement(
    "How many task instances of each pool they name are in each state.",
    select(ti.c.pool, ti.c.state, func.count())
    .where(ti.c.pool.is_not(None))
    .group_by(ti.c.pool, ti.c.state),
)


POOLS = Statement("Every pool created, by name.", select(pool).order_by(pool.c.name))


QUEUED_POOLS = Statement(
    "The pools that queued task instances name.",
    select(ti.c.pool)
    .where(in_state(TaskState.QUEUED), ti.c.pool.is_not(None))
    .distinct()
    .order_by(ti.c.pool),
)


RUNNING_IN_POOL = Statement(
    "How many of a pool's task instances are running.",
    select(func.count())
    .select_from(ti)
    .where(ti.c.pool == _b("pool"), in_state(TaskState.RUNNING)),
)


QUEUED_CAPPED = Statement(
    "The (DAG, pool) pairs of queued task instances counted against a DAG's max_active_tasks.",
    select(ti.c.dag_id, ti.c.pool)
    .where(in_state(TaskState.QUEUED), ti.c.capped.is_(True))
    .distinct()
    .order_by(ti.c.dag_id, ti.c.pool),
)


RUNNING_IN_DAG = Statement(
    "How many of a DAG's task instances are running.",
    select(func.count())
    .select_from(ti)
    .where(ti.c.dag_id == _b("dag_id"), in_state(TaskState.RUNNING)),
)


MISSING_POOLS = Statement(
    "Pools that queued task instances name but nobody created.",
    select(ti.c.pool)
    .where(in_state(TaskState.QUEUED), ti.c.pool.is_not(None))
    .where(ti.c.pool.not_in(select(pool.c.name)))
    .distinct()
    .order_by(ti.c.pool),
)


PARTITION_FINGERPRINT = Statement(
    "The content fingerprint of the partition an attempt wrote of a dataset, if it did.",
    select(partition_write.c.sha256)
    .where(
        partition_write.c.dataset == _b("dataset"),
        partition_write.c.partition_key == _b("partition_key"),
        partition_write.c.ti_id == _b("ti_id"),
        partition_write.c.fence_token == _b("fence"),
    )
    .order_by(partition_write.c.id.desc())
    .limit(1),
)


NEW_ASSET_EVENTS = Statement(
    "Events of some assets after a DAG's cursor (up to a settled id), oldest first (what it "
    "has not looked at).",
    select(*asset_event.c["id", "asset", "partition_key", "fingerprint"])
    .where(
        asset_event.c.asset.in_(_many("assets")),
        asset_event.c.id > _b("after"),
        asset_event.c.id <= _b("upto"),
    )
    .order_by(asset_event.c.id)
    .limit(_b("limit")),
)


KEY_EVENTS = Statement(
    "Every event of some assets for one partition key, oldest first.",
    select(*asset_event.c["id", "asset", "fingerprint"])
    .where(asset_event.c.asset.in_(_many("assets")), asset_event.c.partition_key == _b("key"))
    .order_by(asset_event.c.id),
)


CONSUMED_FOR_KEY = Statement(
    "What a DAG consumed of each asset for one partition key: event and fingerprint.",
    select(*asset_consumed.c["asset", "event_id", "fingerprint"]).where(
        asset_consumed.c.dag_id == _b("dag_id"), asset_consumed.c.partition_key == _b("key")
    ),
)


ASSET_CURSOR = Statement(
    "The last asset event a DAG looked at.",
    select(asset_cursor.c.last_event_id).where(asset_cursor.c.dag_id == _b("dag_id")),
)


_KEY_LATEST = (
    select(func.max(asset_event.c.id).label("id"), func.count().label("events"))
    .group_by(asset_event.c.asset, asset_event.c.partition_key)
    .subquery("key_latest")
)


ASSET_PARTITIONS = Statement(
    "Per asset and partition key: the latest event, with the run id of the run that produced "
    "it, and how many events the key has; by asset and key.",
    select(
        *asset_event.c["id", "asset", "partition_key", "fingerprint", "dag_id", "task_id"],
        asset_event.c.created_at,
        dag_run.c.run_id,
        _KEY_LATEST.c.events,
    )
    .select_from(
        asset_event.join(_KEY_LATEST, _KEY_LATEST.c.id == asset_event.c.id).outerjoin(
            dag_run, dag_run.c.id == asset_event.c.run_pk
        )
    )
    .order_by(asset_event.c.asset, asset_event.c.partition_key),
)


CONSUMED_KEYS = Statement(
    "Every partition key of an asset an asset-scheduled DAG consumed, with the event.",
    select(*asset_consumed.c["dag_id", "asset", "partition_key", "event_id"]),
)


TRIGGERED_KEYS = Statement(
    "The asset and partition key of each event an asset-triggered run was made from, with "
    "the event and the run.",
    select(
        *asset_event.c["asset", "partition_key", "id"], *dag_run.c["dag_id", "run_id"]
    ).select_from(
        asset_trigger.join(asset_event, asset_event.c.id == asset_trigger.c.event_id).join(
            dag_run, dag_run.c.id == asset_trigger.c.run_pk
        )
    ),
)


LATEST_ASSET_EVENTS = Statement(
    "The latest event of each of some assets, with the run id of the run that produced it.",
    select(
        *asset_event.c["id", "asset", "partition_key", "fingerprint", "dag_id", "task_id"],
        asset_event.c.created_at,
        dag_run.c.run_id,
    )
    .select_from(asset_event.outerjoin(dag_run, dag_run.c.id == asset_event.c.run_pk))
    .where(
        asset_event.c.id.in_(
            select(func.max(asset_event.c.id))
            .where(asset_event.c.asset.in_(_many("assets")))
            .group_by(asset_event.c.asset)
        )
    ),
)


CONSUMED_OF_KEYS = Statement(
    "What a DAG consumed of some assets for some partition keys: event and when.",
    select(*asset_consumed.c["asset", "partition_key", "event_id", "consumed_at"]).where(
        asset_consumed.c.dag_id == _b("dag_id"),
        asset_consumed.c.asset.in_(_many("assets")),
        asset_consumed.c.partition_key.in_(_many("keys")),
    ),
)


NEW_EVENTS_BY_ASSET = Statement(
    "Per asset with events after a DAG's cursor (up to a settled id): the last one's id "
    "and when the last came (what an asset condition is evaluated over).",
    select(asset_event.c.asset, func.max(asset_event.c.id), func.max(asset_event.c.created_at))
    .where(
        asset_event.c.asset.in_(_many("assets")),
        asset_event.c.id > _b("after"),
        asset_event.c.id <= _b("upto"),
    )
    .group_by(asset_event.c.asset),
)


LAST_ASSET_EVENT = Statement(
    "The id of the latest asset event (0 with none).",
    select(func.coalesce(func.max(asset_event.c.id), 0)),
)


TRIGGERING_EVENTS = Statement(
    "The events an asset-triggered run was made from, oldest first, with the run id of the "
    "run that produced each.",
    select(
        *asset_event.c["id", "asset", "partition_key", "fingerprint", "dag_id", "task_id"],
        asset_event.c.created_at,
        dag_run.c.run_id,
    )
    .select_from(
        asset_trigger.join(asset_event, asset_event.c.id == asset_trigger.c.event_id).outerjoin(
            dag_run, dag_run.c.id == asset_event.c.run_pk
        )
    )
    .where(asset_trigger.c.run_pk == _b("run_pk"))
    .order_by(asset_event.c.id),
)


name_all(globals(), prefix="dag_reads.")
