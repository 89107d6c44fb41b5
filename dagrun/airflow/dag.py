"""Airflow's ``DAG`` and ``@dag``: its arguments mapped onto dagrun's DAG.

The time zone is the start date's (a pendulum or zoneinfo datetime), UTC without one, as in
Airflow. ``default_args`` are kept for the tasks (``dagrun.airflow.arguments``), their
``start_date`` and ``end_date`` serving the DAG when it has none. Arguments that configure
what dagrun does not have (``sla_miss_callback``, ``access_control``, ``owner_links`` ...)
are accepted and listed once as warnings of the file.

Airflow 2 and 3 differ in defaults: a DAG without a schedule runs daily in 2.x and never in
3.x, and catches up in 2.x only. ``DAG`` has the 2.x defaults, ``SdkDAG`` (what
``airflow.sdk`` serves) the 3.x ones, so a file gets the defaults of the line it was
written for.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta, tzinfo
from typing import Any

from dagrun.authoring import dag as native
from dagrun.authoring.context_names import ALL_CONTEXT_NAMES
from dagrun.authoring.params import ParamRef
from dagrun.errors import DagDefinitionError
from dagrun.timing.schedules import CronTrigger

_NOT_SET: Any = object()

#: DAG arguments of Airflow's that configure what dagrun does not have: accepted, warned.
IGNORED = frozenset(
    {
        "sla_miss_callback",
        "default_view",
        "orientation",
        "access_control",
        "jinja_environment_kwargs",
        "owner_links",
        "auto_register",
        "fail_stop",
        "fail_fast",
        "dag_display_name",
        "max_consecutive_failed_dag_runs",
        "full_filepath",
        "template_undefined",
        "disable_bundle_versioning",
        "deadline",
    }
)

#: Schedules Airflow has and dagrun does not.
UNSUPPORTED_PRESETS = frozenset({"@continuous"})


class DAG(native.DAG):
    """Airflow's DAG (2.x defaults: daily without a schedule, catchup on)."""

    context_names = ALL_CONTEXT_NAMES

    default_schedule: Any = timedelta(days=1)
    default_catchup = True

    def __init__(
        self,
        dag_id: str | None = None,
        description: str | None = None,
        schedule: Any = _NOT_SET,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        default_args: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        catchup: bool | None = None,
        max_active_runs: int = 16,
        max_active_tasks: int | None = None,
        dagrun_timeout: timedelta | None = None,
        on_success_callback: Any = None,
        on_failure_callback: Any = None,
        doc_md: str | None = None,
        tags: Iterable[str] | None = None,
        is_paused_upon_creation: bool | None = None,
        template_searchpath: str | Iterable[str] | None = None,
        render_template_as_native_obj: bool = False,
        user_defined_macros: Mapping[str, Any] | None = None,
        user_defined_filters: Mapping[str, Callable[..., Any]] | None = None,
        *,
        schedule_interval: Any = _NOT_SET,
        timetable: Any = None,
        concurrency: int | None = None,
        **ignored: Any,
    ):
        if not dag_id:
            raise DagDefinitionError("a DAG needs a dag_id")
        unknown = sorted(set(ignored) - IGNORED)
        if unknown:
            raise DagDefinitionError(f"invalid argument {unknown[0]!r}", dag_id=dag_id)
        self.airflow_default_args = dict(default_args or {})
        start = start_date or self.airflow_default_args.get("start_date")
        super().__init__(
            dag_id,
            schedule=self._schedule(dag_id, schedule, schedule_interval, timetable),
            start_date=start,
            end_date=end_date or self.airflow_default_args.get("end_date"),
            timezone=zone_name(start.tzinfo) if isinstance(start, datetime) else "UTC",
            catchup=self.default_catchup if catchup is None else catchup,
            max_active_runs=max_active_runs,
            tags=tags or (),
            params=params,
            description=description,
            is_paused_upon_creation=bool(is_paused_upon_creation),
            dagrun_timeout=dagrun_timeout,
            max_active_tasks=max_active_tasks or concurrency,
            on_failure_callback=on_failure_callback,
            on_success_callback=on_success_callback,
        )
        self.doc_md = doc_md
        self.template_searchpath = _search_path(template_searchpath, self.fileloc)
        self.render_template_as_native_obj = bool(render_template_as_native_obj)
        self.user_defined_macros = dict(user_defined_macros or {})
        self.user_defined_filters = dict(user_defined_filters or {})
        for name, value in sorted(ignored.items()):
            if value is not None and value is not False:
                self.warn(f"{name}: accepted but not acted on by dagrun")

    @property
    def task_ids(self) -> list[str]:
        return list(self.tasks)

    @property
    def task_dict(self) -> dict[str, Any]:
        return self.tasks

    def get_task(self, task_id: str) -> Any:
        if task_id not in self.tasks:
            raise KeyError(f"task {task_id!r} not found in DAG '{self.dag_id}'")
        return self.tasks[task_id]

    def _schedule(self, dag_id: str, schedule: Any, interval: Any, timetable: Any) -> Any:
        """The one schedule of ``schedule``, Airflow 2's ``schedule_interval`` and
        ``timetable``; the line's default when none is given."""
        given = [v for v in (schedule, interval) if v is not _NOT_SET]
        if timetable is not None:
            given.append(timetable)
        if len(given) > 1:
            raise DagDefinitionError(
                "give one of schedule, schedule_interval and timetable", dag_id=dag_id
            )
        chosen = given[0] if given else self.default_schedule
        if isinstance(chosen, str) and chosen.strip() in UNSUPPORTED_PRESETS:
            raise DagDefinitionError(
                f"schedule {chosen!r} is not provided by dagrun", dag_id=dag_id
            )
        if type(chosen).__name__ == "relativedelta":
            raise DagDefinitionError(
                f"schedule {chosen!r}: a relativedelta is not provided by dagrun (use cron)",
                dag_id=dag_id,
            )
        return chosen


