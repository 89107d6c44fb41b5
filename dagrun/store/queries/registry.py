"""The statements of ``registry`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import delete, update

from dagrun.store.schema import dag, dag_cap, dag_file, meta
from dagrun.store.sql import Statement, name_all, upsert
from dagrun.store.sql import bind as _b
from dagrun.store.sql import bind_list as _many

UPSERT_DAG_FILES = Statement(
    "Record parsed files: content hash (and the size and modification time it was read at), "
    "DAG ids, import error, helper files, warnings, and the source of a parse that "
    "succeeded (a failed parse keeps the last good one).",
    upsert(
        dag_file,
        "path",
        (
            "content_hash",
            "parsed_at",
            "dag_ids",
            "error",
            "error_line",
            "depends_on",
            "warnings",
            "size",
            "mtime_ns",
        ),
        kept_if_null=("good_source",),
    ),
)


RECORD_FILE_STATS = Statement(
    "Record the size and modification time of files whose content is the one recorded "
    "(touched, or settled since they were parsed), so the next sync reads them no more.",
    update(dag_file)
    .where(dag_file.c.path == _b("path"))
    .values(size=_b("size"), mtime_ns=_b("mtime_ns")),
)


DELETE_DAG_FILES = Statement(
    "Forget files removed from the dags folder.",
    delete(dag_file).where(dag_file.c.path.in_(_many("paths"))),
)


UPSERT_DAGS = Statement(
    "Record DAG specs; a DAG seen before keeps its pause flag and the scheduler's cursor.",
    upsert(
        dag,
        "dag_id",
        ("fileloc", "schedule", "timezone", "is_active", "spec", "spec_hash", "updated_at"),
    ),
)


DEACTIVATE_DAGS = Statement(
    "DAGs no file defines any more stop being scheduled; their runs stay in history.",
    update(dag)
    .where(dag.c.dag_id.in_(_many("dag_ids")), dag.c.is_active.is_(True))
    .values(is_active=False),
)


SET_PAUSED = Statement(
    "Pause or unpause an active DAG.",
    update(dag)
    .where(dag.c.dag_id == _b("dag_id"), dag.c.is_active.is_(True))
    .values(is_paused=_b("paused")),
)


UPSERT_DAG_CAP = Statement(
    "Record a DAG's max_active_tasks.",
    upsert(dag_cap, "dag_id", ("max_active_tasks",)),
)


SET_META = Statement(
    "Record a ``dagrun_meta`` value: the code that parsed the files the registry holds, "
    "the dags folder the store serves.",
    upsert(meta, "key", ("value",)),
)


DELETE_DAG_CAPS = Statement(
    "Forget the caps of DAGs that no longer have one.",
    delete(dag_cap).where(dag_cap.c.dag_id.in_(_many("dag_ids"))),
)


name_all(globals(), prefix="registry.")
