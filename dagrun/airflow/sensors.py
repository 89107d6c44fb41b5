"""Airflow's sensors over dagrun's: ``BaseSensorOperator`` (a file's own subclasses with
``poke(context)``), ``PokeReturnValue``, ``@task.sensor``'s hooks, and the built-ins
``PythonSensor``, ``BashSensor``, ``FileSensor``, ``TimeSensor``, ``TimeDeltaSensor``,
``DayOfWeekSensor`` (with ``WeekDay``); ``ExternalTaskSensor`` and ``ExternalTaskMarker``
are in ``dagrun.airflow.external_task``.

A sensor operator is a native sensor: its task carries the native ``SensorSpec`` (the spec
keeps it), and its ``execute`` pokes through ``dagrun.runtime.task_calls.sense``, so poke and
reschedule modes, the timeout from the first poke, ``soft_fail`` and the growing waits of
``exponential_backoff`` are the store's and the runner's, as for native sensors. Airflow's
defaults (``airflow/sensors/base.py``, the Task SDK's ``bases/sensor.py``): ``mode="poke"``,
``poke_interval=60``, ``timeout`` seven days (``[sensors] default_timeout``);
``deferrable=True`` waits as ``mode="reschedule"`` does, holding no worker slot. What a
poke raises follows the SDK's ``execute``: ``AirflowSkipException`` skips;
``AirflowSensorTimeout``, ``AirflowFailException`` and ``AirflowTaskTimeout`` fail with no
retry, or skip with ``soft_fail`` (or ``never_fail``); any other exception fails the
attempt (retries apply), is logged and taken as "not yet" with ``silent_fail``, or skips
with ``never_fail``.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dagrun.airflow.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
)
from dagrun.airflow.models import Context
from dagrun.airflow.operators import BaseOperator, determine_kwargs
from dagrun.authoring.options import sensor_spec
from dagrun.authoring.sensor_options import PokeReturnValue
from dagrun.errors import SkipTask
from dagrun.runtime import commands, current
from dagrun.runtime.connections import Connection, ConnectionNotFound
from dagrun.runtime.sensors import file_found
from dagrun.runtime.task_calls import bash_environment, sense
from dagrun.timing.instants import decision_now

__all__ = [
    "BaseSensorOperator",
    "BashSensor",
    "DayOfWeekSensor",
    "FileSensor",
    "PokeReturnValue",
    "PythonSensor",
    "TimeDeltaSensor",
    "TimeSensor",
    "WeekDay",
    "sensor_options",
    "unwrapped",
]

#: Airflow's ``[sensors] default_timeout``: seven days.
DEFAULT_TIMEOUT = 7 * 24 * 3600.0

#: Airflow's sensor arguments and their defaults (native ones and Airflow's own).
SENSOR_ARGUMENTS: dict[str, Any] = {
    "poke_interval": 60.0,
    "timeout": DEFAULT_TIMEOUT,
    "mode": "poke",
    "soft_fail": False,
    "exponential_backoff": False,
    "max_wait": None,
    "silent_fail": False,
    "never_fail": False,
    "deferrable": False,
}

#: What a poke raises that ``soft_fail`` turns into a skip (the SDK's
#: ``_SOFT_FAIL_EXCEPTIONS``): the sensor has given up on its own.
_GIVING_UP = (AirflowSensorTimeout, AirflowTaskTimeout, AirflowFailException)

_log = logging.getLogger("airflow.task")


def native_sensor(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Airflow's sensor arguments as the native sensor options (``SENSOR_DEFAULTS``):
    ``deferrable=True`` is ``mode="reschedule"``; a zero ``poke_interval`` or ``timeout``
    (Airflow allows them) becomes the shortest the native options allow."""
    given = {**SENSOR_ARGUMENTS, **arguments}
    options = {
        "poke_interval": _at_least_a_moment(given["poke_interval"]),
        "timeout": _at_least_a_moment(given["timeout"]),
        "mode": "reschedule" if given["deferrable"] else given["mode"],
        "soft_fail": given["soft_fail"],
        "exponential_backoff": given["exponential_backoff"],
        "max_wait": given["max_wait"],
    }
    if given["soft_fail"] and given["never_fail"]:
        raise ValueError(
            "soft_fail and never_fail are mutually exclusive, you can not provide both."
        )
    return options


