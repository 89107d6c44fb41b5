"""The view models of what operators see happen around runs: the assets DAGs wait for and
produce, and the callbacks a run fired. Shared by the pages and ``/api``, like ``models``.

Each ``read_*`` reads in one short read transaction; a DAG that is not known is a 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dagrun.parsing.spec import DagSpec
from dagrun.store import Store, assets, callbacks, reads
from dagrun.store.assets import AssetEvent, AssetRow, Awaited
from dagrun.store.reads import RunRow
from dagrun.timing.instants import iso
from dagrun.webapp.http import NotFound
from dagrun.webapp.models import DagInfo, read_dag
from dagrun.webapp.urls import callback_log_url, log_url

# ---------------------------------------------------------------- assets


@dataclass(frozen=True)
class Produced:
    """An asset the DAG's tasks produce (``outlets``), and its latest event by anyone."""

    name: str
    tasks: tuple[str, ...]
    latest: AssetEvent | None


@dataclass(frozen=True)
class DagAssets:
    """What ``/dags/<id>/assets`` shows: the assets the DAG waits for and those it makes."""

    dag: DagInfo
    awaited: list[Awaited]
    produced: list[Produced]


def read_assets(store: Store) -> list[AssetRow]:
    """Every asset the active DAGs name or events record (what ``dagrun assets list`` shows)."""
    with store.read() as conn:
        return assets.asset_rows(conn, [r.spec for r in reads.active_dags(conn)])


def read_dag_assets(store: Store, dag_id: str) -> DagAssets:
    with store.read() as conn:
        info = read_dag(store, conn, dag_id)
        outlets = _outlets(info.spec)
        awaited = assets.awaited(conn, info.spec)
        latest = assets.latest_events(conn, outlets)
    produced = [Produced(name, tasks, latest.get(name)) for name, tasks in outlets.items()]
    return DagAssets(info, awaited, produced)


def _outlets(spec: DagSpec) -> dict[str, tuple[str, ...]]:
    """Each asset the DAG's tasks produce, with those tasks, in task order."""
    found: dict[str, tuple[str, ...]] = {}
    for task in spec.tasks:
        for name in task.outlets:
            found[name] = (*found.get(name, ()), task.task_id)
    return found


def event_json(event: AssetEvent | None) -> dict[str, Any] | None:
    if event is None:
        return None
    return {
        "partition_key": event.partition_key,
        "fingerprint": event.fingerprint,
        "dag_id": event.dag_id,
        "run_id": event.run_id,
        "task_id": event.task_id,
        "created_at": iso(event.created_at),
    }


def dag_assets_json(view: DagAssets) -> dict[str, Any]:
    return {
        "dag_id": view.dag.dag_id,
        "waits_for": [
            {
                "name": a.name,
                "latest_event": event_json(a.latest),
                "status": a.status,
                "consumed_event_at": iso(a.consumed_at),
            }
            for a in view.awaited
        ],
        "produces": [
            {"name": p.name, "tasks": list(p.tasks), "latest_event": event_json(p.latest)}
            for p in view.produced
        ],
    }


# ---------------------------------------------------------------- callbacks


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
        run = reads.run_by_id(conn, dag_id, run_id)
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


def callback_json(line: CallbackLine) -> dict[str, Any]:
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
