"""Importing a DAG file in this process and freezing its DAGs into specs.

A parse child (``dagrun.parsing.parser``), a worker child running an attempt and ``dagrun tasks
test`` import files through here. The processes that only orchestrate (a command's parent,
the scheduler, a worker's parent) never import this module, so they do not pay for the
authoring API it loads (``dagrun.authoring.dag``, ``tasks`` and what they need).
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import linecache
import os
import resource
import sys
import sysconfig
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from dagrun import settings
from dagrun.authoring.dag import DAG, collect_dags
from dagrun.authoring.options import TASK_CALLBACKS
from dagrun.authoring.tasks import TaskOutput
from dagrun.errors import DagFileError
from dagrun.parsing import airflow_alias
from dagrun.parsing.spec import (
    DagSpec,
    FileWarning,
    TaskSpec,
    iso_or_none,
    serialise_schedule,
)
from dagrun.states import TriggerRule
from dagrun.timing.timetable import CronTimetable


def module_name(path: str) -> str:
    """A unique, stable module name per file, so two ``utils.py`` never collide."""
    return "dagrun_file_" + hashlib.sha1(path.encode()).hexdigest()[:16]


def import_file(path: str, source: str | None = None) -> list[DAG]:
    """Import one DAG file in this process and return the DAGs it built; with ``source``,
    run that text as the file (its last good version) instead of what is on disk. Its
    ``import airflow...`` gets dagrun's compatibility package (``airflow_alias``)."""
    import importlib.util

    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    airflow_alias.install()
    dags = collect_dags()
    spec = importlib.util.spec_from_file_location(module_name(path), path)
    assert spec is not None and spec.loader is not None  # a .py path has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    if source is None:
        linecache.cache.pop(path, None)  # a last good version's text, seeded below
        spec.loader.exec_module(module)
    else:
        # The text run is not the file's: seeded so that tracebacks and the source of its
        # functions (a virtualenv task's, sent to its interpreter) are the text that ran.
        # Without a modification time, linecache keeps it until a fresh import drops it.
        lines = source.splitlines(keepends=True)
        linecache.cache[path] = (len(source), None, lines, path)
        exec(compile(source, path, "exec"), module.__dict__)
    return list(dags)


def build_spec(dag: DAG, path: str) -> DagSpec:
    """Check the graph (cycles) and freeze a DAG into its serialisable spec."""
    if not dag.tasks:
        raise DagFileError(
            path,
            f"DAG '{dag.dag_id}' has no tasks (a @task function only becomes a task when it is "
            "called inside the `with DAG(...)` block)",
            dag.definition_line,
        )
    ordered = _in_order(dag)
    if len(ordered) < len(dag.tasks):
        raise DagFileError(
            path, f"DAG '{dag.dag_id}' has a cycle: {_cycle(dag)}", dag.definition_line
        )
    _check_setups(dag, path)
    tasks = tuple(_task_spec(dag.tasks[task_id]) for task_id in ordered)
    tt = dag.timetable
    return DagSpec(
        dag_id=dag.dag_id,
        fileloc=path,
        schedule=serialise_schedule(dag.schedule),
        timezone=dag.timezone,
        start_date=iso_or_none(tt.start),
        end_date=iso_or_none(tt.end),
        catchup=dag.catchup,
        max_active_runs=dag.max_active_runs,
        tasks=tasks,
        tags=tuple(dag.tags),
        description=dag.description,
        is_paused_upon_creation=dag.is_paused_upon_creation,
        spread_seconds=dag.spread.total_seconds() if dag.spread else None,
        line=dag.definition_line,
        params=dag.params,
        cron=tt.expansion if isinstance(tt, CronTimetable) else None,
        dagrun_timeout=dag.dagrun_timeout,
        max_active_tasks=dag.max_active_tasks,
        callbacks=tuple(event.value for event, found in dag.callbacks.items() if found),
        assets=dag.assets,
        edge_labels=tuple(
            (up, down, label)
            for (up, down), label in sorted(dag.edge_labels.items())
            if up in dag.tasks[down].upstream_ids
        ),
        condition=dag.condition,
    )


def _task_spec(task) -> TaskSpec:
    o = task.options
    return TaskSpec(
        task_id=task.task_id,
        kind=task.kind,
        upstream=tuple(task.upstream_ids),
        trigger_rule=o["trigger_rule"],
        retries=o["retries"],
        retry_delay=float(o["retry_delay"]),
        retry_exponential_backoff=bool(o["retry_exponential_backoff"]),
        max_retry_delay=float(o["max_retry_delay"]),
        execution_timeout=o["execution_timeout"],
        depends_on_past=bool(o["depends_on_past"]),
        priority_weight=int(o["priority_weight"]),
        pool=o["pool"],
        group=task.group,
        data_inputs=tuple(task.data_inputs),
        callbacks=tuple(event.value for name, event in TASK_CALLBACKS.items() if o[name]),
        choice=getattr(task, "choice", None),
        mapped=tuple(_map_source(n, v) for n, v in getattr(task, "mapped", {}).items()),
        outlets=tuple(o["outlets"] or ()),
        sensor=getattr(task, "sensor", None),
        is_setup=task.is_setup,
        is_teardown=task.is_teardown,
        on_failure_fail_dagrun=task.on_failure_fail_dagrun,
        ignore_downstream_trigger_rules=getattr(task, "ignore_downstream_trigger_rules", True),
        marker=getattr(task, "marker", None),
    )


