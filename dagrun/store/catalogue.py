"""The catalogue of transitions (``statements.py``), as the store's functions run it: by
name, rendered, without importing the declarations (``sql.Catalogue``)."""

from __future__ import annotations

from dagrun.store.sql import Catalogue

#: Every statement that creates, admits, starts, claims, leases, completes, reaps or
#: clears runs, task instances and callback events.
TRANSITIONS = Catalogue("dagrun.store.statements")