def _at_least_a_moment(value: Any) -> Any:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    return 0.001 if seconds == 0 else value


class _Failures:
    """What a poke's exceptions mean, by the sensor's ``soft_fail``, ``silent_fail`` and
    ``never_fail``."""

    def __init__(self, soft_fail: bool, silent_fail: bool, never_fail: bool):
        self.soft_fail = soft_fail
        self.silent_fail = silent_fail
        self.never_fail = never_fail

    def poke(self, poke: Callable[[], Any]) -> PokeReturnValue:
        """One poke: its value as a ``PokeReturnValue`` (a plain value says only whether the
        sensor is done; the task then returns None, as in Airflow), or what its exception
        means."""
        try:
            found = poke()
        except (AirflowSkipException, SkipTask):
            raise
        except _GIVING_UP as exc:
            if self.soft_fail or self.never_fail:
                flag = "soft_fail" if self.soft_fail else "never_fail"
                raise AirflowSkipException(f"Skipping due to {flag} is set to True.") from exc
            raise
        except Exception as exc:
            if self.silent_fail:
                _log.exception("Sensor poke failed")
                found = False
            elif self.never_fail:
                raise AirflowSkipException("Skipping due to never_fail is set to True.") from exc
            else:
                raise
        return found if isinstance(found, PokeReturnValue) else PokeReturnValue(bool(found))


# ---------------------------------------------------------------- BaseSensorOperator


