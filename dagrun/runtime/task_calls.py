"""How an attempt calls its task, by kind: a Python callable with the context names it
declares and its upstream values, a sensor's pokes, a BashTask's command in a process group
of its own.

The runner (``dagrun.runtime.runner``) finds the task and hands it here with the attempt's
context; what the call returns, or raises, the runner turns into the attempt's outcome. A
module of its own so that the runner reads as the attempt's steps and this as what calling
each kind of task means.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Collection
from typing import Any

from dagrun import processes
from dagrun.authoring.context_names import ALL_CONTEXT_NAMES
from dagrun.authoring.params import ParamRef
from dagrun.authoring.sensor_options import SensorMode, SensorSpec
from dagrun.authoring.tasks import KWARGS, BashTask, PythonTask, TaskOutput, named
from dagrun.errors import SkipTask
from dagrun.runtime import masking
from dagrun.runtime.context import TaskContext
from dagrun.runtime.current import set_current
from dagrun.runtime.rendering import render_with, with_params


class ConditionUnmet(Exception):
    """A sensor's poke found its condition unmet: the attempt ends ``rescheduled`` and the
    store decides whether the sensor waits for its next poke or has timed out."""


def sense(sensor: SensorSpec, poke: Callable[[], Any]) -> Any:
    """A sensor's pokes: ``poke``'s truthy value, once its condition holds. In reschedule
    mode one poke, raising ``ConditionUnmet`` when it does not; in poke mode one every
    ``poke_interval`` while the attempt keeps its slot, until the timeout has passed since
    the first (then ``ConditionUnmet`` too, and the store ends the sensor)."""
    deadline = time.monotonic() + sensor.timeout
    while True:
        value = poke()
        if value:
            return value
        if sensor.mode == SensorMode.RESCHEDULE:
            raise ConditionUnmet(f"condition unmet; next poke in {sensor.poke_interval:.10g} s")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConditionUnmet(f"condition unmet after {sensor.timeout:.10g} s of pokes")
        time.sleep(min(sensor.poke_interval, left))


def run_python(
    task: PythonTask,
    context: TaskContext,
    inputs: dict[str, Any],
    elements: dict[str, Any] | None = None,
) -> Any:
    context = with_params(task, context)
    set_current(context)
    args = [resolve(a, inputs, context) for a in task.args]
    kwargs = {k: resolve(v, inputs, context) for k, v in task.kwargs.items()}
    elements = dict(elements or {})
    kwargs.update(elements.pop(KWARGS, None) or {})
    kwargs.update(elements)
    wanted = _wanted_names(task)
    if wanted:
        kwargs.update(context.names(wanted))
    return task.python_callable(*args, **kwargs)


def resolve(value: Any, inputs: dict[str, Any], context: TaskContext) -> Any:
    """An argument as the callable gets it: an upstream task's output is its value (one
    key of it, or what it pushed under that key); a DAG param is the run's value."""
    if isinstance(value, ParamRef):
        return context.params.get(value.name, value.default)
    if not isinstance(value, TaskOutput):
        return value
    found = inputs.get(value.task.task_id)
    if value.key is None:
        return found
    if getattr(value.task, "multiple_outputs", False):
        return found.get(value.key) if isinstance(found, dict) else None
    return context.ti.xcom_pull(task_ids=value.task.task_id, key=value.key)


