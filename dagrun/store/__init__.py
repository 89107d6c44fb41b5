"""The metadata store: schema, engine setup, and the statements that read and change it."""

from dagrun.store.engine import Store

__all__ = ["Store"]