class BaseSensorOperator(BaseOperator):
    """Airflow's base of sensors: subclass it and write ``poke(self, context)`` returning
    a bool or a ``PokeReturnValue``; a done ``PokeReturnValue``'s ``xcom_value`` is the
    task's return value."""

    ui_color = "#e6f1f2"
    valid_modes: Iterable[str] = ("poke", "reschedule")

    def __init__(
        self,
        *,
        poke_interval: timedelta | float = 60,
        timeout: timedelta | float | None = None,
        soft_fail: bool = False,
        mode: str = "poke",
        exponential_backoff: bool = False,
        max_wait: timedelta | float | None = None,
        silent_fail: bool = False,
        never_fail: bool = False,
        deferrable: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.poke_interval = _seconds(poke_interval)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else _seconds(timeout)
        self.soft_fail = soft_fail
        self.mode = mode
        self.exponential_backoff = exponential_backoff
        self.max_wait = max_wait
        if isinstance(max_wait, int | float) and not isinstance(max_wait, bool):
            self.max_wait = timedelta(seconds=max_wait)
        self.silent_fail = silent_fail
        self.never_fail = never_fail
        self.deferrable = deferrable

    def finish(self) -> None:
        """Once the subclass's ``__init__`` is done (it may set ``mode`` and the rest):
        the native sensor options, checked (an import error naming the task)."""
        super().finish()
        self.sensor = sensor_spec(
            native_sensor({a: getattr(self, a) for a in SENSOR_ARGUMENTS}),
            dag_id=self.dag.dag_id,
            task_id=self.task_id,
        )

    @property
    def reschedule(self) -> bool:
        return self.mode == "reschedule"

    def poke(self, context: Context) -> bool | PokeReturnValue:
        raise AirflowException("Override me.")

    def execute(self, context: Context) -> Any:
        """Poke until done (``sense``: here in poke mode, once per attempt when
        rescheduled); the value of a done ``PokeReturnValue``, else None."""
        assert self.sensor is not None  # set by finish
        failures = _Failures(self.soft_fail, self.silent_fail, self.never_fail)
        once = context["ctx"].poke_once
        return sense(self.sensor, lambda: failures.poke(lambda: self.poke(context)), once)


def _seconds(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


# ---------------------------------------------------------------- @task.sensor's hooks


def sensor_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``@task.sensor``'s arguments with Airflow's sensor arguments as the native sensor
    options (Airflow's defaults: poke mode, seven days); ``silent_fail`` and
    ``never_fail`` are left to ``unwrapped``."""
    ours = {k: v for k, v in options.items() if k in SENSOR_ARGUMENTS}
    rest = {k: v for k, v in options.items() if k not in SENSOR_ARGUMENTS}
    return {**rest, **native_sensor(ours)}


def unwrapped(function: Callable[..., Any], options: Mapping[str, Any] | None = None) -> Any:
    """``function`` (its signature kept) as the native poke loop wants it: a
    ``PokeReturnValue`` always (a plain truthy value is done with no value, as Airflow's
    ``PythonSensor`` says), its exceptions as the sensor's ``options`` say."""
    given = {**SENSOR_ARGUMENTS, **(options or {})}
    failures = _Failures(given["soft_fail"], given["silent_fail"], given["never_fail"])

    @functools.wraps(function)
    def poke(*args: Any, **kwargs: Any) -> PokeReturnValue:
        return failures.poke(lambda: function(*args, **kwargs))

    return poke


# ---------------------------------------------------------------- the built-ins


class PythonSensor(BaseSensorOperator):
    """Done once ``python_callable(*op_args, **op_kwargs)`` (with the context names it
    asks for, ``templates_dict`` rendered) returns a truthy value or a done
    ``PokeReturnValue``."""

    template_fields: Sequence[str] = ("templates_dict", "op_args", "op_kwargs")

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        templates_dict: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        self.templates_dict = templates_dict

    def poke(self, context: Context) -> PokeReturnValue | bool:
        context["templates_dict"] = self.templates_dict
        kwargs = determine_kwargs(self.python_callable, self.op_args, context, self.op_kwargs)
        found = self.python_callable(*self.op_args, **kwargs)
        return found if isinstance(found, PokeReturnValue) else PokeReturnValue(bool(found))


class BashSensor(BaseSensorOperator):
    """Runs ``bash_command`` in a temporary folder at each poke: exit code 0 is done;
    ``retry_exit_code`` (None: any other code) is "not yet"; any other code fails the
    sensor with no retry (Airflow's ``AirflowFailException``). ``env``, when given, is the
    command's whole environment (with dagrun's and Airflow's run variables)."""

    template_fields: Sequence[str] = ("bash_command", "env")

    def __init__(
        self,
        *,
        bash_command: str,
        env: Mapping[str, str] | None = None,
        output_encoding: str = "utf-8",
        retry_exit_code: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.bash_command = bash_command
        self.env = env
        self.output_encoding = output_encoding
        self.retry_exit_code = retry_exit_code

    def poke(self, context: Context) -> bool:
        attempt = current.current()
        assert attempt is not None  # the runner sets it for the attempt
        extra = {str(k): str(v) for k, v in (self.env or {}).items()}
        with tempfile.TemporaryDirectory(prefix="dagruntmp") as folder:
            code = commands.run_command(
                ["bash", "-c", self.bash_command],
                env=bash_environment(attempt, extra, inherit=self.env is None),
                cwd=folder,
            )
        self.log.info("Command exited with return code %s", code)
        if code == 0:
            return True
        if self.retry_exit_code is not None and code != self.retry_exit_code:
            raise AirflowFailException(f"Command exited with return code {code}")
        return False


class FileSensor(BaseSensorOperator):
    """Waits until ``filepath`` (a path or a glob; ``**`` across folders with
    ``recursive``), joined to the ``path`` of connection ``fs_conn_id``, matches a file, or
    a folder with a file somewhere under it. A missing ``fs_default`` is Airflow's default
    connection of that name (path ``/``)."""

    template_fields: Sequence[str] = ("filepath",)
    ui_color = "#91818a"

    def __init__(
        self,
        *,
        filepath: str,
        fs_conn_id: str = "fs_default",
        recursive: bool = False,
        start_from_trigger: bool = False,
        trigger_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.filepath = filepath
        self.fs_conn_id = fs_conn_id
        self.recursive = recursive

    @property
    def path(self) -> str:
        try:
            base = str(Connection.get(self.fs_conn_id).extra.get("path", ""))
        except ConnectionNotFound:
            if self.fs_conn_id != "fs_default":
                raise
            base = "/"
        return os.path.join(base, self.filepath)

    def poke(self, context: Context) -> bool:
        self.log.info("Poking for file %s", self.path)
        return file_found(self.path, self.recursive, folder_needs_file=True)


def _zone(task: BaseOperator) -> ZoneInfo:
    return ZoneInfo(task.dag.timezone)


class TimeSensor(BaseSensorOperator):
    """Done once the time of day in the DAG's time zone is past ``target_time``, on the
    day of the poke: Airflow 2's meaning (``make_naive(utcnow(), dag.timezone).time() >
    target_time``), which the standard provider keeps for a poke on the day the file was
    parsed (it fixes that day when the file is parsed, so a long-lived process can keep
    a past day; dagrun does not)."""

    def __init__(
        self,
        *,
        target_time: time,
        start_from_trigger: bool = False,
        end_from_trigger: bool = False,
        trigger_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.target_time = target_time

    def poke(self, context: Context) -> bool:
        now = decision_now().astimezone(_zone(self))
        target = datetime.combine(now.date(), self.target_time, now.tzinfo)
        self.log.info("Checking if the time (%s) has come", target.isoformat())
        return now > target


class TimeDeltaSensor(BaseSensorOperator):
    """Done once ``delta`` has passed since the end of the run's data interval."""

    def __init__(self, *, delta: timedelta, end_from_trigger: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.delta = delta

    def poke(self, context: Context) -> bool:
        return decision_now() > context["data_interval_end"] + self.delta


class TimeSensorAsync(TimeSensor):
    """Airflow's deferrable ``TimeSensor``: here one that waits in reschedule mode."""

    def __init__(self, **kwargs: Any):
        super().__init__(**{"deferrable": True, **kwargs})


class TimeDeltaSensorAsync(TimeDeltaSensor):
    """Airflow's deferrable ``TimeDeltaSensor``: here one that waits in reschedule mode."""

    def __init__(self, **kwargs: Any):
        super().__init__(**{"deferrable": True, **kwargs})


@enum.unique
class WeekDay(enum.IntEnum):
    """The days of the week by their ISO numbers (Airflow's ``WeekDay``)."""

    MONDAY = 1
    TUESDAY = 2
    WEDNESDAY = 3
    THURSDAY = 4
    FRIDAY = 5
    SATURDAY = 6
    SUNDAY = 7

    @classmethod
    def get_weekday_number(cls, week_day_str: str) -> WeekDay:
        name = week_day_str.upper()
        if name not in cls.__members__:
            raise AttributeError(f'Invalid Week Day passed: "{week_day_str}"')
        return cls[name]

    @classmethod
    def convert(cls, day: str | WeekDay) -> int:
        return day if isinstance(day, WeekDay) else cls.get_weekday_number(day)

    @classmethod
    def validate_week_day(cls, week_day: Any) -> set[int]:
        """A day's name, a ``WeekDay``, or several of either, as a set of ISO numbers."""
        if isinstance(week_day, str | WeekDay):
            week_day = {week_day}
        if not isinstance(week_day, Iterable):
            raise TypeError(
                f"Unsupported Type for week_day parameter: {type(week_day)}."
                "Input should be iterable type: str, set, list, dict or Weekday enum type"
            )
        return {cls.convert(day) for day in week_day}


class DayOfWeekSensor(BaseSensorOperator):
    """Done on the days of the week ``week_day`` names: by the run's logical date with
    ``use_task_logical_date``, else by today's date. Both in the DAG's time zone, where
    dagrun's dates are (Airflow's context dates and its clock are in UTC: the same day for
    a UTC DAG)."""

    def __init__(
        self, *, week_day: Any, use_task_logical_date: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.week_day = week_day
        self.use_task_logical_date = use_task_logical_date
        self._week_day_num = WeekDay.validate_week_day(week_day)

    def poke(self, context: Context) -> bool:
        if self.use_task_logical_date:
            day = context["logical_date"].astimezone(_zone(self))
        else:
            day = decision_now().astimezone(_zone(self))
        return day.isoweekday() in self._week_day_num
