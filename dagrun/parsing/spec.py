"""Serialised DAGs: what the parser stores and what the scheduler and workers read.

A ``DagSpec`` is plain data (JSON in the store), so the scheduler never imports user code
and a worker only imports the one file whose task it runs. Tasks are kept in a stable
topological order (definition order breaks ties), which every view of a DAG reuses.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable

    import networkx as nx

    from dagrun.authoring.assets import ConditionData
    from dagrun.authoring.sensor_options import ExternalMarker, SensorSpec

from dagrun.parsing.scopes import (
    SetupScope,
    relevant_setups,
    setup_dependants,
    setup_scopes,
)
from dagrun.states import TriggerRule
from dagrun.timing.schedules import SCHEDULE_TYPES
from dagrun.timing.timetable import (
    DataInterval,
    Expansion,
    TimeSchedule,
    Timetable,
    make_timetable,
)


class FileWarning(NamedTuple):
    """Something a DAG file asks for that dagrun accepts without acting on it (an Airflow
    argument it ignores), and the line of the file that asked; a file's warnings are kept
    with it in the store (``dags errors --warnings``, the web page)."""

    line: int | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "message": self.message}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileWarning:
        return cls(data.get("line"), str(data["message"]))


@dataclass(frozen=True)
class TaskSpec:
    """A task as the scheduler and workers see it: plain data, no user code."""

    task_id: str
    kind: str
    upstream: tuple[str, ...]
    trigger_rule: str = TriggerRule.ALL_SUCCESS.value
    retries: int = 0
    retry_delay: float = 10.0
    retry_exponential_backoff: bool = True
    max_retry_delay: float = 600.0
    execution_timeout: float | None = None
    depends_on_past: bool = False
    priority_weight: int = 1
    pool: str | None = None
    #: The task group it belongs to, as the ids of the nested groups joined by dots
    #: (``outer.inner``); None outside any. Only views read it, to draw the groups.
    group: str | None = None
    data_inputs: tuple[str, ...] = ()
    #: The events (``CallbackEvent`` values) this task has callbacks for.
    callbacks: tuple[str, ...] = ()
    #: ``"branch"`` or ``"short_circuit"`` for a task whose value picks its downstream.
    choice: str | None = None
    #: A mapped task's expanded arguments, each ``(argument, upstream task id or None,
    #: length of a literal list or None)``; empty for a task that is not mapped.
    mapped: tuple[tuple[str, str | None, int | None], ...] = ()
    #: The assets a success of this task produces a partition of (``outlets``).
    outlets: tuple[str, ...] = ()
    #: A sensor's options (``@task.sensor``, ``dagrun.runtime.sensors``); None for other tasks.
    sensor: SensorSpec | None = None
    #: A setup task (``as_setup``, ``@setup``): the work in its scope needs it to succeed.
    is_setup: bool = False
    #: A teardown task (``as_teardown``, ``@teardown``): runs once its upstream finished
    #: and one of its setups succeeded; its failure fails the run only with
    #: ``on_failure_fail_dagrun``.
    is_teardown: bool = False
    on_failure_fail_dagrun: bool = False
    #: A short-circuit's reach when it returns a falsy value: everything downstream (True),
    #: or its direct downstream tasks only, the tasks after them following their rules.
    ignore_downstream_trigger_rules: bool = True
    #: What an external task marker points at (clearing it follows there); None otherwise.
    marker: ExternalMarker | None = None

    @property
    def max_tries(self) -> int:
        return self.retries + 1


@dataclass(frozen=True)
class DagSpec:
    """A DAG as parsed: its schedule and its tasks in topological order, stored as JSON."""

    dag_id: str
    fileloc: str
    #: A cron string or preset, seconds (a timedelta), a schedule object's data
    #: (``dagrun.timing.schedules``) or None.
    schedule: str | float | dict[str, Any] | None
    timezone: str
    start_date: str | None
    end_date: str | None
    catchup: bool
    max_active_runs: int
    tasks: tuple[TaskSpec, ...]
    tags: tuple[str, ...] = ()
    description: str | None = None
    is_paused_upon_creation: bool = False
    spread_seconds: float | None = None
    line: int | None = None
    #: Declared params as ``{name: {"default": value, "schema": {...}, "description": str |
    #: None}}``, with no ``"default"`` when the run's conf must give one (dagrun.authoring.params).
    params: dict[str, dict] = field(default_factory=dict, compare=False)
    #: A cron schedule's parsed fields, so readers of the spec need not import croniter.
    cron: Expansion | None = None
    #: Seconds a run may stay unfinished after it started before it is failed.
    dagrun_timeout: float | None = None
    #: Task instances of this DAG running at once, across its runs and all workers.
    max_active_tasks: int | None = None
    #: The run events (``CallbackEvent`` values) this DAG has callbacks for.
    callbacks: tuple[str, ...] = ()
    #: The assets the DAG is scheduled on: a run per partition key they all have.
    assets: tuple[str, ...] = ()
    #: Labelled edges, each (upstream id, downstream id, label): shown, never decided on.
    edge_labels: tuple[tuple[str, str, str], ...] = ()
    #: An Airflow-style asset condition (``authoring.assets.ConditionData``): a run when it
    #: holds over the assets with new events, whatever their keys; None for none.
    condition: ConditionData | None = None

    @cached_property
    def timetable(self) -> Timetable:
        return make_timetable(
            _schedule_value(self.schedule),
            self.timezone,
            self.start_date,
            self.end_date,
            self.cron,
        )

    @cached_property
    def task_map(self) -> dict[str, TaskSpec]:
        return {t.task_id: t for t in self.tasks}

    @cached_property
    def downstream(self) -> dict[str, tuple[str, ...]]:
        """Each task's direct downstream tasks, in topological order: what may become ready
        when it ends (``runs.advance_runs`` decides those only)."""
        found: dict[str, list[str]] = {t.task_id: [] for t in self.tasks}
        for t in self.tasks:
            for up in t.upstream:
                found[up].append(t.task_id)
        return {task_id: tuple(ids) for task_id, ids in found.items()}

    @cached_property
    def labels(self) -> dict[tuple[str, str], str]:
        """Each labelled edge's label, by (upstream id, downstream id)."""
        return {(up, down): label for up, down, label in self.edge_labels}

    @cached_property
    def position(self) -> dict[str, int]:
        """Each task's place in ``tasks``, which is topological order."""
        return {t.task_id: i for i, t in enumerate(self.tasks)}

    @cached_property
    def mapped_ids(self) -> frozenset[str]:
        """The mapped tasks: readiness expands them instead of queueing them."""
        return frozenset(t.task_id for t in self.tasks if t.mapped)

    @cached_property
    def choice_ids(self) -> frozenset[str]:
        """The branch and short-circuit tasks, whose values readiness reads."""
        return frozenset(t.task_id for t in self.tasks if t.choice)

    @cached_property
    def setup_ids(self) -> frozenset[str]:
        """The setup tasks. Empty for most DAGs: readiness, run ends and clearing look at
        setups and teardowns only when it is not (``dagrun.parsing.scopes``)."""
        return frozenset(t.task_id for t in self.tasks if t.is_setup)

    @cached_property
    def teardown_ids(self) -> frozenset[str]:
        return frozenset(t.task_id for t in self.tasks if t.is_teardown)

    @cached_property
    def quiet_teardowns(self) -> frozenset[str]:
        """The teardowns whose failure does not fail the run (no ``on_failure_fail_dagrun``)."""
        return frozenset(
            t.task_id for t in self.tasks if t.is_teardown and not t.on_failure_fail_dagrun
        )

    @cached_property
    def relevant_setups(self) -> dict[str, tuple[str, ...]]:
        """The setups whose scope each task is in (``dagrun.parsing.scopes``)."""
        return relevant_setups(self)

    @cached_property
    def setup_scopes(self) -> dict[str, SetupScope]:
        """The setups each task's readiness also reads, for the tasks that have any."""
        return setup_scopes(self)

    @cached_property
    def setup_dependants(self) -> dict[str, tuple[str, ...]]:
        """The tasks each setup's end may make ready beside its direct downstream tasks."""
        return setup_dependants(self)

    @cached_property
    def has_outlets(self) -> bool:
        """Whether a task produces an asset: a group commit looks no further otherwise."""
        return any(t.outlets for t in self.tasks)

    @cached_property
    def has_task_callbacks(self) -> bool:
        """Whether any task has a callback: a group commit looks no further into the
        outcomes of a DAG without one."""
        return any(t.callbacks for t in self.tasks)

    def next_interval(
        self, cursor: datetime | None, now: datetime, latest_run: datetime | None = None
    ) -> DataInterval | None:
        """The interval of the next run the scheduler will really create (its logical date
        is the start; it is due at the end): after its cursor (or from the start date) and
        after ``latest_run``, the DAG's latest scheduled or backfilled run (a backfill ahead
        of the cursor leaves nothing for the scheduler to create before it); with
        catchup=False the latest complete interval when some were missed. ``dags list`` and
        the web page both show this. A trigger schedule with no start_date begins where
        the scheduler would begin it now (``Timetable.first_cursor``)."""
        if cursor is None and latest_run is None:
            cursor = self.timetable.first_cursor(now)
        if latest_run is not None:
            past_latest = latest_run + timedelta(microseconds=1)
            cursor = past_latest if cursor is None else max(cursor, past_latest)
        if not self.catchup:
            missed = self.timetable.due_intervals(cursor, now, catchup=False)
            if missed:
                return missed[0]
        after = cursor - timedelta(microseconds=1) if cursor else None
        return self.timetable.next_interval(after)

    @cached_property
    def condition_assets(self) -> tuple[str, ...]:
        """The assets the DAG's condition names (none without one)."""
        if self.condition is None:
            return ()
        from dagrun.authoring.assets import condition_assets

        return condition_assets(self.condition)

    @property
    def schedule_text(self) -> str:
        """The schedule in words; for a DAG scheduled on assets, the assets it waits for
        (``a, b`` per partition key, ``a & (b | c)`` for a condition)."""
        if self.assets:
            text = "assets: " + ", ".join(self.assets)
        elif self.condition is not None:
            from dagrun.authoring.assets import condition_text

            text = "assets: " + condition_text(self.condition)
            if self.timetable.schedulable:
                text += f" or {self.timetable.description}"
        else:
            return self.timetable.description
        return text if len(text) <= 250 else text[:246] + " ..."

    def graph(self) -> nx.DiGraph:
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(t.task_id for t in self.tasks)
        graph.add_edges_from((up, t.task_id) for t in self.tasks for up in t.upstream)
        return graph

    def descendants(self, task_ids: set[str]) -> set[str]:
        """The given tasks and everything downstream of them."""
        found = set(task_ids)
        for t in self.tasks:
            if any(up in found for up in t.upstream):
                found.add(t.task_id)
        return found

    def to_json(self) -> str:
        """The spec as the registry stores it (keys sorted, so equal specs hash equal)."""
        return self._json

    @cached_property
    def _json(self) -> str:
        data = {name: _plain(getattr(self, name)) for name in _DAG_FIELDS}
        data["tasks"] = [_sparse(task) for task in self.tasks]
        return json.dumps(data, sort_keys=True, default=str)

    @cached_property
    def digest(self) -> str:
        """``digest_of`` its JSON, stored beside it."""
        return digest_of(self.to_json())

    @classmethod
    def from_wire(cls, text: str) -> DagSpec:
        """A spec a parse child sent as its ``to_json`` text. The text is kept as the spec's
        own, so the parent stores it without serialising the spec a second time, and the
        spec is what ``spec_from`` gives for that text in this process: a ``dags list``
        that registered its files reads them back without decoding them again."""
        spec = cls.from_json(text)
        spec.__dict__["_json"] = text
        _DECODED[spec.digest] = spec
        return spec

    @classmethod
    def from_json(cls, text: str) -> DagSpec:
        data = json.loads(text)
        tasks = tuple(_task_from(t) for t in data.pop("tasks"))
        data["callbacks"] = tuple(data.get("callbacks", ()))
        data["assets"] = tuple(data.get("assets", ()))
        data["edge_labels"] = tuple(tuple(e) for e in data.get("edge_labels", ()))
        cron = data.get("cron")
        if cron is not None:
            data["cron"] = tuple(tuple(values) for values in cron)
        data["params"] = {k: _declared(v) for k, v in data.get("params", {}).items()}
        return cls(**{**data, "tags": tuple(data.get("tags", ())), "tasks": tasks})


