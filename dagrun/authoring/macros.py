"""``macros`` in templates: date helpers named and behaving as Airflow's, so a template
written for Airflow (``{{ macros.ds_add(ds, -1) }}``) renders the same here.

``datetime`` and ``timedelta`` are the standard classes, ``random``, ``uuid`` and ``time`` the
standard modules, and ``dateutil`` the package (its ``parser`` and ``relativedelta`` loaded),
as Airflow's ``macros`` has them; ``dateutil`` is imported when a template first asks for it.
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import datetime, timedelta
from types import ModuleType

__all__ = ["datetime", "ds_add", "ds_format", "random", "time", "timedelta", "uuid"]


def ds_add(ds: str, days: int) -> str:
    """``ds`` (YYYY-MM-DD) moved by ``days``, which may be negative."""
    return (datetime.strptime(ds, "%Y-%m-%d") + timedelta(days=days)).strftime("%Y-%m-%d")


def ds_format(ds: str, input_format: str, output_format: str) -> str:
    """``ds`` read with ``input_format`` and written with ``output_format`` (strftime codes)."""
    return datetime.strptime(ds, input_format).strftime(output_format)


def __getattr__(name: str) -> ModuleType:
    if name != "dateutil":
        raise AttributeError(f"module 'macros' has no attribute {name!r}")
    import dateutil
    import dateutil.parser
    import dateutil.relativedelta

    globals()["dateutil"] = dateutil
    return dateutil
