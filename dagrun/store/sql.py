"""The one way dagrun runs SQL: statements rendered per dialect, run on the driver's cursor.

A worker's group commit sends a few statements for every task it records and claims. For
such small statements SQLAlchemy's execution path (execution context, per-row parameter
processing, ``Row`` objects) costs about three times the driver's own work, and it is paid
for every task; importing SQLAlchemy costs a command more than a one-task run does. So
every statement, the catalogue's (``statements.py``) and those of ``queries/`` alike, is a
SQLAlchemy Core expression written once for both databases, rendered once per installation
(``rendered``) into a ``Layout``: its SQL text, parameter order and ``IN`` lists, and the
conversion of each bind and column (``conversions``), all plain values. It runs with one
``execute``/``executemany`` on the driver's cursor inside the caller's transaction, on a
direct connection (``direct``) or on SQLAlchemy's. The store's functions name statements
through a ``Catalogue`` (``Named``), so running one that was rendered imports neither its
declaration nor SQLAlchemy; an expression built per call is rendered per call. A driver
error leaves as the driver's on a direct connection and as SQLAlchemy's on its own, and
``Store`` turns either into a ``StoreError``.

Rendering reads three private details of SQLAlchemy's compiler (``bind_names``,
``positiontup`` and the ``__[POSTCOMPILE_name]`` marker of an ``IN`` list); the version range
in ``pyproject.toml`` is pinned to the minor version this was checked against, and
``check_internals`` fails loudly, naming what changed, rather than running wrong SQL.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import time
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from dagrun.errors import StoreError
from dagrun.store import conversions, rendered
from dagrun.store.direct import DirectConnection, driver_of

if TYPE_CHECKING:
    import sqlalchemy
    from sqlalchemy import Connection
    from sqlalchemy.sql import ClauseElement

Params = Mapping[str, Any]
_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")

#: Told of every statement run here, as (SQL text, driver parameters, seconds): SQLAlchemy's
#: own events do not see these statements. See ``observed``.
_observers: list[Callable[[str, Any, float], None]] = []


@contextmanager
def observed(observer: Callable[[str, Any, float], None]) -> Iterator[None]:
    """Tell ``observer`` of every statement run while the block runs (in any thread): what
    tests count and ``bench.profile`` times."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


#: Items per ``IN`` list where a caller may hold thousands (a backfill's runs): one
#: statement with 9,000 parameters stayed prepared in its connection, megabytes big.
IN_CHUNK = 500


def chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``IN_CHUNK``, for ``IN`` lists of a bounded length."""
    size = IN_CHUNK
    for start in range(0, len(items), size):
        yield items[start : start + size]


def bind(name: str, **kwargs) -> sqlalchemy.BindParameter:
    """A bind parameter ``b_<name>``: every statement names its parameters so."""
    from sqlalchemy import bindparam

    return bindparam(f"b_{name}", **kwargs)


def bind_list(name: str) -> sqlalchemy.BindParameter:
    """An ``IN`` list bound at execution (``b_<name>``, a list)."""
    from sqlalchemy import bindparam

    return bindparam(f"b_{name}", expanding=True)


def binds(columns: str) -> dict:
    """``column: b_<column>`` for each of the space-separated ``columns`` (an INSERT's values)."""
    return {c: bind(c) for c in columns.split()}


def dialect_insert(dialect: str, table):
    """The dialect's INSERT, which knows ``ON CONFLICT`` on both SQLite and PostgreSQL."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def upsert(
    table,
    key: str | tuple[str, ...],
    changed: tuple[str, ...],
    kept_if_null: tuple[str, ...] = (),
) -> Callable[[str], ClauseElement]:
    """INSERT of every column from ``b_<column>``; an existing ``key`` (a column or the
    columns of the primary key) gets ``changed`` updated, and ``kept_if_null`` too unless
    the new value is null (``ON CONFLICT``, spelled by each dialect's own insert)."""
    keys = [key] if isinstance(key, str) else list(key)

    def build(dialect: str):
        from sqlalchemy import func

        stmt = dialect_insert(dialect, table).values({c.name: bind(c.name) for c in table.columns})
        updates = {c: stmt.excluded[c] for c in changed}
        updates.update({c: func.coalesce(stmt.excluded[c], table.c[c]) for c in kept_if_null})
        return stmt.on_conflict_do_update(index_elements=keys, set_=updates)

    return build


def insert_new(table, columns: tuple[str, ...], **constants) -> Callable[[str], ClauseElement]:
    """INSERT of ``columns`` from ``b_<column>`` that leaves an existing row alone."""

    def build(dialect: str):
        values = {**{c: bind(c) for c in columns}, **constants}
        return dialect_insert(dialect, table).values(values).on_conflict_do_nothing()

    return build


class Statement:
    """A named statement: what it does, and its SQL (an expression, or a function of the
    dialect's name: for the few spelled per dialect, like ``ON CONFLICT``, and for those
    built on first use). ``name`` is set by the module that declares it (``name_all``)."""

    def __init__(self, purpose: str, sql: ClauseElement | Callable[[str], ClauseElement]):
        self.name = ""
        self.purpose = purpose
        self._sql = sql
        self._prepared: dict[str, Prepared] = {}

    def expression(self, dialect_name: str) -> ClauseElement:
        return self._sql(dialect_name) if callable(self._sql) else self._sql

    def prepared(self, dialect: str) -> Prepared:
        found = self._prepared.get(dialect)
        if found is None:
            found = self._prepared[dialect] = self._render(dialect)
        return found

    def _render(self, dialect: str) -> Prepared:
        """As an earlier process rendered it (``rendered``), else compiled now and kept."""
        if not self.name:
            return Prepared.compile(self.expression(dialect), dialect)
        layout = rendered.kept(
            dialect, self.name, lambda: Layout.of(self.expression(dialect), dialect)
        )
        return Prepared(layout, dialect)

    def __repr__(self) -> str:
        return f"<Statement {self.name}: {self.purpose}>"


def name_all(namespace: dict[str, Any], prefix: str = "") -> dict[str, Statement]:
    """Name every statement of a module after its constant (``prefix`` + lower case), the
    name its rendering is kept under (``rendered``); the module's statements by name."""
    found = {}
    for constant, value in namespace.items():
        if isinstance(value, Statement):
            value.name = prefix + constant.lower()
            found[value.name] = value
    return found


def render_all(dialect: str, statements: Callable[[], dict[str, tuple[str, Statement]]]) -> None:
    """Render every statement for ``dialect`` once per installation, as ``compileall`` does
    bytecode: when a process makes or migrates a schema (it has loaded SQLAlchemy for that)
    and can keep the file, so that no later command renders, nor imports SQLAlchemy."""
    if sys.dont_write_bytecode or rendered.get(dialect, _EVERYTHING):
        return
    for name, (_, statement) in statements().items():
        if rendered.get(dialect, name) is None:
            rendered.put(dialect, name, Layout.of(statement.expression(dialect), dialect))
    rendered.put(dialect, _EVERYTHING, True)
    rendered.save()


#: Kept once every statement was rendered.
_EVERYTHING = "every statement"


class Catalogue:
    """The statements a module declares, by constant, without importing the module: the
    store's functions run ``Q.LOCK_DAG`` where ``Q = Catalogue("dagrun.store.statements")``.
    The declarations are SQLAlchemy Core; a process imports them (and SQLAlchemy) only to
    render a statement no earlier process rendered (``rendered``)."""

    def __init__(self, module: str, prefix: str = "") -> None:
        self.module = module
        self.prefix = prefix
        self._variants: dict[tuple, Named] = {}

    def __getattr__(self, constant: str) -> Named:
        if not constant.isupper():
            raise AttributeError(constant)
        named = Named(self, constant)
        setattr(self, constant, named)  # found as an attribute from now on
        return named

    def variant(self, builder: str, *args: str | int) -> Named:
        """One of a family of statements the module builds per arguments (a filter's
        conditions, a number of parts): ``builder(*args)`` of the module, a ``Statement``
        named for them."""
        key = (builder, *args)
        found = self._variants.get(key)
        if found is None:
            found = self._variants[key] = Named(self, builder, args)
        return found

    def declared(self, constant: str, args: tuple[str | int, ...] = ()) -> Statement:
        """The declaration itself (importing its module)."""
        found = getattr(importlib.import_module(self.module), constant)
        if args:
            found = found(*args)
        if not isinstance(found, Statement):
            raise AttributeError(f"{self.module}.{constant} is not a statement")
        return found


class Named:
    """One statement of a ``Catalogue``: its rendering when an earlier process kept it,
    else its declaration's."""

    def __init__(
        self, catalogue: Catalogue, constant: str, args: tuple[str | int, ...] = ()
    ) -> None:
        self.catalogue = catalogue
        self.constant = constant
        self.args = args
        self.name = catalogue.prefix + ".".join([constant.lower(), *map(str, args)])
        self._prepared: dict[str, Prepared] = {}

    def prepared(self, dialect: str) -> Prepared:
        found = self._prepared.get(dialect)
        if found is None:
            layout = rendered.get(dialect, self.name)
            if layout is None:
                found = self.declared().prepared(dialect)
            else:
                found = Prepared(layout, dialect)
            self._prepared[dialect] = found
        return found

    def declared(self) -> Statement:
        """Its declaration, named as its rendering is kept (importing its module)."""
        statement = self.catalogue.declared(self.constant, self.args)
        statement.name = self.name
        return statement

    def __repr__(self) -> str:
        return f"<Named {self.name}>"


class Layout(NamedTuple):
    """What running a statement needs of its compiled form, in values that pickle and need
    no SQLAlchemy: its SQL, parameter order, defaults and ``IN`` lists, the conversion of
    each bind that has one, and its result columns' names and conversions
    (``conversions``)."""

    sql: str
    positional: bool
    order: tuple[str, ...]
    defaults: dict[str, Any]
    expanding: tuple[str, ...]
    bind_kinds: tuple[tuple[str, str], ...]
    columns: tuple[str, ...]
    column_kinds: tuple[str | None, ...]

    @classmethod
    def of(cls, statement: ClauseElement, dialect: str) -> Layout:
        # Any: bind_names, positional and positiontup are the compiler's private details
        # (``check_internals``), which its type does not declare.
        compiled: Any = statement.compile(dialect=sqlalchemy_dialect(dialect))
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        columns = list(getattr(statement, "exported_columns", ()) or ())
        # str(): SQLAlchemy names things with a subclass of str (``quoted_name``), which
        # would import SQLAlchemy to unpickle.
        return cls(
            sql=str(compiled.string),
            positional=bool(compiled.positional),
            order=tuple(map(str, compiled.positiontup or ())),
            defaults={str(name): bind.effective_value for name, bind in binds.items()},
            expanding=tuple(str(name) for name, bind in binds.items() if bind.expanding),
            bind_kinds=tuple(
                (str(name), kind)
                for name, bind in binds.items()
                if not bind.expanding and (kind := conversion_of(bind.type))
            ),
            columns=tuple(
                str(getattr(c, "key", None) or getattr(c, "name", None) or "_") for c in columns
            ),
            column_kinds=tuple(conversion_of(c.type) for c in columns),
        )


@functools.cache
def sqlalchemy_dialect(name: str) -> Any:
    """The SQLAlchemy dialect that renders for ``name`` (PostgreSQL through psycopg 3)."""
    from sqlalchemy.dialects import postgresql, sqlite

    if name not in ("postgresql", "sqlite"):
        raise StoreError(f"dagrun renders statements for SQLite and PostgreSQL, not {name}")
    dialect = postgresql.psycopg.dialect() if name == "postgresql" else sqlite.pysqlite.dialect()
    check_internals(dialect)
    return dialect


def conversion_of(kind: Any) -> str | None:
    """The conversion (``conversions``) of a value of SQLAlchemy type ``kind``; None for the
    types whose values go to and come from the driver as they are. A type with conversions
    of its own that dagrun does not know stops the rendering, never converts wrongly."""
    from sqlalchemy import Boolean, DateTime, Float, Integer, String
    from sqlalchemy.types import NullType

    from dagrun.store.schema import UtcDateTime

    if isinstance(kind, UtcDateTime):
        return conversions.INSTANT
    if isinstance(kind, DateTime):
        return conversions.DATETIME
    if isinstance(kind, Boolean):
        return conversions.BOOLEAN
    if isinstance(kind, Float):
        return conversions.FLOAT
    if isinstance(kind, Integer | String | NullType):
        return None
    raise StoreError(f"no conversion of {kind!r} values is known to dagrun.store.conversions")


class Prepared:
    """One statement rendered for one dialect: its SQL, parameter order and conversions."""

    def __init__(self, layout: Layout, dialect: str) -> None:
        self.sql = layout.sql
        self.positional = layout.positional
        self.order = list(layout.order)
        self.defaults = layout.defaults
        self.expanding = list(layout.expanding)
        self.processors = [
            (name, _last_value_memo(convert))
            for name, kind in layout.bind_kinds
            if (convert := conversions.bind(dialect, kind))
        ]
        self.columns = layout.columns
        self.readers = [
            (i, convert)
            for i, kind in enumerate(layout.column_kinds)
            if (convert := conversions.result(dialect, kind))
        ]

    @functools.cached_property
    def row(self) -> Any:
        """The named tuple of its rows (made on first use: most statements' rows are read
        as plain tuples)."""
        return _row_type(self.columns)

    @classmethod
    def compile(cls, statement: ClauseElement, dialect: str) -> Prepared:
        return cls(Layout.of(statement, dialect), dialect)

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


@functools.lru_cache(maxsize=512)
def _row_type(names: tuple[str, ...]) -> type:
    """One named tuple type per list of column names: reads built per call share them."""
    return namedtuple("Row", names, rename=True)


Runnable: TypeAlias = "Statement | Named | ClauseElement"


def _prepared(conn: Connection, statement: Runnable) -> Prepared:
    if isinstance(statement, Statement | Named):
        return statement.prepared(conn.dialect.name)
    return Prepared.compile(statement, conn.dialect.name)


def execute(conn: Connection, statement: Runnable, params: Params | None = None):
    """Run ``statement`` once; returns the DBAPI cursor (``rowcount``; rows through
    ``rows``)."""
    p = _prepared(conn, statement)
    sql, args = p.one(params or {})
    return _run(conn, p, sql, args, many=False)


def execute_many(conn: Connection, statement: Runnable, rows: Iterable[Params]) -> int:
    """Run ``statement`` for every parameter row in one ``executemany``; the rows changed."""
    p = _prepared(conn, statement)
    args = p.many(rows)
    if not args:
        return 0
    return _run(conn, p, p.sql, args, many=True).rowcount


def rows(conn: Connection, statement: Runnable, params: Params | None = None) -> list:
    """The rows of a SELECT or RETURNING statement, as named tuples of processed values."""
    p = _prepared(conn, statement)
    return [p.row._make(r) for r in _fetch(conn, p, params)]


def tuples(conn: Connection, statement: Runnable, params: Params | None = None) -> list:
    """The rows as plain tuples (for the many small rows of a group commit)."""
    return _fetch(conn, _prepared(conn, statement), params)


def first(conn: Connection, statement: Runnable, params: Params | None = None):
    """The first row, or None."""
    found = rows(conn, statement, params)
    return found[0] if found else None


def scalar(conn: Connection, statement: Runnable, params: Params | None = None) -> Any:
    """The first column of the first row, or None when there is no row."""
    found = tuples(conn, statement, params)
    return found[0][0] if found else None


def scalars(conn: Connection, statement: Runnable, params: Params | None = None) -> list:
    """The first column of every row."""
    return [r[0] for r in tuples(conn, statement, params)]


def _fetch(conn: Connection, p: Prepared, params: Params | None) -> list:
    sql, args = p.one(params or {})
    cursor = _run(conn, p, sql, args, many=False)
    fetched = cursor.fetchall()
    readers = p.readers
    if not readers:
        return fetched
    processed = []
    for r in fetched:
        r = list(r)
        for i, f in readers:
            r[i] = f(r[i])
        processed.append(tuple(r))
    return processed


def _run(conn: Connection, p: Prepared, sql: str, args, *, many: bool):
    """On a ``DirectConnection`` a driver error leaves as the driver raised it; through
    SQLAlchemy, as SQLAlchemy's (``Store`` turns either into a ``StoreError``)."""
    direct = isinstance(conn, DirectConnection)
    cursor = driver_of(conn).cursor()
    started = time.perf_counter() if _observers else 0.0
    try:
        if many:
            cursor.executemany(sql, args)
        else:
            cursor.execute(sql, args)
    except Exception as exc:
        if direct or not isinstance(exc, conn.dialect.loaded_dbapi.Error):
            raise
        from sqlalchemy.exc import DBAPIError

        raise DBAPIError.instance(
            sql, args, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
        ) from exc
    if _observers:
        seconds = time.perf_counter() - started
        for observer in list(_observers):
            observer(sql, args, seconds)
    return cursor


def check_internals(dialect) -> None:
    """Fail loudly if this SQLAlchemy renders statements differently from what ``Prepared``
    reads (its private ``bind_names``, ``positiontup`` and ``IN``-list marker)."""
    from sqlalchemy import bindparam, column, select, table

    probe = table("probe", column("a"), column("b"))
    statement = select(probe.c.a).where(
        probe.c.a.in_(bindparam("b_list", expanding=True)), probe.c.b == bindparam("b_one")
    )
    try:
        compiled: Any = statement.compile(dialect=dialect)  # its private details, as above
        names = set(compiled.bind_names.values())
        marker = _POSTCOMPILE.search(compiled.string)
        ordered = compiled.positiontup if compiled.positional else ["b_list", "b_one"]
    except AttributeError as exc:
        raise StoreError(_internals_changed(str(exc))) from exc
    if names != {"b_list", "b_one"} or marker is None or list(ordered) != ["b_list", "b_one"]:
        raise StoreError(_internals_changed(f"{dialect.name} renders {compiled.string!r}"))


def _internals_changed(detail: str) -> str:
    import sqlalchemy

    return (
        f"SQLAlchemy {sqlalchemy.__version__} renders statements differently from what dagrun "
        f"reads ({detail}); install the SQLAlchemy version pyproject.toml names"
    )