def _in_order(dag: DAG) -> list[str]:
    """The tasks in topological order, ties broken by the order they were declared in
    (Kahn's algorithm on a heap: what ``networkx.lexicographical_topological_sort`` gives,
    without importing networkx into every parse child, where it was most of the start-up);
    the tasks of a cycle are left out."""
    order = {task_id: i for i, task_id in enumerate(dag.tasks)}
    downstream: dict[str, list[str]] = {task_id: [] for task_id in dag.tasks}
    waiting = dict.fromkeys(dag.tasks, 0)
    for task in dag.tasks.values():
        for up in set(task.upstream_ids):
            downstream[up].append(task.task_id)
            waiting[task.task_id] += 1
    ready = [(order[t], t) for t, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, task_id = heapq.heappop(ready)
        ordered.append(task_id)
        for down in downstream[task_id]:
            waiting[down] -= 1
            if not waiting[down]:
                heapq.heappush(ready, (order[down], down))
    return ordered


def _cycle(dag: DAG) -> str:
    """A cycle of the graph, as ``a -> b -> a`` (networkx finds it: only a file in error
    pays for importing it)."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(dag.tasks)
    for task in dag.tasks.values():
        graph.add_edges_from((up, task.task_id) for up in task.upstream_ids)
    cycle = nx.find_cycle(graph)
    return " -> ".join([edge[0] for edge in cycle] + [cycle[0][0]])


def _check_setups(dag: DAG, path: str) -> None:
    """A task directly after a setup is a teardown or keeps ``all_success`` (Airflow's
    ``DAG.validate_setup_teardown``): it is in the setup's scope, and clearing a task
    further down runs the setup again before it, which another rule would not wait for."""
    for task in dag.tasks.values():
        if task.is_teardown or task.trigger_rule == TriggerRule.ALL_SUCCESS:
            continue
        setups = [u for u in task.upstream_ids if dag.tasks[u].is_setup]
        if setups:
            raise DagFileError(
                path,
                f"DAG '{dag.dag_id}': task '{task.task_id}' comes right after setup task "
                f"'{setups[0]}', so its trigger rule must be all_success, not "
                f"{task.trigger_rule} (or make it a teardown)",
                dag.definition_line,
            )


def _map_source(name: str, value: Any) -> tuple[str, str | None, int | None]:
    """What a mapped argument maps over, as the spec keeps it: an upstream task's output, or
    a literal list of known length."""
    if isinstance(value, TaskOutput):
        return name, value.task.task_id, None
    return name, None, len(value)


class LoadedFile(NamedTuple):
    """What importing one file gave: its DAGs' specs and its warnings (what its DAGs accepted
    without acting on, once each, in line order), or the error that stopped it (and then
    no specs and no warnings: a file that does not load is its error)."""

    specs: list[DagSpec]
    error: DagFileError | None
    warnings: list[FileWarning]


def load(path: str) -> LoadedFile:
    """Import and check one file, turning any failure into a ``DagFileError``."""
    try:
        dags = import_file(path)
        specs = [build_spec(dag, path) for dag in dags]
        _check_unique_ids(specs, path)
        return LoadedFile(specs, None, file_warnings(dags))
    except DagFileError as exc:
        return LoadedFile([], exc, [])
    except SyntaxError as exc:
        if exc.filename == path:
            return LoadedFile([], DagFileError(path, f"syntax error: {exc.msg}", exc.lineno), [])
        where = f"{exc.filename}:{exc.lineno}" if exc.lineno else exc.filename
        error = DagFileError(path, f"syntax error in {where}: {exc.msg}", _line_in(path, exc))
        return LoadedFile([], error, [])
    except BaseException as exc:  # a DAG file may raise anything, SystemExit included
        return LoadedFile([], DagFileError(path, _describe(exc), _line_in(path, exc)), [])


def load_file(path: str) -> tuple[list[DagSpec], DagFileError | None]:
    """``load`` without the warnings: a file's specs, or its error."""
    specs, error, _ = load(path)
    return specs, error


