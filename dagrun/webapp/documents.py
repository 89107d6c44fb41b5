"""The JSON documents the ``/api`` routes answer with, as TypedDicts.

They are the one statement of the API's shapes: each ``/api`` handler is annotated as
returning one of them, mypy checks that what it builds has exactly these keys and types, and
``openapi`` turns the same annotations into the JSON Schema of ``/api/openapi.json``, so the
description cannot drift from the responses. A state is a ``str`` for mypy and an enum in the
description (``Annotated[str, RunState]``); an ``Instant`` is written by ``iso`` alone.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from dagrun.states import AttemptOutcome, CallbackEvent, CallbackState, RunState, RunType, TaskState
from dagrun.timing.instants import Instant

TaskStateName = Annotated[str, TaskState]


class ErrorJson(TypedDict):
    """Every answer other than 200: what went wrong, and the HTTP status again."""

    error: str
    status: int


class RunJson(TypedDict):
    """A DAG run. ``duration`` is in seconds, None until it ends; ``conf`` is what it was
    triggered with (``{}`` for scheduled and backfill runs)."""

    run_id: str
    logical_date: Instant
    local_logical_date: Instant
    data_interval_start: Instant
    data_interval_end: Instant
    state: Annotated[str, RunState]
    run_type: Annotated[str, RunType]
    start_date: Instant | None
    end_date: Instant | None
    duration: float | None
    conf: dict[str, Any]


class DagJson(TypedDict):
    """A DAG as the DAG list shows it, with its next run (None: it will get none) and its
    newest runs."""

    dag_id: str
    description: str | None
    schedule: str
    timezone: str
    paused: bool
    active: bool
    import_error: str | None
    fileloc: str
    tags: list[str]
    tasks: list[str]
    next_logical_date: Instant | None
    local_next_logical_date: Instant | None
    next_due_at: Instant | None
    local_next_due_at: Instant | None
    recent_runs: list[RunJson]


class DagListJson(TypedDict):
    """The active DAGs and how many DAG files failed to import."""

    dags: list[DagJson]
    import_errors: int


class ImportErrorJson(TypedDict):
    file: str
    error: str
    line: int | None


class ImportWarningJson(TypedDict):
    file: str
    line: int | None
    message: str


class RunPageJson(TypedDict):
    """A page of runs, newest first; ``older_before`` is the ``before`` of the next page
    (None: there are no older runs)."""

    runs: list[RunJson]
    older_before: Instant | None


class AttemptJson(TypedDict):
    try_number: int
    worker: str
    outcome: Annotated[str, AttemptOutcome] | None
    started_at: Instant
    ended_at: Instant | None
    error: str | None
    log_url: str


class TaskInstanceJson(TypedDict):
    """A task instance of a run (``map_index`` -1 unless mapped), with its attempts; a task
    the run has no instance of yet is ``none`` with try 0."""

    task_id: str
    map_index: int
    state: TaskStateName
    try_number: int
    max_tries: int
    start_date: Instant | None
    end_date: Instant | None
    duration: float | None
    error: str | None
    removed: bool
    attempts: list[AttemptJson]


class CallbackJson(TypedDict):
    """A callback the run fired: of a task instance (``task_id`` set) or of the run."""

    event: Annotated[str, CallbackEvent]
    state: Annotated[str, CallbackState]
    task_id: str | None
    map_index: int
    try_number: int | None
    created_at: Instant
    ended_at: Instant | None
    error: str | None
    callback_error: str | None
    log_url: str | None


class RunDetailJson(RunJson):
    """A run with each of its task instances and the callbacks it fired."""

    tasks: list[TaskInstanceJson]
    callbacks: list[CallbackJson]


class GridCellJson(TypedDict):
    """A task's cell in one run; a mapped task's cell counts its instances by state."""

    run_id: str
    state: TaskStateName
    try_number: int
    max_tries: int
    duration: float | None
    counts: NotRequired[dict[str, int]]


class GridIndexJson(TypedDict):
    map_index: int
    cells: list[GridCellJson]


class GridTaskJson(TypedDict):
    """A task's row; a mapped task has its ``indexes`` when ``?expand=`` names it."""

    task_id: str
    removed: bool
    group: str | None
    mapped: bool
    cells: list[GridCellJson]
    indexes: NotRequired[list[GridIndexJson]]


class GroupCellJson(TypedDict):
    run_id: str
    state: TaskStateName
    counts: dict[str, int]


class GridGroupJson(TypedDict):
    """A task group's row: its cells add its tasks up per run."""

    group: str
    parent: str | None
    cells: list[GroupCellJson]


class GridPageJson(TypedDict):
    """Where this page of runs sits: pass ``older_before`` or ``newer_before`` as
    ``?before=`` for the next page."""

    runs: int
    before: Instant | None
    older_before: Instant | None
    has_newer: bool
    newer_before: Instant | None


class GridJson(TypedDict):
    """The grid: its runs (oldest first), a row per task and per task group."""

    dag_id: str
    timezone: str
    runs: list[RunJson]
    tasks: list[GridTaskJson]
    groups: list[GridGroupJson]
    page: GridPageJson


class GraphNodeJson(TypedDict):
    task_id: str
    layer: int
    x: int
    y: int
    width: int
    height: int
    mapped: bool
    state: TaskStateName


class GraphGroupJson(TypedDict):
    group: str
    x: int
    y: int
    width: int
    height: int


class GraphPictureJson(TypedDict):
    """What the graph page draws, in its coordinates: boxes, arrows (upstream, downstream)
    and group frames."""

    width: int
    height: int
    nodes: list[GraphNodeJson]
    edges: list[tuple[str, str]]
    groups: list[GraphGroupJson]


class GraphJson(GraphPictureJson):
    """The DAG's graph, its boxes coloured by run ``run_id`` (None: by no run)."""

    dag_id: str
    run_id: str | None


class AssetEventJson(TypedDict):
    partition_key: str
    fingerprint: str | None
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    created_at: Instant


class AwaitedJson(TypedDict):
    """An asset the DAG is scheduled on: its latest event and when the DAG consumed one."""

    name: str
    latest_event: AssetEventJson | None
    status: str
    consumed_event_at: Instant | None


class ProducedJson(TypedDict):
    """An asset the DAG's tasks produce, and its latest event by anyone."""

    name: str
    tasks: list[str]
    latest_event: AssetEventJson | None


class DagAssetsJson(TypedDict):
    dag_id: str
    waits_for: list[AwaitedJson]
    produces: list[ProducedJson]


class LogTailJson(TypedDict):
    """What an attempt's log holds after byte ``?offset=``: ``text``, after ``skipped``
    bytes left out (more than one answer carries); ``offset`` is where the next read starts.
    ``running`` is false once the attempt has ended; ``found`` says whether its output is on
    this host."""

    text: str
    offset: int
    skipped: int
    running: bool
    found: bool
