"""What one attempt does: import the DAG file, render templates, call the task, capture logs.

``execute`` runs inside a worker's child process (or in-process for ``dagrun test``). It never
touches task state: it returns an :class:`AttemptResult` and the worker records it with a
fenced update. stdout, stderr (file descriptors 1 and 2, so subprocesses and C extensions
are captured too) and Python logging go to the attempt's own log file
(``dagrun.runtime.attempt_logs``); the templates are rendered by ``dagrun.runtime.rendering``
and each kind of task is called by ``dagrun.runtime.task_calls``. Here: the attempt's request
and result, the cache of imported DAG files, and the steps from one to the other.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

from dagrun.authoring import mapping
from dagrun.authoring.dag import DAG
from dagrun.authoring.tasks import BashTask, PythonTask, Task, TaskOutput
from dagrun.errors import DagrunError, NonRetryableError, SkipTask, StoreError
from dagrun.parsing.loader import import_file, isolated
from dagrun.runtime import masking
from dagrun.runtime.attempt_logs import captured, log_folder_problem, note
from dagrun.runtime.context import TaskContext
from dagrun.runtime.current import set_current
from dagrun.runtime.rendering import with_params
from dagrun.runtime.requests import AttemptRequest, AttemptResult, index_label
from dagrun.runtime.task_calls import (
    CommandFailed,
    ConditionUnmet,
    run_bash,
    run_python,
    sense,
)
from dagrun.runtime.task_instance import encode
from dagrun.states import AttemptOutcome


class DagCache:
    """Imported DAG files, reused while the file is unchanged (mtime and size).

    A file that no longer imports, or no longer defines the task, is run as its last good
    version when the store has one (``dag_file.good_source``): its DAGs keep being
    scheduled from their last good spec, so their attempts must run the code that made it.
    """

    def __init__(self) -> None:
        # Keyed by the file's (mtime, size), or ("good", hash) for its last good source.
        self._files: dict[str, tuple[tuple[int, int] | tuple[str, int], dict[str, DAG]]] = {}

    def task(self, fileloc: str, dag_id: str, task_id: str, db_url: str | None = None) -> Task:
        return self._find(fileloc, db_url, lambda dags: _task_of(dags, fileloc, dag_id, task_id))

    def dag(self, fileloc: str, dag_id: str, db_url: str | None = None) -> DAG:
        return self._find(fileloc, db_url, lambda dags: _dag_of(dags, fileloc, dag_id))

    def _find(self, fileloc: str, db_url: str | None, find: Callable[[dict[str, DAG]], Any]) -> Any:
        """What ``find`` picks from the file's DAGs: as the file is now, or as its last good
        version when it no longer imports or no longer has what is wanted."""
        try:
            return find(self._dags(fileloc))
        except Exception as exc:
            source = _good_source(db_url, fileloc)
            if source is None:
                raise
            note("WARNING", f"{fileloc} fails ({one_line(exc)}); running its last good version")
            return find(self._last_good(fileloc, source))

    def preload(self, fileloc: str) -> None:
        """Import a DAG file before any attempt needs it, as an attempt would (``isolated``),
        its output discarded; a file that fails is left to the attempt to report."""
        with (
            open(os.devnull, "w") as sink,
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
            contextlib.suppress(Exception),
            isolated(fileloc),
        ):
            self._dags(fileloc)

    def _dags(self, fileloc: str) -> dict[str, DAG]:
        st = os.stat(fileloc)
        key = (st.st_mtime_ns, st.st_size)
        cached = self._files.get(fileloc)
        if cached is None or cached[0] != key:
            self._files.pop(fileloc, None)
            cached = self._files[fileloc] = (key, {d.dag_id: d for d in import_file(fileloc)})
        return cached[1]

    def _last_good(self, fileloc: str, source: str) -> dict[str, DAG]:
        key = ("good", hash(source))
        cached = self._files.get(fileloc)
        if cached is None or cached[0] != key:
            dags = {d.dag_id: d for d in import_file(fileloc, source)}
            cached = self._files[fileloc] = (key, dags)
        return cached[1]


def _dag_of(dags: dict[str, DAG], fileloc: str, dag_id: str) -> DAG:
    dag = dags.get(dag_id)
    if dag is None:
        raise LookupError(f"{fileloc} no longer defines DAG '{dag_id}'")
    return dag


def _task_of(dags: dict[str, DAG], fileloc: str, dag_id: str, task_id: str) -> Task:
    dag = _dag_of(dags, fileloc, dag_id)
    if task_id not in dag.tasks:
        raise LookupError(f"DAG '{dag_id}' no longer has task '{task_id}'")
    return dag.tasks[task_id]


def _good_source(db_url: str | None, fileloc: str) -> str | None:
    """The file's last good source from the store (None outside a worker, or if none)."""
    if db_url is None:
        return None
    from dagrun.store import dag_reads
    from dagrun.store.engine import shared_store

    with shared_store(db_url).read() as conn:
        return dag_reads.good_source(conn, fileloc)