_WANTED: weakref.WeakKeyDictionary[PythonTask, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _wanted_names(task: PythonTask) -> tuple[str, ...]:
    """The context names to pass the callable as keywords, in order: the parameters the call
    leaves unbound that are context names, or every name of the task's ``context_names``
    not already passed when it takes ``**kwargs``. This depends only on the task (its
    signature and how it is called), so it is worked out once per task, not per attempt; a
    reloaded file brings new tasks."""
    wanted = _WANTED.get(task)
    if wanted is None:
        signature = inspect.signature(task.python_callable)
        bound = signature.bind_partial(*task.args, **task.kwargs, **named(task.mapped)).arguments
        found: list[str] = []
        for name, param in signature.parameters.items():
            if param.kind == param.VAR_KEYWORD:
                taken = {*bound, *task.kwargs, *named(task.mapped), *found}
                found += [k for k in task.context_names if k not in taken]
            elif name not in bound and name in ALL_CONTEXT_NAMES:
                found.append(name)
        wanted = _WANTED[task] = tuple(found)
    return wanted


def bash_environment(
    context: TaskContext, extra: dict[str, str], inherit: bool = True
) -> dict[str, str]:
    """The environment of a BashTask: the worker's (unless not ``inherit``), the run's dates
    as DS-style variables, then ``extra``."""
    env = dict(os.environ) if inherit else {}
    env.update(
        {
            "DS": context.ds,
            "DS_NODASH": context.ds_nodash,
            "LOGICAL_DATE": context.logical_date.isoformat(),
            "DATA_INTERVAL_START": context.data_interval_start.isoformat(),
            "DATA_INTERVAL_END": context.data_interval_end.isoformat(),
            "RUN_ID": context.run_id,
            "DAG_ID": context.dag_id,
            "TASK_ID": context.task_id,
            "TRY_NUMBER": str(context.try_number),
            "IDEMPOTENCY_KEY": context.idempotency_key,
            "FENCE_TOKEN": str(context.fence_token),
            # What Airflow's commands read (AIRFLOW_CTX_*), so its scripts run unchanged.
            "AIRFLOW_CTX_DAG_ID": context.dag_id,
            "AIRFLOW_CTX_TASK_ID": context.task_id,
            "AIRFLOW_CTX_LOGICAL_DATE": context.logical_date.isoformat(),
            "AIRFLOW_CTX_EXECUTION_DATE": context.logical_date.isoformat(),
            "AIRFLOW_CTX_TRY_NUMBER": str(context.try_number),
            "AIRFLOW_CTX_DAG_RUN_ID": context.run_id,
        }
    )
    env.update(extra)
    return env


def run_bash(
    task: BashTask,
    context: TaskContext,
    on_process_group: Callable[[int], None] | None,
    elements: dict[str, Any] | None = None,
) -> str | None:
    """Run the task's command (a mapped instance's own ``command``, with its ``env`` on top
    of the task's) in a process group of its own; the last line it wrote when the task
    returns it, else None."""
    context = with_params(task, context)
    elements = elements or {}
    extra = {**task.env, **{str(k): str(v) for k, v in elements.get("env", {}).items()}}
    return run_command(
        render_with(str(elements.get("command", task.command)), context),
        context,
        render_with(extra, context),
        cwd=render_with(task.cwd, context),
        inherit_env=task.append_env,
        skip_on_exit_code=task.skip_on_exit_code,
        last_line_encoding=task.output_encoding if task.return_last_line else None,
        on_process_group=on_process_group,
    )


def run_command(
    command: str,
    context: TaskContext,
    env: dict[str, str],
    *,
    cwd: str | None = None,
    inherit_env: bool = True,
    skip_on_exit_code: Collection[int] = (),
    last_line_encoding: str | None = None,
    on_process_group: Callable[[int], None] | None = None,
) -> str | None:
    """Run a shell command in a session of its own (reported, so that a cancel or a time
    limit kills it with the attempt): an exit code in ``skip_on_exit_code`` skips the task,
    another that is not 0 fails it. Returns its last line of output, decoded, when
    ``last_line_encoding`` is given; else None."""
    logging.getLogger("dagrun.task").info("running: %s", command)
    sys.stdout.flush()
    sys.stderr.flush()
    masker = masking.active()
    tail = masking.Tail() if last_line_encoding else None
    process = subprocess.Popen(
        ["bash", "-c", command],
        env=bash_environment(context, env, inherit_env),
        cwd=cwd,
        preexec_fn=processes.own_session,
        **masking.piped(masker if tail is None else masker or masking.Masker()),
    )
    (on_process_group or processes.report_group)(process.pid)
    try:
        if masker or tail:
            masking.pump(process, masker or masking.Masker(), tail=tail)
        code = process.wait()
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        if process.stdout is not None:
            process.stdout.close()
    if code in skip_on_exit_code:
        raise SkipTask(f"command exited with {code} (skip_on_exit_code)")
    if code != 0:
        raise RuntimeError(f"command {processes.describe_exit(code)}")
    return tail.last_line(last_line_encoding or "utf-8") if tail is not None else None
