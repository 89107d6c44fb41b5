"""Built-in sensors: tasks that wait for something outside their DAG run, and the marker
that lets clearing follow an external task sensor's dependency back.

Each sensor is a Python task poked until its condition holds, with the sensor options of
``@task.sensor`` (``poke_interval``, ``timeout``, ``mode``, ``soft_fail``,
``exponential_backoff``, ``max_wait``) beside the usual task options::

    from dagrun.runtime.sensors import ExternalTaskSensor, FileSensor, TimeDeltaSensor

    FileSensor("landed", filepath="/landing/{{ ds }}/*.csv", poke_interval=300)
    ExternalTaskSensor("upstream_done", external_dag_id="ingest", external_task_id="load")
    TimeDeltaSensor("settle", delta="2h")

What a poke means, and how the store keeps a waiting sensor (``up_for_reschedule``, holding
no lease, no process and no pool slot), is in ``dagrun.runtime.task_calls.sense`` and
``dagrun.store.attempts.complete``. The checks themselves (``file_found``,
``external_verdict``) are functions, which Airflow's sensors (``dagrun.airflow.sensors``)
call too.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dagrun.authoring.dag import check_id
from dagrun.authoring.options import is_whole, split_sensor_options
from dagrun.authoring.sensor_options import ExternalMarker, PokeReturnValue
from dagrun.authoring.tasks import PythonTask, Task
from dagrun.errors import DagDefinitionError, DagNotFound, NonRetryableError, SkipTask
from dagrun.runtime.context import TaskContext
from dagrun.states import RunState, TaskState
from dagrun.timing.instants import decision_now, parse_duration

__all__ = [
    "ExternalTaskMarker",
    "ExternalTaskSensor",
    "FileSensor",
    "PokeReturnValue",
    "TimeDeltaSensor",
]


class _Sensor(PythonTask):
    """A Python task whose callable is the subclass's ``poke`` (taking context names, as any
    task callable does), with the sensor options split from the task options."""

    #: Each subclass's check, with the context names it takes as parameters.
    poke: Callable[..., Any]

    def __init__(self, task_id: str, **options: Any):
        sensor, rest = split_sensor_options(options)
        super().__init__(task_id, self.poke, sensor=sensor, **rest)


# ---------------------------------------------------------------- files


def file_found(pattern: str, recursive: bool = False, folder_needs_file: bool = False) -> bool:
    """Whether ``pattern`` (a path, or a glob: ``*``, ``?``, ``[...]``, and ``**`` across
    folders when ``recursive``) matches something. With ``folder_needs_file`` a matched
    folder counts only once a file lies somewhere under it (Airflow's FileSensor)."""
    for path in glob.iglob(pattern, recursive=recursive):
        if not folder_needs_file or not os.path.isdir(path):
            return True
        if any(files for _, _, files in os.walk(path)):
            return True
    return False


class FileSensor(_Sensor):
    """Waits until ``filepath`` matches a file or folder: a path or a glob pattern, and a
    template, rendered with the attempt's context (``/landing/{{ ds }}/*.csv``), checked
    when the DAG file is parsed. ``recursive=True`` lets ``**`` match across folders;
    ``folder_needs_file=True`` counts a matched folder only once a file lies under it."""

    def __init__(
        self,
        task_id: str,
        filepath: str | os.PathLike,
        recursive: bool = False,
        folder_needs_file: bool = False,
        **options: Any,
    ):
        if not isinstance(filepath, str | os.PathLike) or not str(filepath):
            raise DagDefinitionError("FileSensor needs a filepath", task_id=task_id)
        self.filepath = str(filepath)
        self.recursive = bool(recursive)
        self.folder_needs_file = bool(folder_needs_file)
        super().__init__(task_id, **options)

    def templated(self) -> dict[str, Any]:
        return {**super().templated(), "filepath": self.filepath}

    def poke(self, ctx: TaskContext) -> bool:
        from dagrun.runtime.rendering import render  # in the worker's child, where it is loaded

        path = render(self.filepath, ctx.names())
        return file_found(path, self.recursive, self.folder_needs_file)


# ---------------------------------------------------------------- other DAGs' runs


class Verdict(StrEnum):
    """What a poke of an external task sensor found."""

    DONE = "done"
    WAITING = "waiting"
    #: Something watched is in one of the failed states.
    FAILED = "failed"
    #: Something watched is in one of the skipped states.
    SKIPPED = "skipped"
    #: ``check_existence``: the DAG, a task or the group is not known to the store.
    MISSING = "missing"


_TASK_STATES = frozenset(s.value for s in TaskState)
_RUN_STATES = frozenset(s.value for s in RunState)


@dataclass(frozen=True)
class ExternalTarget:
    """What an external task sensor watches: a DAG's run, some of its tasks, or the tasks
    of one of its task groups (``group_id``, the group's id with its parents' prefixes);
    the states that end the wait; whether what it names must be known to the store."""

    dag_id: str
    task_ids: tuple[str, ...] | None = None
    group_id: str | None = None
    allowed: frozenset[str] = frozenset({"success"})
    failed: frozenset[str] = frozenset()
    skipped: frozenset[str] = frozenset()
    check_existence: bool = False

    def problem(self) -> str | None:
        """Why these options cannot work together, or None."""
        if self.task_ids is not None and self.group_id is not None:
            return "give external task ids or an external task group id, not both"
        kinds = (self.allowed, self.failed, self.skipped)
        if len(set().union(*kinds)) != sum(map(len, kinds)):
            return "a state is in more than one of allowed_states, failed_states, skipped_states"
        known = _RUN_STATES if self.on_run else _TASK_STATES
        unknown = sorted(set().union(*kinds) - known)
        if unknown:
            what = "a DAG run's" if self.on_run else "a task's"
            return f"{unknown[0]!r} is not {what} state (those are: {', '.join(sorted(known))})"
        return None

    @property
    def on_run(self) -> bool:
        """Whether it watches the run as a whole."""
        return self.task_ids is None and self.group_id is None

    def describe(self) -> str:
        if self.group_id is not None:
            return f"task group '{self.group_id}' of DAG '{self.dag_id}'"
        if self.task_ids:
            tasks = ", ".join(f"'{t}'" for t in self.task_ids)
            return f"task{'s' if len(self.task_ids) > 1 else ''} {tasks} of DAG '{self.dag_id}'"
        return f"DAG '{self.dag_id}'"


def external_verdict(
    target: ExternalTarget, db_url: str | None, dates: Sequence[datetime]
) -> tuple[Verdict, str]:
    """What the store says of ``target`` in the target DAG's runs at ``dates`` (the newest
    run at each), with the reason: failed if anything watched is in a failed state, else
    skipped if in a skipped state, else done once, at every date, the run (or each watched
    task, a mapped one as one state) is in an allowed state. As Airflow's
    ExternalTaskSensor, a group's tasks are those the DAG's spec puts in it; a group
    unknown to the store never completes (unless ``check_existence``)."""
    if db_url is None:
        raise NonRetryableError(
            "an external task sensor reads the store: run it with a worker (dagrun run, "
            "scheduler, worker), not dagrun test"
        )
    from dagrun.store import dag_reads, run_reads
    from dagrun.store.engine import shared_store

    with shared_store(db_url).read() as conn:
        spec = None
        if target.check_existence or target.group_id is not None:
            with contextlib.suppress(DagNotFound):
                spec = dag_reads.load_spec(conn, target.dag_id)
        missing = _missing(target, spec)
        if missing:
            return Verdict.MISSING, missing
        task_ids = target.task_ids
        if target.group_id is not None:
            task_ids = _group_tasks(spec, target.group_id)
        seen = [run_reads.external_states(conn, target.dag_id, d, task_ids) for d in dates]
    return _judge(target, seen, task_ids, dates)


def _missing(target: ExternalTarget, spec: Any) -> str | None:
    """With ``check_existence``, what the target names that the store does not know."""
    if not target.check_existence:
        return None
    if spec is None:
        return f"the external DAG '{target.dag_id}' does not exist"
    unknown = [t for t in target.task_ids or () if t not in spec.task_map]
    if unknown:
        return f"the external task '{unknown[0]}' of DAG '{target.dag_id}' does not exist"
    if target.group_id is not None and not _group_tasks(spec, target.group_id):
        group = target.group_id
        return f"the external task group '{group}' of DAG '{target.dag_id}' does not exist"
    return None


def _group_tasks(spec: Any, group_id: str) -> tuple[str, ...]:
    if spec is None:
        return ()
    inside = group_id + "."
    return tuple(
        t.task_id
        for t in spec.tasks
        if t.group is not None and (t.group == group_id or t.group.startswith(inside))
    )


def _judge(
    target: ExternalTarget,
    seen: list[dict[str, str] | None],
    task_ids: Iterable[str] | None,
    dates: Sequence[datetime],
) -> tuple[Verdict, str]:
    states = [state for found in seen for state in (found or {}).values()]
    at = ", ".join(d.isoformat() for d in dates)
    for verdict, chosen in ((Verdict.FAILED, target.failed), (Verdict.SKIPPED, target.skipped)):
        hit = next((s for s in states if s in chosen), None)
        if hit is not None:
            return verdict, f"{target.describe()} at {at} is {hit}"
    wanted = set(task_ids) if task_ids is not None else {target.dag_id}
    done = bool(wanted) and all(
        found is not None and set(found) == wanted and set(found.values()) <= target.allowed
        for found in seen
    )
    return (Verdict.DONE if done else Verdict.WAITING), f"{target.describe()} at {at}"


class ExternalTaskSensor(_Sensor):
    """Waits on another DAG's run with this run's logical date (``execution_delta``
    earlier, when given): the run itself, its task ``external_task_id`` (or each of
    ``external_task_ids``), or every task of its task group ``external_task_group_id``.
    Done once that is in ``allowed_states`` (default: success); fails for good (no retry)
    once anything watched is in ``failed_states`` (default: failed, and upstream_failed
    for tasks); ends skipped once anything is in ``skipped_states`` (default: none). With
    ``check_existence`` a DAG, task or group the store does not know fails it for good.
    Reads the store the attempt's worker uses."""

    def __init__(
        self,
        task_id: str,
        external_dag_id: str,
        external_task_id: str | None = None,
        *,
        external_task_ids: Collection[str] | None = None,
        external_task_group_id: str | None = None,
        allowed_states: Iterable[str] | None = None,
        failed_states: Iterable[str] | None = None,
        skipped_states: Iterable[str] | None = None,
        execution_delta: Any = None,
        check_existence: bool = False,
        **options: Any,
    ):
        ids = _watched_ids(task_id, external_task_id, external_task_ids)
        group = None
        if external_task_group_id is not None:
            group = check_id("external task group", external_task_group_id, task_id=task_id)
        on_tasks = ids is not None or group is not None
        failed_default = ["failed", "upstream_failed"] if on_tasks else ["failed"]
        self.target = ExternalTarget(
            check_id("external DAG", external_dag_id, task_id=task_id),
            ids,
            group,
            _states(allowed_states, ["success"]),
            _states(failed_states, failed_default),
            _states(skipped_states, []),
            bool(check_existence),
        )
        problem = self.target.problem()
        if problem:
            raise DagDefinitionError(problem, task_id=task_id)
        self.execution_delta = _delta(execution_delta, task_id)
        super().__init__(task_id, **options)

    @property
    def external_dag_id(self) -> str:
        return self.target.dag_id

    def poke(self, ctx: TaskContext) -> bool:
        date = ctx.logical_date - self.execution_delta
        verdict, reason = external_verdict(self.target, ctx.runs_url, [date])
        if verdict in (Verdict.FAILED, Verdict.MISSING):
            raise NonRetryableError(reason)
        if verdict == Verdict.SKIPPED:
            raise SkipTask(reason)
        return verdict == Verdict.DONE


def _watched_ids(
    task_id: str, one: str | None, many: Collection[str] | None
) -> tuple[str, ...] | None:
    """``external_task_id`` or ``external_task_ids`` as one tuple of checked ids (None:
    neither given); both given, or one id twice, is an error."""
    if one is not None and many:
        raise DagDefinitionError(
            "give external_task_id or external_task_ids, not both", task_id=task_id
        )
    ids = [one] if one is not None else list(many or [])
    if len(set(ids)) != len(ids):
        raise DagDefinitionError(f"external_task_ids repeats a task id: {ids}", task_id=task_id)
    return tuple(check_id("external task", t, task_id=task_id) for t in ids) or None


def _states(given: Iterable[str] | None, default: list[str]) -> frozenset[str]:
    """States as their names (enum members included); None or empty: ``default``."""
    found = [getattr(s, "value", s) for s in given or ()]
    return frozenset(found or default)


def _delta(value: Any, task_id: str) -> timedelta:
    """``execution_delta``: a timedelta (a negative one looks at a later run), seconds or
    text such as "1d"; None: no offset."""
    if value is None or isinstance(value, timedelta):
        return value or timedelta(0)
    try:
        return parse_duration(value)
    except Exception as exc:
        raise DagDefinitionError(f"execution_delta: {exc}", task_id=task_id) from None


class ExternalTaskMarker(Task):
    """Marks that task ``external_task_id`` of DAG ``external_dag_id`` waits on this one
    (with an ExternalTaskSensor, say). Running it does nothing; clearing it (``dagrun
    clear``, chosen or with ``--downstream``) also clears that task and what is downstream
    of it in that DAG's runs at ``logical_date`` (a template rendered with this run's
    dates, by default its logical date; a date without an offset is in that DAG's time
    zone), and follows the markers among those, at most ``recursion_depth`` DAGs deep
    (Airflow's ExternalTaskMarker; see ``dagrun.runtime.markers``)."""

    kind = "external_task_marker"

    def __init__(
        self,
        task_id: str,
        external_dag_id: str,
        external_task_id: str,
        logical_date: str = "{{ logical_date.isoformat() }}",
        recursion_depth: int = 10,
        **options: Any,
    ):
        if not is_whole(recursion_depth) or recursion_depth <= 0:
            raise DagDefinitionError(
                f"recursion_depth must be a whole number > 0, not {recursion_depth!r}",
                task_id=task_id,
            )
        if not isinstance(logical_date, str) or not logical_date:
            raise DagDefinitionError(
                f"logical_date must be a template or an ISO date, not {logical_date!r}",
                task_id=task_id,
            )
        self.marker = ExternalMarker(
            check_id("external DAG", external_dag_id, task_id=task_id),
            check_id("external task", external_task_id, task_id=task_id),
            logical_date,
            recursion_depth,
        )
        super().__init__(task_id, **options)

    def templated(self) -> dict[str, Any]:
        return {**super().templated(), "logical_date": self.marker.logical_date}

    def run_attempt(self, context: Any, inputs: dict[str, Any], elements: dict[str, Any]) -> Any:
        """Nothing to do: the marker matters when it is cleared."""
        return None


class TimeDeltaSensor(_Sensor):
    """Waits until ``delta`` (seconds, a timedelta or text such as "2h") after the end of
    the run's data interval, by the store's clock (the database's on PostgreSQL)."""

    def __init__(self, task_id: str, delta: Any, **options: Any):
        try:
            self.delta = parse_duration(delta)
        except Exception as exc:
            raise DagDefinitionError(f"delta: {exc}", task_id=task_id) from None
        super().__init__(task_id, **options)

    def poke(self, data_interval_end: datetime) -> bool:
        return decision_now() >= data_interval_end + self.delta
