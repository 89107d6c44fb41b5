"""Airflow's templating of operator fields: ``template_fields`` rendered with the context
before ``execute``, ``template_ext`` files read when the DAG file is parsed, the DAG's
``user_defined_macros`` and ``user_defined_filters``, ``render_template_as_native_obj``.

The Jinja environment is dagrun's (StrictUndefined, as Airflow's default), one per DAG,
with Airflow's filters (``ds``, ``ds_nodash``, ``ts``, ``ts_nodash``, ``ts_nodash_with_tz``)
and a loader over the DAG file's folder and ``template_searchpath`` for ``{% include %}``.
Task outputs and DAG params inside a field are their values in the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagrun.authoring import templates
from dagrun.authoring.params import ParamRef
from dagrun.authoring.tasks import TaskOutput
from dagrun.runtime import rendering

if TYPE_CHECKING:
    from dagrun.authoring.dag import DAG

#: The environments made, by DAG (a worker child renders many attempts of one DAG).
_ENVIRONMENTS: dict[tuple[int, bool], Any] = {}


def search_path(dag: DAG | None) -> list[str]:
    """Where template files are looked for: the DAG file's folder, then its
    ``template_searchpath``."""
    if dag is None:
        return [os.getcwd()]
    folders = [os.path.dirname(dag.fileloc)] if dag.fileloc else []
    return folders + list(getattr(dag, "template_searchpath", []))


def read_template_file(name: str, dag: DAG | None) -> str:
    """The text of a template file a field names (``bash_command="load.sh"``), read when
    the DAG file is parsed, as Airflow reads it. A file not there yet is looked for again
    when the task runs (an ``include`` of it), whose attempt fails if it is still missing:
    the DAG loads, as in Airflow."""
    for folder in search_path(dag):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return handle.read()
    return "{% include " + repr(name) + " %}"


def environment(dag: DAG | None) -> Any:
    """The Jinja environment a DAG's fields render in."""
    native = bool(getattr(dag, "render_template_as_native_obj", False))
    key = (id(dag), native)
    found = _ENVIRONMENTS.get(key)
    if found is None:
        found = _ENVIRONMENTS[key] = _make_environment(dag, native)
    return found


def _make_environment(dag: DAG | None, native: bool) -> Any:
    from jinja2 import FileSystemLoader, StrictUndefined
    from jinja2.nativetypes import NativeEnvironment

    kind = NativeEnvironment if native else type(templates.environment())
    made = kind(
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        loader=FileSystemLoader(search_path(dag)),
    )
    made.filters.update(_FILTERS)
    made.filters.update(getattr(dag, "user_defined_filters", {}))
    return made


def _ds(value: datetime) -> str:
    return value.strftime("%Y-%m-%d")


def _ds_nodash(value: datetime) -> str:
    return value.strftime("%Y%m%d")


def _ts(value: datetime) -> str:
    return value.isoformat()


def _ts_nodash(value: datetime) -> str:
    return value.strftime("%Y%m%dT%H%M%S")


def _ts_nodash_with_tz(value: datetime) -> str:
    return value.isoformat().replace("-", "").replace(":", "")


_FILTERS = {
    "ds": _ds,
    "ds_nodash": _ds_nodash,
    "ts": _ts,
    "ts_nodash": _ts_nodash,
    "ts_nodash_with_tz": _ts_nodash_with_tz,
}


def render(value: Any, context: Mapping[str, Any], dag: DAG | None) -> Any:
    """A field's value rendered: strings as templates, lists, tuples, sets and dict values
    through, task outputs and params as their values in the run, other objects as they
    are (objects with ``template_fields`` of their own get those rendered in place)."""
    if isinstance(value, str):
        if not templates.is_template(value):
            return value
        names = {**context, **getattr(dag, "user_defined_macros", {})}
        return rendering.render(value, names, environment(dag))
    if isinstance(value, TaskOutput):
        key = value.key or "return_value"
        return context["ti"].xcom_pull(task_ids=value.task.task_id, key=key)
    if isinstance(value, ParamRef):
        return context["params"].get(value.name, value.default)
    if isinstance(value, list | tuple | set):
        return type(value)(render(v, context, dag) for v in value)
    if isinstance(value, dict):
        return {k: render(v, context, dag) for k, v in value.items()}
    for field in getattr(value, "template_fields", ()):
        setattr(value, field, render(getattr(value, field), context, dag))
    return value


def outputs_in(value: Any) -> Iterator[TaskOutput]:
    """The task outputs inside a field's value (they make the task depend on theirs)."""
    if isinstance(value, TaskOutput):
        yield value
    elif isinstance(value, list | tuple | set):
        for item in value:
            yield from outputs_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from outputs_in(item)
