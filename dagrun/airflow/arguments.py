"""Airflow's task arguments mapped onto dagrun's task options, with Airflow's defaults.

Operators and ``@task`` share this table: an argument dagrun acts on becomes its native
option (``retry_delay=timedelta(minutes=5)`` -> seconds); one that configures something
dagrun does not have (``owner``, ``queue``, ``sla``, ``weight_rule`` ...) is accepted and
listed once as a warning of the DAG file (``dags errors --warnings``), never refused;
documentation (``doc_md`` ...) is kept on the task. ``default_args`` apply to every argument
of an operator's ``__init__`` that the call leaves out, as Airflow applies them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from dagrun.airflow import mail
from dagrun.authoring.dag import DAG
from dagrun.errors import DagDefinitionError

#: Arguments dagrun acts on, as native options of the same name.
NATIVE = frozenset(
    {
        "retries",
        "retry_delay",
        "retry_exponential_backoff",
        "max_retry_delay",
        "execution_timeout",
        "trigger_rule",
        "depends_on_past",
        "priority_weight",
        "pool",
        "params",
        "on_failure_callback",
        "on_retry_callback",
        "on_success_callback",
        "outlets",
    }
)

#: Airflow's defaults where they differ from dagrun's: five minutes between tries, no
#: backoff (Airflow's ``retry_exponential_backoff=False``).
AIRFLOW_DEFAULTS: dict[str, Any] = {
    "retry_delay": 300.0,
    "retry_exponential_backoff": False,
}

#: Arguments dagrun keeps on the task without a warning: documentation and display only,
#: or read by the operator itself.
KEPT = frozenset(
    {
        "doc",
        "doc_md",
        "doc_rst",
        "doc_json",
        "doc_yaml",
        "task_display_name",
        "map_index_template",
        "inlets",
        "start_date",
        "end_date",
        "do_xcom_push",
        "multiple_outputs",
        "email",
        "email_on_failure",
        "email_on_retry",
    }
)

#: Arguments accepted but not acted on, each listed once as a warning of its file.
IGNORED = frozenset(
    {
        "owner",
        "queue",
        "sla",
        "weight_rule",
        "pool_slots",
        "run_as_user",
        "executor",
        "executor_config",
        "resources",
        "max_active_tis_per_dag",
        "max_active_tis_per_dagrun",
        "task_concurrency",
        "wait_for_downstream",
        "ignore_first_depends_on_past",
        "wait_for_past_depends_before_skipping",
        "on_execute_callback",
        "on_skipped_callback",
        "allow_nested_operators",
        "logger_name",
        "show_return_value_in_logs",
        "use_airflow_context",
    }
)

#: Every argument of Airflow's ``BaseOperator`` (besides ``task_id``, ``dag`` and
#: ``task_group``), which ``default_args`` may hold for any task.
BASE_ARGUMENTS = NATIVE | KEPT | IGNORED

#: Pools Airflow puts every task in by default: dagrun's tasks are in none.
DEFAULT_POOLS = frozenset({"default_pool"})


def split(
    arguments: Mapping[str, Any], dag: DAG, task_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Airflow task arguments as (native options, the arguments kept on the task); those
    dagrun ignores are warned about on ``dag`` and dropped. Airflow's defaults come first;
    ``email`` adds its mail to the callbacks (``dagrun.airflow.mail``)."""
    native: dict[str, Any] = dict(AIRFLOW_DEFAULTS)
    kept: dict[str, Any] = {}
    for name, value in arguments.items():
        if name in NATIVE:
            native[name] = _native_value(name, value)
        elif name in KEPT:
            kept[name] = value
        elif name in IGNORED:
            if value is not None and value is not False:  # once per file, at its first task
                dag.warn(f"{name}: accepted but not acted on by dagrun")
        else:
            raise DagDefinitionError(
                f"invalid argument {name!r} (not an argument of Airflow's tasks)",
                dag_id=dag.dag_id,
                task_id=task_id,
            )
    mail.add_email_callbacks(native, kept, dag, task_id)
    return native, kept


def _native_value(name: str, value: Any) -> Any:
    """An Airflow argument's value as the native option wants it."""
    if name == "pool" and value in DEFAULT_POOLS:
        return None
    if name == "max_retry_delay" and value is None:
        return 24 * 3600.0
    if name == "trigger_rule" and hasattr(value, "value"):
        return value.value
    if name == "outlets" and value is not None and not isinstance(value, list | tuple):
        return [value]
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def with_defaults(
    init: Any, given: Mapping[str, Any], default_args: Mapping[str, Any]
) -> dict[str, Any]:
    """``given`` completed from ``default_args`` for every parameter of ``init`` (an
    operator's ``__init__``, with its base classes') and every BaseOperator argument that
    the call leaves out, as Airflow's ``apply_defaults`` does; ``params`` merge, the call's
    winning."""
    if not default_args:
        return dict(given)
    accepted = set(BASE_ARGUMENTS) | _parameters(init)
    completed = {k: v for k, v in default_args.items() if k in accepted and k not in given}
    completed.update(given)
    if "params" in default_args and "params" in given:
        completed["params"] = {**default_args["params"], **given["params"]}
    return completed


@functools.cache
def _parameters(init: Any) -> frozenset[str]:
    """The named parameters of a class's ``__init__`` and those of its bases' (worked out
    once per class: signatures are slow to read, and a file makes many tasks of a class)."""
    names: set[str] = set()
    for klass in getattr(init, "__mro__", ()):
        method = klass.__dict__.get("__init__")
        if method is None:
            continue
        for name, param in inspect.signature(method).parameters.items():
            if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                names.add(name)
    names.discard("self")
    return frozenset(names)