def file_warnings(dags: list[DAG]) -> list[FileWarning]:
    """The warnings of a file's DAGs, each message once (the first line that gave it), in
    line order (those without a line last): two DAGs of one file that ignore the same
    argument make one warning of the file."""
    found: dict[str, FileWarning] = {}
    for dag in dags:
        for line, message in dag.warnings:
            found.setdefault(message, FileWarning(line, message))
    return sorted(found.values(), key=lambda w: (w.line is None, w.line or 0))


def _check_unique_ids(specs: list[DagSpec], path: str) -> None:
    """One file defining a dag_id twice is a mistake (a loop, a copy), not a silent override."""
    lines: dict[str, int | None] = {}
    for spec in specs:
        if spec.dag_id in lines:
            raise DagFileError(
                path,
                f"DAG id '{spec.dag_id}' is defined twice in this file "
                f"(lines {lines[spec.dag_id]} and {spec.line})",
                spec.line,
            )
        lines[spec.dag_id] = spec.line


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if isinstance(exc, MemoryError):
        return f"MemoryError: the import needs more than DAGRUN_PARSE_MEMORY_MB={PARSE_MEMORY_MB}"
    if name in ("DagDefinitionError", "ScheduleError"):
        return text
    return f"{name}: {text}" if text else name


def _line_in(path: str, exc: BaseException) -> int | None:
    """The deepest traceback line that lies in the DAG file itself."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == path:
            line = frame.lineno
    return line


@contextmanager
def isolated(path: str) -> Iterator[list[str]]:
    """Undo what importing ``path`` did to ``sys.path`` and ``sys.modules``.

    Parse children and worker children import many files, so without this a second
    ``import utils`` from another folder would get the first folder's cached ``utils``, and a
    file could import helpers that only an earlier file's folder holds. Library modules stay
    cached (fast). A worker runs each attempt inside this too, so a task that imports a
    helper lazily finds its own folder's. The list it yields names, once the block is over,
    the files of the modules imported meanwhile that are not Python's or installed
    libraries: the file's helpers, whose edits must parse the file again.
    """
    folder = os.path.dirname(path)
    saved_path = list(sys.path)
    mark = _mark_modules()
    sys.path.insert(0, folder)
    helpers: list[str] = []
    try:
        yield helpers
    finally:
        sys.path[:] = saved_path
        imported = _imported_since(mark)
        helpers.extend(_helper_files(imported, path))
        _forget(imported, path, folder + os.sep)


_LIBRARIES = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def _helper_files(names: list[str], path: str) -> list[str]:
    """The source files of the named modules, less ``path`` and Python's own and installed
    libraries (a parse loads pandas once; it is not a helper)."""
    files = []
    for name in names:
        origin = getattr(sys.modules.get(name), "__file__", None)
        if origin and not origin.startswith(_LIBRARIES):
            origin = os.path.abspath(origin)
            if origin != path:
                files.append(origin)
    return files


class _ModulesMark(NamedTuple):
    """How many modules were imported, and the newest of them (name and module)."""

    size: int
    newest: str
    module: object


def _mark_modules() -> _ModulesMark:
    """Remember where ``sys.modules`` ends. Imports add to that dict in order, so what follows
    the mark later is what was imported since: no copy of its ~1000 names is needed, which
    matters as every attempt of a worker runs in ``isolated``."""
    newest = next(reversed(sys.modules))
    return _ModulesMark(len(sys.modules), newest, sys.modules[newest])


def _imported_since(mark: _ModulesMark) -> list[str]:
    """The modules imported after ``mark``. If modules from before it were removed too, old
    and new can no longer be told apart, and every module is returned (``_forget`` still
    drops only the file's own and its folder's)."""
    unchanged = len(sys.modules) == mark.size and next(reversed(sys.modules)) == mark.newest
    if unchanged and sys.modules[mark.newest] is mark.module:
        return []  # nothing imported: most attempts
    names = list(sys.modules)
    in_place = len(names) >= mark.size and names[mark.size - 1] == mark.newest
    if in_place and sys.modules[mark.newest] is mark.module:
        return names[mark.size :]
    return names


def _forget(names: list[str], path: str, folder: str) -> None:
    """Drop the file's own module and the helpers imported from its folder (or below)."""
    if not names:
        return
    own = module_name(path)
    for name in names:
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if name == own or origin.startswith(folder):
            del sys.modules[name]


#: Memory (heap and private mappings) an import may add to what the parse child starts with:
#: a file whose import needs more is an import error, not a machine out of memory.
PARSE_MEMORY_MB: int = settings.get("core.parse_memory_mb")


def limit_memory() -> None:
    """Cap this process's memory at what it uses now plus ``PARSE_MEMORY_MB``."""
    limit = _data_bytes() + PARSE_MEMORY_MB * 1024 * 1024
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _data_bytes() -> int:
    """This process's data size now (Linux: ``VmData``); 0 where it cannot be read."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0
