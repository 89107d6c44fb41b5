"""What one callback event does in a worker's child: find its callables, call each, log it.

An outbox row (``store.callbacks``) names the event; the child finds the callables the way
an attempt finds its task (the DAG file as it is, or its last good version) and calls each
with the event's context: the task context as a dict, plus ``event``, ``state``,
``exception`` (the error text of a failure), ``map_index`` and, when ``DAGRUN_WEB_URL`` is
set, ``url`` (the attempt's log page, or the run's page). What they print and how each
ended go to the worker's log segment, as an attempt's output does. A callback that raises
fails that event's delivery, after the others in its list have run, and never changes a
state. The time limit is the worker's (``DAGRUN_CALLBACK_TIMEOUT``): past it the callback
is killed with its child.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from dagrun import settings
from dagrun.authoring.dag import DAG
from dagrun.authoring.options import TASK_CALLBACKS
from dagrun.authoring.params import resolve_or_defaults
from dagrun.errors import StoreError
from dagrun.parsing.loader import isolated
from dagrun.runtime import masking
from dagrun.runtime.attempt_logs import captured, log_folder_problem, note
from dagrun.runtime.context import make_context
from dagrun.runtime.current import set_current
from dagrun.runtime.masking import Masker
from dagrun.runtime.requests import AttemptResult, CallbackRequest
from dagrun.runtime.runner import DagCache, one_line
from dagrun.states import AttemptOutcome, CallbackEvent, TaskState

#: The state a callback's context names for each event.
EVENT_STATES = {
    CallbackEvent.TASK_SUCCESS: TaskState.SUCCESS.value,
    CallbackEvent.TASK_RETRY: TaskState.UP_FOR_RETRY.value,
    CallbackEvent.TASK_FAILURE: TaskState.FAILED.value,
    CallbackEvent.RUN_SUCCESS: "success",
    CallbackEvent.RUN_FAILURE: "failed",
}
_TASK_OPTIONS = {event: option for option, event in TASK_CALLBACKS.items()}
_RUN_OPTIONS = {
    CallbackEvent.RUN_SUCCESS: "on_success_callback",
    CallbackEvent.RUN_FAILURE: "on_failure_callback",
}


def execute_callback(request: CallbackRequest, cache: DagCache) -> AttemptResult:
    """Deliver one event: SUCCESS when every callable returned, else FAILED with the reasons.
    Never raises for what a callback does. The secrets this process knows are masked in
    what the callables receive and log, and in the reasons."""
    started = time.monotonic()
    try:
        masker = masking.for_attempt(request.db_url)
        with captured(request.log_dir, masker) as log:
            errors = _call_all(request, cache, masker)
    except OSError as exc:
        reason = f"{log_folder_problem(exc)}: {exc.strerror or exc} ({request.log_dir})"
        return AttemptResult(AttemptOutcome.FAILED, reason, None, time.monotonic() - started)
    except StoreError as exc:
        reason = f"cannot read the secrets to mask: {exc}"
        return AttemptResult(AttemptOutcome.FAILED, reason, None, time.monotonic() - started)
    outcome = AttemptOutcome.FAILED if errors else AttemptOutcome.SUCCESS
    error = masker.mask("; ".join(errors)) or None
    return AttemptResult(outcome, error, None, time.monotonic() - started, log[0] if log else None)


def _call_all(request: CallbackRequest, cache: DagCache, masker: Masker) -> list[str]:
    """Call each callable of the event in order; the reasons of those that failed."""
    note("INFO", request.label)
    try:
        dag = cache.dag(request.fileloc, request.dag_id, request.db_url)
        found = callables_for(dag, request)
    except Exception as exc:
        note("ERROR", f"cannot find the callbacks:\n{traceback.format_exc()}")
        return [f"cannot find the callbacks: {one_line(exc)}"]
    names = context_of(request, dag, masker)
    errors = []
    # The current context, so Variable and Connection read the worker's database; without
    # the attempt's ti_id, so a partition written here is not fenced by an attempt that ended.
    set_current(dataclasses.replace(names["ctx"], ti_id=None))
    try:
        with isolated(request.fileloc):
            for name, call in found:
                try:
                    call(dict(names))
                except BaseException as exc:  # a callback may raise anything; only it failed
                    note("ERROR", f"{name} failed:\n{traceback.format_exc()}")
                    errors.append(f"{name}: {one_line(exc)}")
                else:
                    note("INFO", f"{name} done")
    finally:
        set_current(None)
    return errors


def callables_for(dag: DAG, request: CallbackRequest) -> list[tuple[str, Callable[..., Any]]]:
    """The event's callables, each with the name its log lines give it (``option[i]`` when
    the option is a list)."""
    if request.task_id is None:
        option = _RUN_OPTIONS[request.event]
        found = dag.callbacks[request.event]
    else:
        if request.task_id not in dag.tasks:
            raise LookupError(f"DAG '{dag.dag_id}' no longer has task '{request.task_id}'")
        option = _TASK_OPTIONS[request.event]
        found = dag.tasks[request.task_id].options.get(option) or []
    if len(found) == 1:
        return [(option, found[0])]
    return [(f"{option}[{i}]", call) for i, call in enumerate(found)]


def context_of(request: CallbackRequest, dag: DAG, masker: Masker) -> dict[str, Any]:
    """The names a callback receives: the task context's (Airflow's too for a task or DAG
    made by ``dagrun.airflow``, as its callbacks expect ``ti`` and ``dag_run``), and the
    event's (its error text with the secrets masked, as a notifier sends it on)."""
    task = dag.tasks.get(request.task_id) if request.task_id else None
    owner = task if task is not None else dag
    context = make_context(
        dag_id=request.dag_id,
        task_id=request.task_id or "",
        run_id=request.run_id,
        timezone=request.timezone,
        logical_date=request.logical_date,
        data_interval_start=request.data_interval_start,
        data_interval_end=request.data_interval_end,
        try_number=request.try_number or 0,
        params=resolve_or_defaults(dag.params, request.conf),
        conf=request.conf,
        fence_token=request.fence_token or 0,
        ti_id=request.ti_id,
        db_url=request.db_url,
        run_pk=request.run_pk,
        map_index=request.map_index,
        task=task,
    )
    names = context.names(owner.context_names)
    names.update(
        task_id=request.task_id,
        try_number=request.try_number,
        map_index=request.map_index,
        event=request.event.value,
        state=EVENT_STATES[request.event],
        exception=request.error and masker.mask(request.error),
    )
    url = page_url(request)
    if url:
        names["url"] = url
    return names


def page_url(request: CallbackRequest) -> str | None:
    """The web page of the attempt (or of the run, for a run's event) under
    ``DAGRUN_WEB_URL`` (the web app's own paths, ids percent-encoded); None when unset."""
    base = settings.get("web.url").rstrip("/")
    if not base:
        return None
    run = f"{base}/dags/{quote(request.dag_id, safe='')}/runs/{quote(request.run_id, safe='')}"
    if request.task_id is None:
        return run
    log = f"{run}/tasks/{quote(request.task_id, safe='')}/tries/{request.try_number}/log"
    return f"{log}?map_index={request.map_index}" if request.map_index >= 0 else log
