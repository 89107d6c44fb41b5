"""The statements of the store's modules, as SQLAlchemy Core: the one place each is
written, for both databases. ``queries/dag_reads.py`` declares what ``dag_reads`` runs, and
so on (the catalogue of transitions is ``store/statements.py``). The store's functions
name them through a ``sql.Catalogue``, so a process imports this package, and SQLAlchemy,
only to render a statement no earlier process rendered (``rendered``)."""

from __future__ import annotations

import importlib
import itertools
import pkgutil

from dagrun.store import sql


def every_statement() -> dict[str, tuple[str, sql.Statement]]:
    """Every statement the store declares, by the name it is kept under (``rendered``),
    with the module whose functions run it: the catalogue's (``statements``), each module's
    here, and the families built per arguments (every filter of ``run_reads.runs``, the
    unions of one and of two DAGs; larger unions are rendered when first met)."""
    from dagrun.store import run_reads

    found: dict[str, tuple[str, sql.Statement]] = {}
    modules = [("statements", "dagrun.store.statements")] + [
        (info.name, f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
    ]
    for name, path in modules:
        for value in vars(importlib.import_module(path)).values():
            if isinstance(value, sql.Statement):
                known = found.setdefault(value.name, (name, value))
                if known[1] is not value:
                    raise AssertionError(f"two statements are named {value.name!r}")
    variants = [
        run_reads.Q.variant("run_list", "".join(flags))
        for flags in itertools.product("ny", repeat=4)
    ] + [
        run_reads.Q.variant("union", part, count)
        for part in ("latest_run", "recent_runs")
        for count in (1, 2)
    ]
    for named in variants:
        found[named.name] = ("run_reads", named.declared())
    return found
