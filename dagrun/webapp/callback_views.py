"""The view models of the callbacks a run fired and of one callback's log. Shared by the
pages and ``/api``, like ``models``.

Each ``read_*`` reads in one short read transaction; a DAG that is not known is a 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dagrun.store import Store, callbacks, run_reads
from dagrun.store.run_reads import RunRow
from dagrun.timing.instants import iso
from dagrun.webapp.documents import CallbackJson
from dagrun.webapp.http import NotFound
from dagrun.webapp.models import DagInfo, read_dag
from dagrun.webapp.urls import callback_log_url, log_url


@dataclass(frozen=True)
class CallbackLine:
    """A callback of a run: its event (of a task instance, or of the run), how far it got,
    the error the event carried and the reason it failed, and its log page if it wrote one."""

    id: int
    event: str
    state: str
    task_id: str | None
    map_index: int
    try_number: int | None
    created_at: datetime
    ended_at: datetime | None
    error: str | None
    outcome_error: str | None
    log_href: str | None
    attempt_href: str | None


def read_callbacks(store: Store, dag_id: str, run: RunRow) -> list[CallbackLine]:
    with store.read() as conn:
        rows = callbacks.of_run(conn, run.id)
    return [_callback_line(dag_id, run.run_id, r) for r in rows]


@dataclass(frozen=True)
class CallbackLog:
    """What a callback's log page needs: its DAG and run, the callback, and its log range."""

    dag: DagInfo
    run: RunRow
    line: CallbackLine
    source: Any


def read_callback(store: Store, dag_id: str, run_id: str, callback_id: int) -> CallbackLog:
    with store.read() as conn:
        info = read_dag(store, conn, dag_id)
        run = run_reads.run_by_id(conn, dag_id, run_id)
        found = [r for r in callbacks.of_run(conn, run.id) if r.id == callback_id]
    if not found:
        raise NotFound(f"run {run_id} of {dag_id} has no callback {callback_id}")
    return CallbackLog(info, run, _callback_line(dag_id, run_id, found[0]), found[0])


def _callback_line(dag_id: str, run_id: str, row: Any) -> CallbackLine:
    attempt = None
    if row.task_id is not None and row.try_number is not None:
        attempt = log_url(dag_id, run_id, row.task_id, row.try_number, row.map_index)
    return CallbackLine(
        id=row.id,
        event=row.event,
        state=row.state,
        task_id=row.task_id,
        map_index=row.map_index,
        try_number=row.try_number,
        created_at=row.created_at,
        ended_at=row.ended_at,
        error=row.error,
        outcome_error=row.outcome_error,
        log_href=callback_log_url(dag_id, run_id, row.id) if row.log_path else None,
        attempt_href=attempt,
    )


def callback_json(line: CallbackLine) -> CallbackJson:
    return {
        "event": line.event,
        "state": line.state,
        "task_id": line.task_id,
        "map_index": line.map_index,
        "try_number": line.try_number,
        "created_at": iso(line.created_at),
        "ended_at": iso(line.ended_at),
        "error": line.error,
        "callback_error": line.outcome_error,
        "log_url": line.log_href,
    }
