"""A task's templates rendered for one attempt: ``render`` walks strings, lists and dicts,
``with_params`` gives the context the task's params.

A module of its own because notifiers (``dagrun.runtime.notify``) and sensors
(``dagrun.runtime.sensors``) render templates too and import only this, not the runner.
Jinja2 itself is imported on the first string that is a template (``authoring.templates``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dagrun.authoring import templates
from dagrun.authoring.params import resolve
from dagrun.errors import NonRetryableError

if TYPE_CHECKING:
    from dagrun.authoring.tasks import Task
    from dagrun.runtime.context import TaskContext


def render(value: Any, names: dict[str, Any], env: Any = None) -> Any:
    """Render Jinja2 templates in strings, recursively through lists and dicts (in ``env``,
    dagrun's own environment by default)."""
    if isinstance(value, str):
        if not templates.is_template(value):
            return value
        from jinja2 import TemplateError, TemplateNotFound

        try:
            return (env or templates.environment()).from_string(value).render(**names)
        except TemplateNotFound as exc:
            raise NonRetryableError(f"template file {exc.name!r} not found") from None
        except TemplateError as exc:
            raise NonRetryableError(f"template {value!r}: {exc}") from None
    if isinstance(value, list | tuple):
        return type(value)(render(v, names, env) for v in value)
    if isinstance(value, dict):
        return {k: render(v, names, env) for k, v in value.items()}
    return value


def render_with(value: Any, context: TaskContext) -> Any:
    """``value`` rendered with the context names its templates use (only those are
    computed: some of Airflow's read the store), in the environment of the attempt's task
    and with the names it adds (a DAG's ``user_defined_macros``, for Airflow's tasks)."""
    sources = list(templates.sources(value, ""))
    if not sources:
        return value
    task = context.task
    more = task.template_globals() if task is not None else {}
    env = task.template_environment() if task is not None else None
    wanted = {name for _, source in sources for name in templates.names_used(source, env)}
    return render(value, {**context.names(wanted), **more}, env)


def with_params(task: Task, context: TaskContext) -> TaskContext:
    """The context with ``params``: the DAG's declared params resolved against the run's conf
    (checked again here, as the DAG may have changed since the run was triggered), then the
    task's own rendered params on top. The context itself when there is neither a param nor
    a conf (most tasks), as nothing would change."""
    own = task.options.get("params")
    if not task.dag.params and not own and not context.conf:
        return context
    params = resolve(task.dag.params, context.conf)
    if own:
        params.update(render_with(own, dataclasses.replace(context, params=params)))
    return dataclasses.replace(context, params=params)