def _task_from(stored: dict[str, Any]) -> TaskSpec:
    """A stored task (``_sparse``) as its TaskSpec: the defaults, then what was stored, its
    lists as tuples and its options as their types. Made without ``__init__``, which sets
    each of the two dozen fields of a frozen dataclass through ``object.__setattr__``: that
    was most of decoding a spec. TaskSpec has no ``__post_init__`` to skip (a test keeps it
    so)."""
    values = dict(_TASK_INITIAL)
    for name, value in stored.items():
        decode = _TASK_DECODERS.get(name)
        values[name] = value if decode is None else decode(value)
    task = object.__new__(TaskSpec)
    task.__dict__.update(values)
    return task


def _sensor(stored: list) -> SensorSpec:
    """A stored sensor's options: the authoring modules that define them are imported only
    by a reader of a spec that has some (a ``dags list`` of plain DAGs imports none of the
    authoring API)."""
    from dagrun.authoring.sensor_options import SensorSpec

    return SensorSpec(*stored)


def _marker(stored: list) -> ExternalMarker:
    from dagrun.authoring.sensor_options import ExternalMarker

    return ExternalMarker(*stored)


_TASK_DECODERS: dict[str, Callable[[Any], Any]] = {
    "upstream": tuple,
    "data_inputs": tuple,
    "callbacks": tuple,
    "outlets": tuple,
    "mapped": lambda stored: tuple(tuple(m) for m in stored),
    "sensor": lambda stored: _sensor(stored) if stored else None,
    "marker": lambda stored: _marker(stored) if stored else None,
}


