"""The hot statements, rendered once per dialect and run straight on the driver's cursor.

A worker's group commit sends a few statements for every task it records and claims. For
such small statements SQLAlchemy's execution path (execution context, per-row parameter
processing, ``Row`` objects) costs about three times the driver's own work, and it is paid
for every task. The statements stay SQLAlchemy Core expressions, written once for both
databases in ``transitions.py``; this module renders each to SQL text once per dialect,
keeps its bind and result processors (so instants are stored exactly as SQLAlchemy stores
them), and then runs it with one ``execute``/``executemany`` on the DBAPI cursor inside the
caller's transaction. Driver errors become SQLAlchemy's, so callers handle them as before.
"""

from __future__ import annotations

import re
import time
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement

Params = Mapping[str, Any]
_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")

#: Set by ``bench.profile`` to see these statements (they bypass SQLAlchemy's events).
trace: Callable[[str, float], None] | None = None


class Prepared:
    """One statement rendered for one dialect: its SQL, parameter order and processors."""

    def __init__(self, statement: ClauseElement, dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        self.sql = compiled.string
        self.positional = bool(compiled.positional)
        self.order = list(compiled.positiontup or ())
        self.defaults = {name: bind.effective_value for name, bind in binds.items()}
        self.expanding = [name for name, bind in binds.items() if bind.expanding]
        self.processors = [
            (name, _last_value_memo(processor))
            for name, bind in binds.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect))
            and not bind.expanding
        ]
        self.row, self.readers = _result_shape(statement, dialect)

    def one(self, params: Params) -> tuple[str, Sequence[Any] | dict[str, Any]]:
        """SQL text and driver parameters for one execution. An ``IN`` list gets one
        placeholder per element, as SQLAlchemy renders an expanding parameter."""
        values = {**self.defaults, **params}
        if not self.expanding:
            return self.sql, self._args(values, self.order)
        counts = {}
        for name in self.expanding:
            items = list(values.pop(name))
            counts[name] = len(items)
            values.update({f"{name}_{i}": v for i, v in enumerate(items)})
        order = [
            expanded
            for name in self.order
            for expanded in (
                [f"{name}_{i}" for i in range(counts[name])] if name in counts else [name]
            )
        ]
        sql = _POSTCOMPILE.sub(lambda m: self._placeholders(m.group(1), counts), self.sql)
        return sql, self._args(values, order)

    def many(self, rows: Iterable[Params]) -> list:
        """Driver parameters for an ``executemany`` (no ``IN`` lists there)."""
        return [self._args({**self.defaults, **r}, self.order) for r in rows]

    def _placeholders(self, name: str, counts: dict[str, int]) -> str:
        """``?, ?, ?`` or ``%(name_0)s, ...``; an empty list matches nothing."""
        if not counts[name]:
            return "NULL"
        if self.positional:
            return ", ".join(["?"] * counts[name])
        return ", ".join(f"%({name}_{i})s" for i in range(counts[name]))

    def _args(self, values: dict[str, Any], order: list[str]) -> Sequence[Any] | dict[str, Any]:
        for name, processor in self.processors:
            values[name] = processor(values[name])
        if self.positional:
            return [values[name] for name in order]
        return values


def _last_value_memo(processor: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The processor, remembering its last answer: the rows of one batch share their
    instants (``now``, a lease's end), so most calls repeat the previous one. The pair is
    replaced as one reference, so threads sharing it never see half an update."""
    last: list[tuple[Any, Any]] = [(object(), None)]

    def process(value: Any) -> Any:
        if value is None:
            return None
        seen, answer = last[0]
        if seen is not value:
            answer = processor(value)
            last[0] = (value, answer)
        return answer

    return process


def _result_shape(statement: ClauseElement, dialect) -> tuple[type | None, list]:
    """A named tuple type for the rows a SELECT or RETURNING gives, and each column's
    result processor (``None`` where the driver's value is already right)."""
    columns = list(getattr(statement, "exported_columns", ()) or ())
    if not columns:
        return None, []
    row = namedtuple("Row", [c.key for c in columns], rename=True)
    readers = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns]
    return row, readers


_cache: dict[tuple[int, str], tuple[ClauseElement, Prepared]] = {}


def prepared(statement: ClauseElement, dialect) -> Prepared:
    """The statement rendered for ``dialect``, once per process (statements are module
    constants; the cache holds the statement too, so its id is never reused)."""
    key = (id(statement), dialect.name)
    entry = _cache.get(key)
    if entry is None:
        entry = _cache[key] = (statement, Prepared(statement, dialect))
    return entry[1]


def execute(conn: Connection, statement: ClauseElement, params: Params | None = None):
    """Run ``statement`` once; returns the DBAPI cursor (``rowcount``, and rows through
    ``rows``)."""
    sql, args = prepared(statement, conn.dialect).one(params or {})
    return _run(conn, sql, args, many=False)


def execute_many(conn: Connection, statement: ClauseElement, rows: Iterable[Params]) -> int:
    """Run ``statement`` for every parameter row in one ``executemany``; the rows changed."""
    args = prepared(statement, conn.dialect).many(rows)
    if not args:
        return 0
    return _run(conn, prepared(statement, conn.dialect).sql, args, many=True).rowcount


def rows(conn: Connection, statement: ClauseElement, params: Params | None = None) -> list:
    """The rows of a SELECT or RETURNING statement, as named tuples of processed values."""
    row = prepared(statement, conn.dialect).row
    return [row._make(r) for r in tuples(conn, statement, params)]


def tuples(conn: Connection, statement: ClauseElement, params: Params | None = None) -> list:
    """The rows as plain tuples (for the many small rows of a group commit)."""
    p = prepared(statement, conn.dialect)
    fetched = execute(conn, statement, params).fetchall()
    readers = [(i, f) for i, f in enumerate(p.readers) if f is not None]
    if not readers:
        return fetched
    processed = []
    for r in fetched:
        r = list(r)
        for i, f in readers:
            r[i] = f(r[i])
        processed.append(tuple(r))
    return processed


def _run(conn: Connection, sql: str, args, *, many: bool):
    dbapi = conn.connection.dbapi_connection
    cursor = dbapi.cursor()
    started = time.perf_counter() if trace else 0.0
    try:
        if many:
            cursor.executemany(sql, args)
        else:
            cursor.execute(sql, args)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            sql, args, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
        ) from exc
    if trace:
        trace(sql, time.perf_counter() - started)
    return cursor
