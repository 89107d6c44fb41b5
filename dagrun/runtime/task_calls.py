"""How an attempt calls its task, by kind: a Python callable with the context names it
declares and its upstream values (here, or in another Python environment through
``dagrun.runtime.virtualenvs``), a sensor's pokes, a BashTask's command in a process group
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
from dagrun.authoring.context_names import TEMPLATES_DICT
from dagrun.authoring.sensor_options import SensorMode
from dagrun.authoring.tasks import BashTask, PythonTask, TaskOutput
from dagrun.runtime import masking, virtualenvs
from dagrun.runtime.context import TaskContext
from dagrun.runtime.current import set_current
from dagrun.runtime.rendering import render, with_params


class ConditionUnmet(Exception):
    """A sensor's poke found its condition unmet: the attempt ends ``rescheduled`` and the
    store decides whether the sensor waits for its next poke or has timed out."""


def sense(
    task: PythonTask,
    context: TaskContext,
    inputs: dict[str, Any],
    elements: dict[str, Any],
    on_process_group: Callable[[int], None] | None = None,
) -> Any:
    """A sensor's pokes: its callable's truthy value, once its condition holds. In
    reschedule mode one poke, raising ``ConditionUnmet`` when it does not; in poke mode one
    every ``poke_interval`` while the attempt keeps its slot, until the timeout has passed
    since the first (then ``ConditionUnmet`` too, and the store ends the sensor)."""
    sensor = task.sensor
    assert sensor is not None  # the runner senses only a sensor's task
    deadline = time.monotonic() + sensor.timeout
    while True:
        value = run_python(task, context, inputs, elements, on_process_group)
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
    on_process_group: Callable[[int], None] | None = None,
) -> Any:
    """Call the task's function with its arguments, upstream values and the context names
    it declares: here, or in its Python environment when it has one."""
    context = with_params(task, context)
    set_current(context)

    def resolve(value: Any) -> Any:
        return inputs.get(value.task.task_id) if isinstance(value, TaskOutput) else value

    args = [resolve(a) for a in task.args]
    kwargs = {k: resolve(v) for k, v in task.kwargs.items()}
    kwargs.update(elements or {})
    wanted = _wanted_names(task)
    if wanted:
        names = context.names()
        if TEMPLATES_DICT in wanted:
            names[TEMPLATES_DICT] = render(task.templates_dict, names)
        kwargs.update((name, names[name]) for name in wanted)
    if task.environment is None:
        return task.python_callable(*args, **kwargs)
    assert task.function_source is not None  # made with the environment
    return virtualenvs.call_function(
        task.function_source,
        task.environment,
        args,
        kwargs,
        folder=os.path.dirname(task.dag.fileloc) if task.dag.fileloc else None,
        on_process_group=on_process_group,
    )


_WANTED: weakref.WeakKeyDictionary[PythonTask, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _wanted_names(task: PythonTask) -> tuple[str, ...]:
    """The context names to pass the callable as keywords, in order: the parameters the call
    leaves unbound that are context names (those that can cross to another interpreter,
    for a task that runs in one) or ``templates_dict``, or every name not already passed
    when it takes ``**kwargs`` (``templates_dict`` only when the task has one). This
    depends only on the task (its signature and how it is called), so it is worked out
    once per task, not per attempt; a reloaded file brings new tasks."""
    wanted = _WANTED.get(task)
    if wanted is None:
        known = [*task.context_names(), TEMPLATES_DICT]
        signature = inspect.signature(task.python_callable)
        bound = signature.bind_partial(*task.args, **task.kwargs, **task.mapped).arguments
        found: list[str] = []
        for name, param in signature.parameters.items():
            if param.kind == param.VAR_KEYWORD:
                taken = {*bound, *task.kwargs, *task.mapped, *found}
                if task.templates_dict is None:
                    taken.add(TEMPLATES_DICT)
                found += [k for k in known if k not in taken]
            elif name not in bound and name in known:
                found.append(name)
        wanted = _WANTED[task] = tuple(found)
    return wanted


def bash_environment(context: TaskContext, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a BashTask: the worker's, the run's dates as DS-style variables."""
    env = dict(os.environ)
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
) -> None:
    """Run the task's command (a mapped instance's own ``command``, with its ``env`` on top
    of the task's) in a process group of its own."""
    context = with_params(task, context)
    names = context.names()
    elements = elements or {}
    command = render(str(elements.get("command", task.command)), names)
    extra = {**task.env, **{str(k): str(v) for k, v in elements.get("env", {}).items()}}
    env = bash_environment(context, {k: render(v, names) for k, v in extra.items()})
    logging.getLogger("dagrun.task").info("running: %s", command)
    sys.stdout.flush()
    sys.stderr.flush()
    masker = masking.active()
    process = subprocess.Popen(
        ["bash", "-c", command],
        env=env,
        cwd=task.cwd,
        preexec_fn=processes.own_session,
        **masking.piped(masker),
    )
    if on_process_group:
        on_process_group(process.pid)
    try:
        if masker:
            masking.pump(process, masker)
        code = process.wait()
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        if process.stdout is not None:
            process.stdout.close()
    if code != 0:
        raise RuntimeError(f"command {processes.describe_exit(code)}")
