"""Clearing follows external task markers (``ExternalTaskMarker``), as Airflow's clear does.

A marker says that a task of another DAG waits on its run. When a clear chooses a marker's
task instance (itself, or with ``--downstream``), the marked task and everything downstream
of it are cleared too, in the other DAG's runs at the marked logical date; markers among
those are followed in turn. Airflow's rules (``DAG._get_task_instances`` with
``include_dependent_dags``): the marker's fields are rendered with its own run's context;
each marker instance is followed once; the first marker's ``recursion_depth`` bounds how
many DAGs deep the clear goes, and going deeper is an error, not a silent stop (a cycle of
markers, or a clear far larger than meant).

Rendering templates is the runtime's, so this sits here and the CLI calls it before it
clears; the store's ``operator_actions.clear_runs`` then clears each DAG's share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from dagrun.authoring.params import resolve_or_defaults
from dagrun.authoring.sensor_options import ExternalMarker
from dagrun.errors import DagNotFound, UsageError
from dagrun.parsing.scopes import with_setups_and_teardowns
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.context import make_context
from dagrun.runtime.rendering import render_with
from dagrun.states import TaskState
from dagrun.store import dag_reads, run_reads, task_reads

if TYPE_CHECKING:
    from sqlalchemy import Connection

_FAILED = {TaskState.FAILED.value, TaskState.UPSTREAM_FAILED.value}


@dataclass
class MarkedClear:
    """What clearing a DAG's chosen task instances also clears in one DAG: by run, the
    task ids, and how many task instances that is (a mapped task's indexes each count)."""

    spec: DagSpec
    selection: dict[int, set[str]] = field(default_factory=dict)
    count: int = 0


def follow(
    conn: Connection,
    spec: DagSpec,
    selection: Mapping[int, set[str]],
    *,
    failed_only: bool = False,
) -> list[MarkedClear]:
    """The other DAGs' task instances that clearing ``selection`` (run pk -> task ids of
    ``spec``) also clears, through the markers it contains, by DAG (``spec``'s own runs at
    other dates included, its chosen ones left out). ``failed_only`` keeps only
    failed and upstream-failed instances there too."""
    # Seeded with what is already chosen, so that a marker pointing back into ``spec``
    # adds only what is not.
    own = MarkedClear(spec, {pk: set(ids) for pk, ids in selection.items()})
    found: dict[str, MarkedClear] = {spec.dag_id: own}
    seen: set[tuple[int, str]] = set()
    limit: list[int] = []  # the first marker's recursion_depth, once met
    pending = [(spec, dict(selection), 0)]
    while pending:
        source, chosen, depth = pending.pop(0)
        for run_pk, task_ids in sorted(chosen.items()):
            for task_id in sorted(task_ids):
                task = source.task_map.get(task_id)  # None: gone from the DAG since
                marker = task.marker if task is not None else None
                if marker is None or (run_pk, task_id) in seen:
                    continue
                seen.add((run_pk, task_id))
                limit = limit or [marker.recursion_depth]
                if depth + 1 > limit[0]:
                    raise UsageError(
                        f"clearing follows markers at most {limit[0]} DAGs deep: marker "
                        f"'{task_id}' of DAG '{source.dag_id}' goes further (a cycle of "
                        "markers, or more than meant to clear?)"
                    )
                target, more = _marked(conn, source, run_pk, task_id, marker, failed_only)
                if not more:
                    continue
                share = found.setdefault(target.dag_id, MarkedClear(target))
                for pk, instances in more.items():
                    new = set(instances) - share.selection.get(pk, set())
                    share.selection.setdefault(pk, set()).update(new)
                    share.count += sum(instances[t] for t in new)
                pending.append((target, {pk: set(ids) for pk, ids in more.items()}, depth + 1))
    own.selection = {
        pk: extra for pk, ids in own.selection.items() if (extra := ids - selection.get(pk, set()))
    }
    return [share for share in found.values() if share.count]


def _marked(
    conn: Connection,
    source: DagSpec,
    run_pk: int,
    task_id: str,
    marker: ExternalMarker,
    failed_only: bool,
) -> tuple[DagSpec, dict[int, dict[str, int]]]:
    """The other DAG and, by run at the marked date, its marked task and those downstream
    of it (with their setups and teardowns) that have instances (only failed ones with
    ``failed_only``), with how many."""
    dag_id, external_task, when = _rendered(conn, source, run_pk, task_id, marker)
    try:
        target = dag_reads.load_spec(conn, dag_id)
    except DagNotFound:
        raise UsageError(
            f"marker '{task_id}' of DAG '{source.dag_id}' names DAG '{dag_id}', which is not known"
        ) from None
    if external_task not in target.task_map:
        return target, {}
    chosen = target.descendants({external_task})
    if target.setup_ids:  # cleared with them, as any clear does
        chosen = with_setups_and_teardowns(target, chosen)
    at = _instant(when, target.timezone, task_id, source.dag_id)
    runs = run_reads.runs_between(conn, dag_id, at, at)
    more: dict[int, dict[str, int]] = {}
    for ti in task_reads.task_instances(conn, [r.id for r in runs]):
        if ti.task_id in chosen and (not failed_only or ti.state in _FAILED):
            counts = more.setdefault(ti.run_pk, {})
            counts[ti.task_id] = counts.get(ti.task_id, 0) + 1
    return target, more


def _rendered(
    conn: Connection, source: DagSpec, run_pk: int, task_id: str, marker: ExternalMarker
) -> tuple[str, str, str]:
    """The marker's DAG id, task id and logical date, rendered with its run's context."""
    run = run_reads.run_by_pk(conn, run_pk)
    context = make_context(
        dag_id=source.dag_id,
        task_id=task_id,
        run_id=run.run_id,
        timezone=source.timezone,
        logical_date=run.logical_date,
        data_interval_start=run.data_interval_start,
        data_interval_end=run.data_interval_end,
        conf=run.conf,
        params=resolve_or_defaults(source.params, run.conf),
    )
    try:
        fields = render_with(
            [marker.external_dag_id, marker.external_task_id, marker.logical_date], context
        )
    except Exception as exc:
        raise UsageError(
            f"marker '{task_id}' of DAG '{source.dag_id}': cannot render its fields: {exc}"
        ) from None
    return str(fields[0]), str(fields[1]), str(fields[2])


def _instant(text: str, timezone: str, task_id: str, dag_id: str) -> datetime:
    """A rendered logical date; without an offset, in the marked DAG's time zone (dagrun's
    dates are local, where Airflow reads a date without an offset as UTC)."""
    try:
        found = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"marker '{task_id}' of DAG '{dag_id}': logical_date {text!r} is not an ISO date"
        ) from None
    return found if found.tzinfo else found.replace(tzinfo=ZoneInfo(timezone))
