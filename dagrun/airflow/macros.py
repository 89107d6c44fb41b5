"""``airflow.macros``: the same module templates see as ``macros`` (dagrun's date helpers,
``datetime``, ``timedelta``, ``dateutil``, ``random``, ``uuid``, ``time``)."""

from __future__ import annotations

from dagrun.authoring.macros import datetime, ds_add, ds_format, random, time, timedelta, uuid


def __getattr__(name: str):
    from dagrun.authoring import macros

    return getattr(macros, name)


__all__ = ["datetime", "ds_add", "ds_format", "random", "time", "timedelta", "uuid"]
