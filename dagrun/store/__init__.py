"""The metadata store: schema, engine setup, and the statements that read and change it.

``Store`` is imported on first use (PEP 562): a leaf of the store (``sensitive``) is read by
processes that never open a database, such as a parse child importing an Airflow file, and
should not cost them SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagrun.store.engine import Store

__all__ = ["Store"]


def __getattr__(name: str) -> Any:
    if name != "Store":
        raise AttributeError(f"module 'dagrun.store' has no attribute {name!r}")
    from dagrun.store.engine import Store

    globals()["Store"] = Store
    return Store
