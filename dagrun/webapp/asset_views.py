"""The view models of assets: the assets DAGs wait for and produce, and a DAG's own. Shared by
the pages and ``/api``, like ``models``.

Each ``read_*`` reads in one short read transaction; a DAG that is not known is a 404.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagrun.parsing.spec import DagSpec
from dagrun.store import Store, assets, dag_reads
from dagrun.store.assets import AssetRow, Awaited
from dagrun.store.dag_reads import AssetEvent
from dagrun.timing.instants import iso
from dagrun.webapp.documents import AssetEventJson, DagAssetsJson
from dagrun.webapp.models import DagInfo, read_dag


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
        return assets.asset_rows(conn, [r.spec for r in dag_reads.active_dags(conn)])


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


def event_json(event: AssetEvent | None) -> AssetEventJson | None:
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


def dag_assets_json(view: DagAssets) -> DagAssetsJson:
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