def execute(
    request: AttemptRequest,
    cache: DagCache,
    on_process_group: Callable[[int], None] | None = None,
) -> AttemptResult:
    """Run one attempt to its end and say how it went; never raises for task errors. Its
    log and its error text have the secrets known to this process masked."""
    started = time.monotonic()
    context = request.context()
    set_current(context)
    try:
        masker = masking.for_attempt(request.db_url)
        with captured(request.log_dir, masker) as log:
            result = _run_logged(request, context, cache, on_process_group)
    except OSError as exc:  # the log itself: its folder full, read-only, removed
        reason = f"{log_folder_problem(exc)}: {exc.strerror or exc} ({request.log_dir})"
        return AttemptResult(AttemptOutcome.INFRA_FAILED, reason, None, time.monotonic() - started)
    except StoreError as exc:  # nothing ran: the secrets it would have to mask are unknown
        reason = f"cannot read the secrets to mask: {exc}"
        return AttemptResult(AttemptOutcome.INFRA_FAILED, reason, None, time.monotonic() - started)
    finally:
        set_current(None)
    return AttemptResult(
        result.outcome,
        result.error and masker.mask(result.error),
        result.return_value,
        time.monotonic() - started,
        log[0] if log else None,
        dict(context.pushed) or None,
    )


def _run_logged(
    request: AttemptRequest,
    context: TaskContext,
    cache: DagCache,
    on_process_group: Callable[[int], None] | None,
) -> AttemptResult:
    note(
        "INFO",
        f"attempt {request.try_number} of {request.dag_id}.{request.task_id}"
        f"{index_label(request)} for {context.logical_date.isoformat()} "
        f"(fence {request.fence_token})",
    )
    try:
        with isolated(request.fileloc):
            value = _run_task(request, context, cache, on_process_group)
        encoded = _encode(value)
    except ConditionUnmet as unmet:
        note("INFO", str(unmet))
        return AttemptResult(AttemptOutcome.RESCHEDULED)
    except SkipTask as skip:
        note("INFO", f"skipped: {skip}" if str(skip) else "skipped")
        return AttemptResult(AttemptOutcome.SKIPPED, one_line(skip))
    except NonRetryableError as exc:
        note("ERROR", f"non-retryable failure:{_failure_text(exc)}")
        return AttemptResult(AttemptOutcome.NON_RETRYABLE, one_line(exc))
    except BaseException as exc:  # a task may raise anything; only its attempt fails
        note("ERROR", f"failed:{_failure_text(exc)}")
        return AttemptResult(AttemptOutcome.FAILED, one_line(exc))
    note("INFO", "success")
    return AttemptResult(AttemptOutcome.SUCCESS, return_value=encoded)


