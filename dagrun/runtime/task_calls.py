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

import inspect
import logging
import os
import time
import weakref
from collections.abc import Callable, Collection
from typing import Any

from dagrun import processes
from dagrun.authoring.context_names import TEMPLATES_DICT
from dagrun.authoring.params import ParamRef
from dagrun.authoring.sensor_options import PokeReturnValue, SensorMode, SensorSpec
from dagrun.authoring.tasks import KWARGS, BashTask, PythonTask, TaskOutput, named
from dagrun.errors import DagrunError, SkipTask
from dagrun.runtime import commands, masking, virtualenvs
from dagrun.runtime.context import TaskContext
from dagrun.runtime.current import set_current
from dagrun.runtime.rendering import render_with, with_params


class CommandFailed(DagrunError, RuntimeError):
    """A task's shell command exited with a code that fails it; carries the code. Its
    message is the whole story: the attempt's error and the last line of its log."""

    def __init__(self, code: int | None):
        super().__init__(f"bash command {processes.describe_exit(code)}")
        self.code = code


class ConditionUnmet(Exception):
    """A sensor's poke found its condition unmet: the attempt ends ``rescheduled`` and the
    store decides whether the sensor waits for its next poke or has timed out."""


def sense(sensor: SensorSpec, poke: Callable[[], Any], once: bool = False) -> Any:
    """A sensor's pokes: the task's value once its condition holds, which is ``poke``'s
    truthy value, or the ``xcom_value`` of a done ``PokeReturnValue`` (falsy or not). In
    reschedule mode one poke, raising ``ConditionUnmet`` when it does not; in poke mode one
    after each wait (``SensorSpec.wait_after``) while the attempt keeps its slot, until the
    timeout has passed since the first (then ``ConditionUnmet`` too, and the store ends the
    sensor). ``once``: one poke whatever the mode (``dagrun test``)."""
    started = time.monotonic()
    deadline = started + sensor.timeout
    pokes = 0
    while True:
        value = poke()
        pokes += 1
        if isinstance(value, PokeReturnValue):
            if value.is_done:
                return value.xcom_value
        elif value:
            return value
        if once or sensor.mode == SensorMode.RESCHEDULE:
            fixed = f"in {sensor.poke_interval:.10g} s"
            when = "after a growing wait" if sensor.exponential_backoff else fixed
            raise ConditionUnmet(f"condition unmet; next poke {when}")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConditionUnmet(f"condition unmet after {sensor.timeout:.10g} s of pokes")
        wait = sensor.wait_after(time.monotonic() - started, str(started), pokes)
        time.sleep(min(wait, left))


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
    args = [resolve(a, inputs, context) for a in task.args]
    kwargs = {k: resolve(v, inputs, context) for k, v in task.kwargs.items()}
    elements = dict(elements or {})
    kwargs.update(elements.pop(KWARGS, None) or {})
    kwargs.update(elements)
    wanted = _wanted_names(task)
    if wanted:
        names = context.names(wanted)
        if TEMPLATES_DICT in wanted:
            names[TEMPLATES_DICT] = render_with(task.templates_dict, context)
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
    leaves unbound that are context names (those that can cross to another interpreter,
    for a task that runs in one) or ``templates_dict``, or every name of the task's
    ``context_names`` it may declare and not already passed when it takes ``**kwargs``
    (``templates_dict`` only when the task has one). This depends only on the task (its
    signature and how it is called), so it is worked out once per task, not per attempt;
    a reloaded file brings new tasks."""
    wanted = _WANTED.get(task)
    if wanted is None:
        known = {*task.declarable_names(), TEMPLATES_DICT}
        signature = inspect.signature(task.python_callable)
        bound = signature.bind_partial(*task.args, **task.kwargs, **named(task.mapped)).arguments
        found: list[str] = []
        for name, param in signature.parameters.items():
            if param.kind == param.VAR_KEYWORD:
                taken = {*bound, *task.kwargs, *named(task.mapped), *found}
                if task.templates_dict is None:
                    taken.add(TEMPLATES_DICT)
                offered = [*task.context_names, TEMPLATES_DICT]
                found += [k for k in offered if k in known and k not in taken]
            elif name not in bound and name in known:
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
    return run_shell(
        render_with(str(elements.get("command", task.command)), context),
        context,
        render_with(extra, context),
        cwd=render_with(task.cwd, context),
        inherit_env=task.append_env,
        skip_on_exit_code=task.skip_on_exit_code,
        last_line_encoding=task.output_encoding if task.return_last_line else None,
        on_process_group=on_process_group,
    )


def run_shell(
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
    """Run a shell command for a task (``commands.run_command``): an exit code in
    ``skip_on_exit_code`` skips the task, another that is not 0 fails it. Returns its last
    line of output, decoded, when ``last_line_encoding`` is given; else None."""
    logging.getLogger("dagrun.task").info("running: %s", command)
    tail = masking.Tail() if last_line_encoding else None
    code = commands.run_command(
        ["bash", "-c", command],
        env=bash_environment(context, env, inherit_env),
        cwd=cwd,
        on_process_group=on_process_group,
        tail=tail,
    )
    if code in skip_on_exit_code:
        raise SkipTask(f"command exited with {code} (skip_on_exit_code)")
    if code != 0:
        raise CommandFailed(code)
    return tail.last_line(last_line_encoding or "utf-8") if tail is not None else None
