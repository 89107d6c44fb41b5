"""``macros`` in templates: date helpers named and behaving as Airflow's, so a template
written for Airflow (``{{ macros.ds_add(ds, -1) }}``) renders the same here.

``datetime`` and ``timedelta`` are the standard classes, as ``macros.datetime`` and
``macros.timedelta`` are in Airflow.
"""

from __future__ import annotations

from datetime import datetime, timedelta

__all__ = ["datetime", "ds_add", "ds_format", "timedelta"]


def ds_add(ds: str, days: int) -> str:
    """``ds`` (YYYY-MM-DD) moved by ``days``, which may be negative."""
    return (datetime.strptime(ds, "%Y-%m-%d") + timedelta(days=days)).strftime("%Y-%m-%d")


def ds_format(ds: str, input_format: str, output_format: str) -> str:
    """``ds`` read with ``input_format`` and written with ``output_format`` (strftime codes)."""
    return datetime.strptime(ds, input_format).strftime(output_format)