def _plain(value: Any) -> Any:
    """Dataclasses, tuples and dicts as JSON-ready dicts and lists: what ``asdict`` gives,
    without its deep copy of every leaf. Plain values are told by their exact type, and
    whether a type is a dataclass (and its field names) is worked out once per type: a spec
    holds hundreds of leaves, and this walk was most of what a parse child spends on a file
    after executing it."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind not in _FIELD_NAMES:
        _FIELD_NAMES[kind] = tuple(f.name for f in fields(kind)) if is_dataclass(kind) else None
    names = _FIELD_NAMES[kind]
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _sparse(task: TaskSpec) -> dict[str, Any]:
    """A task as stored: the fields that differ from their defaults (``from_json`` gives
    the others back). Most of a task's two dozen fields keep their defaults, and a spec
    stored in full was four times as long: longer to write, send, decode and keep."""
    return {
        name: _plain(value)
        for name, default in _TASK_DEFAULTS
        if (value := getattr(task, name)) != default
    }


#: Each task field and its default; a field with none is never equal to this mark: kept.
_REQUIRED = object()
_TASK_DEFAULTS = tuple(
    (f.name, _REQUIRED if f.default is MISSING else f.default) for f in fields(TaskSpec)
)
#: A spec's own fields, its tasks aside (``_sparse`` stores those).
_DAG_FIELDS = tuple(f.name for f in fields(DagSpec) if f.name != "tasks")
#: A decoded task's fields before what was stored: those with a default.
_TASK_INITIAL = {name: default for name, default in _TASK_DEFAULTS if default is not _REQUIRED}
_LEAVES = frozenset({str, int, float, bool, type(None)})
#: A dataclass's field names by type, None for a type that is not one (``_plain``).
_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _declared(param: Any) -> dict:
    """A stored param in the declared form; a spec stored before ``Param`` existed holds
    plain default values (its file has not changed since, so it was not parsed again)."""
    if isinstance(param, dict) and "schema" in param:
        return param
    return {"default": param, "schema": {}, "description": None}


def digest_of(spec_json: str) -> str:
    """The hash stored beside a spec's JSON, so caches can tell specs apart cheaply."""
    import hashlib  # a spec is hashed where it is made, not where it is read

    return hashlib.sha1(spec_json.encode()).hexdigest()


_DECODED: dict[str, DagSpec] = {}


def spec_from(spec_hash: str, spec_json: str) -> DagSpec:
    """The spec stored as ``spec_json``, decoded once per process per ``spec_hash``: a tick
    or a page reads every DAG's spec, and few of them change."""
    found = _DECODED.get(spec_hash)
    if found is None:
        found = _DECODED[spec_hash] = DagSpec.from_json(spec_json)
    return found


def _schedule_value(schedule: str | float | dict[str, Any] | None) -> TimeSchedule:
    if isinstance(schedule, int | float):
        return timedelta(seconds=schedule)
    return schedule


def serialise_schedule(schedule: TimeSchedule) -> str | float | dict[str, Any] | None:
    """A DAG's time schedule as its spec keeps it (specs stored before schedule objects
    existed hold the same strings, seconds and None)."""
    if isinstance(schedule, timedelta):
        return schedule.total_seconds()
    if isinstance(schedule, SCHEDULE_TYPES):
        return schedule.to_data()
    return schedule


def iso_or_none(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