def _run_task(
    request: AttemptRequest,
    context: TaskContext,
    cache: DagCache,
    on_process_group: Callable[[int], None] | None,
) -> Any:
    task = cache.task(request.fileloc, request.dag_id, request.task_id, request.db_url)
    context.attach(task)
    elements = _mapped_values(task, request)
    if isinstance(task, BashTask):
        return run_bash(task, context, on_process_group, elements)
    if isinstance(task, PythonTask):
        if task.sensor is not None:
            value = sense(
                task.sensor,
                lambda: run_python(task, context, request.inputs, elements, on_process_group),
                once=context.poke_once,
            )
        else:
            value = run_python(task, context, request.inputs, elements, on_process_group)
    else:  # a kind of its own (dagrun.airflow's operators) says what running it means
        value = task.run_attempt(with_params(task, context), request.inputs, elements)
    _check_value(task, value)
    if task.multiple_outputs:
        _push_each(value, context)
    return value


def _mapped_values(task: Task, request: AttemptRequest) -> dict[str, Any]:
    """The elements a mapped task's instance runs with, by argument (none if not mapped):
    from the literal lists in the DAG file, or the upstream values it maps over."""
    if not task.mapped:
        return {}
    lists: list[Any] = [  # the upstream values are lists, as readiness checked
        request.inputs.get(v.task.task_id) if isinstance(v, TaskOutput) else v
        for v in task.mapped.values()
    ]
    return dict(zip(task.mapped, mapping.elements(lists, request.map_index), strict=True))


def _check_value(task: Task, value: Any) -> None:
    """A value that readiness acts on must make sense, or the task fails (not a retry: the
    same code returns the same value): a list to map over for a task others map over (a
    mapped task's instances each give one element of that list), the ids of direct
    downstream tasks for a branch."""
    if task.feeds_mapping and not task.mapped:  # a mapped task's values are already a list
        problem = mapping.problem(value)
        if problem:
            raise NonRetryableError(f"its return value {problem}")
    if task.choice == "branch":
        downstream = sorted(
            t.task_id for t in task.dag.tasks.values() if task.task_id in t.upstream_ids
        )
        picked = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(picked, list) or not all(isinstance(p, str) for p in picked):
            raise NonRetryableError(
                f"a branch returns a task id, a list of them or None, not {value!r}"
            )
        unknown = [p for p in picked if p not in downstream]
        if unknown:
            raise NonRetryableError(
                f"branch chose {unknown[0]!r}, which is not a direct downstream task "
                f"(those are: {', '.join(downstream) or 'none'})"
            )


def _push_each(value: Any, context: TaskContext) -> None:
    """A task with ``multiple_outputs`` also pushes each key of the dict it returned."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError(
            f"multiple_outputs needs a dict with string keys as the return value, not {value!r}"
        )
    for key, item in value.items():
        context.ti.xcom_push(key, item)


#: Where dagrun's own modules are: their frames before the task's code are not the task's.
_OWN_CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _failure_text(exc: BaseException) -> str:
    """How the log tells what ended an attempt: the traceback from the first frame of the
    task's own code (dagrun's frames that called it say nothing about the task); one line
    for an error dagrun raised on purpose before any code of the task ran (a command's
    exit code, a function that failed in another Python, whose traceback is already in
    the log). A failure of dagrun's own code keeps its whole traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_CODE):
        tb = tb.tb_next
    if tb is None and isinstance(exc, DagrunError):
        return " " + one_line(exc)
    shown = traceback.format_exception(type(exc), exc, tb or exc.__traceback__)
    return "\n" + "".join(shown)


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message. An exception
    raised in another interpreter (``virtualenvs.FunctionFailed``) gives the type it had
    there, its ``remote_type``; a failed command says all in its message."""
    if isinstance(exc, CommandFailed):
        return str(exc)
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    name = getattr(exc, "remote_type", None) or type(exc).__name__
    return f"{name}: {first}" if first else name


def _encode(value: Any) -> str | None:
    return None if value is None else encode(value, "return value")
