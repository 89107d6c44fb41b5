"""Airflow's exceptions, each also the native exception that gives it Airflow's meaning:
``AirflowSkipException`` ends the task skipped (``dagrun.SkipTask``), ``AirflowFailException``
and ``AirflowSensorTimeout`` fail it with no retry (``dagrun.NonRetryableError``); any other
exception is a failure that retries, as in Airflow."""

from __future__ import annotations

from dagrun.errors import NonRetryableError, SkipTask


class AirflowException(Exception):
    """The root of Airflow's exceptions; raised from a task, a failure that retries."""

    status_code = 500


class AirflowBadRequest(AirflowException):
    status_code = 400


class AirflowNotFoundException(AirflowException):
    status_code = 404


class AirflowSkipException(AirflowException, SkipTask):
    """Raised from a task: the task ends skipped."""


class AirflowFailException(AirflowException, NonRetryableError):
    """Raised from a task: the task fails with no retry."""


class AirflowSensorTimeout(AirflowException, NonRetryableError):
    """Raised from a sensor's poke: the sensor fails with no retry."""


class AirflowTaskTimeout(AirflowException):
    """What Airflow raises in a task past its ``execution_timeout``; dagrun kills the attempt
    instead, so a task only sees it if it raises it itself."""