class SdkDAG(DAG):
    """Airflow 3's DAG (``airflow.sdk``): no schedule and no catchup by default, and a cron
    string (or preset) is a trigger schedule, as Airflow 3's default
    ``create_cron_data_intervals=False`` makes it: a run at each fire time, whose logical
    date is that time."""

    default_schedule = None
    default_catchup = False

    def _schedule(self, dag_id: str, schedule: Any, interval: Any, timetable: Any) -> Any:
        chosen = super()._schedule(dag_id, schedule, interval, timetable)
        if isinstance(chosen, str) and chosen.strip() != "@once":
            return CronTrigger(chosen)
        return chosen


def zone_name(zone: tzinfo | None) -> str:
    """The IANA name of a start date's time zone (pendulum's, zoneinfo's, UTC)."""
    if zone is None:
        return "UTC"
    for attribute in ("key", "name", "zone"):
        name = getattr(zone, attribute, None)
        if isinstance(name, str) and ("/" in name or name in ("UTC", "GMT")):
            return name
    offset = zone.utcoffset(None)
    if offset == timedelta(0):
        return "UTC"
    if offset is not None and offset % timedelta(hours=1) == timedelta(0):
        hours = int(offset / timedelta(hours=1))
        return f"Etc/GMT{-hours:+d}"
    raise DagDefinitionError(f"start_date's time zone {zone!r} has no IANA name")


def _search_path(value: str | Iterable[str] | None, fileloc: str | None) -> list[str]:
    """Where template files are looked for after the DAG file's folder; relative folders
    are taken from the DAG file's."""
    folders = [value] if isinstance(value, str) else list(value or [])
    base = os.path.dirname(fileloc) if fileloc else os.getcwd()
    return [os.path.join(base, folder) for folder in folders]


def dag(function: Callable[..., Any] | None = None, **arguments: Any) -> Any:
    """``@dag`` or ``@dag(schedule=..., ...)``: calling the decorated function builds the
    DAG (id: the function's name, unless ``dag_id``; doc: its docstring). Its parameters
    are the DAG's params (their defaults, overridden by the call's arguments), and inside
    it each stands for the run's value when passed to a task."""
    return _decorate(function, arguments, DAG)


def sdk_dag(function: Callable[..., Any] | None = None, **arguments: Any) -> Any:
    """``@dag`` of ``airflow.sdk``: as ``dag``, with Airflow 3's defaults."""
    return _decorate(function, arguments, SdkDAG)


def _decorate(function: Callable[..., Any] | None, arguments: dict, kind: type[DAG]) -> Any:
    if function is None:
        return lambda f: _decorate(f, arguments, kind)

    @functools.wraps(function)
    def build(*args: Any, **kwargs: Any) -> DAG:
        signature = inspect.signature(function)
        bound = signature.bind_partial(*args, **kwargs)
        declared = {
            name: bound.arguments.get(name, p.default)
            for name, p in signature.parameters.items()
            if name in bound.arguments or p.default is not p.empty
        }
        params = {**declared, **arguments.get("params", {})}
        options = {**arguments, "params": params}
        options.setdefault("dag_id", function.__name__)
        options.setdefault("doc_md", function.__doc__)
        with kind(**options) as made:
            function(**{name: ParamRef(name, value) for name, value in declared.items()})
        return made

    return build
