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
from collections.abc import Callable
from typing import Any

from dagrun import processes
from dagrun.authoring.context_names import ALL_CONTEXT_NAMES
from dagrun.authoring.sensor_options import SensorMode
from dagrun.authoring.tasks import BashTask, PythonTask, TaskOutput
from dagrun.errors import SkipTask
from dagrun.runtime import masking
from dagrun.runtime.context import TaskContext
from dagrun.runtime.current import set_current
from dagrun.runtime.rendering import render_with, with_params


class ConditionUnmet(Exception):
    """A sensor's poke found its condition unmet: the attempt ends ``rescheduled`` and the
    store decides whether the sensor waits for its next poke or has timed out."""


def sense(
    task: PythonTask, context: TaskContext, inputs: dict[str, Any], elements: dict[str, Any]
) -> Any:
    """A sensor's pokes: its callable's truthy value, once its condition holds. In
    reschedule mode one poke, raising ``ConditionUnmet`` when it does not; in poke mode one
    every ``poke_interval`` while the attempt keeps its slot, until the timeout has passed
    since the first (then ``ConditionUnmet`` too, and the store ends the sensor)."""
    sensor = task.sensor
    assert sensor is not None  # the runner senses only a sensor's task
    deadline = time.monotonic() + sensor.timeout
    while True:
        value = run_python(task, context, inputs, elements)
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

    def resolve(value: Any) -> Any:
        return inputs.get(value.task.task_id) if isinstance(value, TaskOutput) else value

    args = [resolve(a) for a in task.args]
    kwargs = {k: resolve(v) for k, v in task.kwargs.items()}
    kwargs.update(elements or {})
    wanted = _wanted_names(task)
    if wanted:
        kwargs.update(context.names(wanted))
    return task.python_callable(*args, **kwargs)


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
        bound = signature.bind_partial(*task.args, **task.kwargs, **task.mapped).arguments
        found: list[str] = []
        for name, param in signature.parameters.items():
            if param.kind == param.VAR_KEYWORD:
                taken = {*bound, *task.kwargs, *task.mapped, *found}
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
    command = render_with(str(elements.get("command", task.command)), context)
    extra = {**task.env, **{str(k): str(v) for k, v in elements.get("env", {}).items()}}
    env = bash_environment(context, render_with(extra, context), task.append_env)
    logging.getLogger("dagrun.task").info("running: %s", command)
    sys.stdout.flush()
    sys.stderr.flush()
    masker = masking.active()
    tail = masking.Tail() if task.return_last_line else None
    process = subprocess.Popen(
        ["bash", "-c", command],
        env=env,
        cwd=render_with(task.cwd, context),
        preexec_fn=processes.own_session,
        **masking.piped(masker if tail is None else masker or masking.Masker()),
    )
    if on_process_group:
        on_process_group(process.pid)
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
    if code in task.skip_on_exit_code:
        raise SkipTask(f"command exited with {code} (skip_on_exit_code)")
    if code != 0:
        raise RuntimeError(f"command {processes.describe_exit(code)}")
    return tail.last_line(task.output_encoding) if tail is not None else None
