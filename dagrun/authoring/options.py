"""Task options and sensor options: their defaults, and the checks that name the offending task.

A DAG checks its ``default_args`` here, a task its own options, ``@task.sensor`` and the
built-in sensors (``dagrun.runtime.sensors``) split a sensor's options from the rest; the
parser reads ``TASK_CALLBACKS`` to record which callbacks a task has. A module of its own,
so that the DAG, the task classes and the decorator share one table of options without
importing one another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dagrun.authoring.assets import names as asset_names
from dagrun.authoring.sensor_options import SensorMode, SensorSpec
from dagrun.errors import DagDefinitionError
from dagrun.states import CallbackEvent, TriggerRule
from dagrun.timing.instants import parse_duration

#: Task options and their defaults; ``default_args`` and per-task options override these.
TASK_DEFAULTS: dict[str, Any] = {
    "retries": 0,
    "retry_delay": 10.0,
    "retry_exponential_backoff": True,
    "max_retry_delay": 600.0,
    "execution_timeout": None,
    "trigger_rule": TriggerRule.ALL_SUCCESS.value,
    "depends_on_past": False,
    "priority_weight": 1,
    "pool": None,
    "params": None,
    "on_failure_callback": None,
    "on_retry_callback": None,
    "on_success_callback": None,
    "outlets": None,
}

#: Task options holding callbacks, and the event each one hears of.
TASK_CALLBACKS = {
    "on_success_callback": CallbackEvent.TASK_SUCCESS,
    "on_retry_callback": CallbackEvent.TASK_RETRY,
    "on_failure_callback": CallbackEvent.TASK_FAILURE,
}

_DURATION_OPTIONS = ("retry_delay", "max_retry_delay", "execution_timeout")

#: A sensor's options (``@task.sensor`` and the built-ins of ``dagrun.runtime.sensors``), with their
#: defaults: seconds between pokes, seconds from the first poke until it gives up, how it
#: waits, whether giving up skips it instead of failing it, whether the waits between pokes
#: grow, and the longest wait they grow to.
SENSOR_DEFAULTS: dict[str, Any] = {
    "poke_interval": 60.0,
    "timeout": 3600.0,
    "mode": SensorMode.RESCHEDULE.value,
    "soft_fail": False,
    "exponential_backoff": False,
    "max_wait": None,
}


def callables(
    value: Any, option: str, dag_id: str | None, task_id: str | None = None
) -> list[Callable[..., Any]]:
    """A callback option as a list of callables (None: none; one callable; a list)."""
    if value is None:
        return []
    found = list(value) if isinstance(value, list | tuple) else [value]
    for item in found:
        if not callable(item):
            raise DagDefinitionError(
                f"{option} must be a callable or a list of them, not {item!r}",
                dag_id=dag_id,
                task_id=task_id,
            )
    return found


def check_options(options: dict[str, Any], *, dag_id: str | None, task_id: str | None) -> dict:
    """Reject unknown options and bad values with an error naming the task."""
    unknown = sorted(set(options) - set(TASK_DEFAULTS))
    if unknown:
        raise DagDefinitionError(
            f"unknown option {unknown[0]!r} (known: {', '.join(sorted(TASK_DEFAULTS))})",
            dag_id=dag_id,
            task_id=task_id,
        )
    checked = dict(options)
    if "trigger_rule" in checked:
        try:
            checked["trigger_rule"] = TriggerRule(checked["trigger_rule"]).value
        except ValueError:
            rules = ", ".join(r.value for r in TriggerRule)
            raise DagDefinitionError(
                f"bad trigger_rule {checked['trigger_rule']!r} (one of: {rules})",
                dag_id=dag_id,
                task_id=task_id,
            ) from None
    if "retries" in checked and (not is_whole(checked["retries"]) or checked["retries"] < 0):
        raise DagDefinitionError(
            f"retries must be a whole number >= 0, not {checked['retries']!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    if "priority_weight" in checked and not is_whole(checked["priority_weight"]):
        raise DagDefinitionError(
            f"priority_weight must be a whole number, not {checked['priority_weight']!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    for name in TASK_CALLBACKS:
        if name in checked:
            checked[name] = callables(checked[name], name, dag_id, task_id)
    if checked.get("outlets") is not None:
        outlets = checked["outlets"]
        listed = outlets if isinstance(outlets, list | tuple) else [outlets]
        checked["outlets"] = asset_names(listed, "outlets", dag_id=dag_id, task_id=task_id)
    for name in _DURATION_OPTIONS:
        if checked.get(name) is not None:
            try:
                checked[name] = parse_duration(checked[name]).total_seconds()
            except Exception as exc:
                raise DagDefinitionError(f"{name}: {exc}", dag_id=dag_id, task_id=task_id) from None
    return checked


def is_whole(value: object) -> bool:
    """An int that is not a bool (``True`` is an int in Python, but never a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def split_sensor_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sensor's own options (``SENSOR_DEFAULTS``) apart from its task options."""
    sensor = {k: v for k, v in options.items() if k in SENSOR_DEFAULTS}
    return sensor, {k: v for k, v in options.items() if k not in SENSOR_DEFAULTS}


def sensor_spec(options: Mapping[str, Any], *, dag_id: str, task_id: str) -> SensorSpec:
    """A sensor's options checked (an error naming the task) and completed with defaults;
    durations (``poke_interval``, ``timeout``, ``max_wait`` unless None) are seconds, a
    timedelta or text such as "5m"."""
    given = {**SENSOR_DEFAULTS, **options}
    seconds = {}
    durations = ("poke_interval", "timeout", *(("max_wait",) if given["max_wait"] else ()))
    for name in durations:
        try:
            seconds[name] = parse_duration(given[name]).total_seconds()
        except Exception as exc:
            raise DagDefinitionError(f"{name}: {exc}", dag_id=dag_id, task_id=task_id) from None
        if seconds[name] <= 0:
            raise DagDefinitionError(
                f"{name} must be positive, not {given[name]!r}", dag_id=dag_id, task_id=task_id
            )
    try:
        mode = SensorMode(given["mode"])
    except ValueError:
        modes = " or ".join(repr(m.value) for m in SensorMode)
        raise DagDefinitionError(
            f"mode must be {modes}, not {given['mode']!r}", dag_id=dag_id, task_id=task_id
        ) from None
    for name in ("soft_fail", "exponential_backoff"):
        if not isinstance(given[name], bool):
            raise DagDefinitionError(
                f"{name} must be True or False, not {given[name]!r}",
                dag_id=dag_id,
                task_id=task_id,
            )
    return SensorSpec(
        seconds["poke_interval"],
        seconds["timeout"],
        mode.value,
        given["soft_fail"],
        given["exponential_backoff"],
        seconds.get("max_wait"),
    )
