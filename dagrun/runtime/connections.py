"""Connections: how to reach an outside system (a database, an API), by id.

``Connection.get("warehouse")`` reads the environment variable ``DAGRUN_CONN_WAREHOUSE`` (the
id upper-cased) when it is set, an Airflow-style URI::

    postgresql://etl:s%40cret@db.example.com:5432/sales?sslmode=require

and the store otherwise (``dagrun connections add``). As in Airflow, the login, password,
host, path (the ``schema``) and query values are percent-decoded, the query parameters
become ``extra`` (or ``__extra__``, a JSON object, is ``extra`` whole) and a ``-`` in the
type is a ``_``. The password of a connection fetched is masked in attempt logs from then
on (``dagrun.runtime.masking``); no error or ``repr`` here ever shows it, nor a URI that holds it.

In templates, ``{{ conn.warehouse.host }}`` (``CONN``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from dagrun.errors import UsageError
from dagrun.runtime import masking
from dagrun.runtime.environment import InvalidConnection, connection_env_name, split_uri

_EXTRA = "__extra__"
_ID = re.compile(r"[A-Za-z0-9_.-]{1,250}")
_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_+.-]{0,63}")


class ConnectionNotFound(UsageError, KeyError):
    """No connection with this id, in the environment or the store."""

    def __init__(self, conn_id: str):
        super().__init__(
            f"no connection '{conn_id}' (see `dagrun connections list`; "
            f"or set {connection_env_name(conn_id)})"
        )
        self.conn_id = conn_id

    __str__ = Exception.__str__  # KeyError's would quote the message


def check_id(conn_id: object) -> str:
    """An id that can be stored: 1-250 letters, digits, ``_``, ``.`` or ``-`` (it names an
    environment variable and a template attribute; no spaces, no line breaks)."""
    if not isinstance(conn_id, str) or not _ID.fullmatch(conn_id):
        raise InvalidConnection(
            f"connection id {conn_id!r}", "an id is 1-250 letters, digits, '_', '.' or '-'"
        )
    return conn_id


def check_type(conn_type: object) -> str:
    """A type as a URI scheme spells it (``postgresql``, ``google_cloud``), or an error."""
    if not isinstance(conn_type, str) or not _TYPE.fullmatch(conn_type):
        raise InvalidConnection(
            f"connection type {conn_type!r}",
            "a type is a letter, then letters, digits, '_', '+', '.' or '-'",
        )
    return conn_type


@dataclass(frozen=True)
class Connection:
    """A connection's fields, as Airflow names them; ``repr`` leaves the password out."""

    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    description: str | None = None

    @classmethod
    def get(cls, conn_id: str) -> Connection:
        """The connection ``conn_id``: from ``DAGRUN_CONN_<CONN_ID>`` when it is set, else
        from the store (the running attempt's, or this process's own outside an attempt).
        Raises ``ConnectionNotFound`` or, for a URI that does not parse,
        ``InvalidConnection`` naming the variable."""
        name = connection_env_name(conn_id)
        uri = os.environ.get(name)
        found = cls.from_uri(conn_id, uri, source=name) if uri is not None else _stored(conn_id)
        if found is None:
            raise ConnectionNotFound(conn_id)
        masking.register(found.password)
        return found

    @classmethod
    def from_uri(cls, conn_id: str, uri: str, source: str = "uri") -> Connection:
        """The connection an Airflow-style URI describes (see the module's docstring);
        ``source`` names where the URI came from in the error of one that does not parse."""
        parts = split_uri(uri, source)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        return cls(
            conn_id=conn_id,
            conn_type=parts.scheme.replace("-", "_"),
            host=_hostname(parts) or None,
            port=parts.port,
            login=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            schema=unquote(parts.path[1:]) or None,
            extra=_extra(query, source),
        )

    def get_uri(self) -> str:
        """The connection as a URI ``from_uri`` reads back the same (Airflow's spelling:
        every part percent-encoded; ``extra`` as query parameters when they say it all,
        else as ``__extra__``)."""
        uri = f"{self.conn_type.lower().replace('_', '-')}://"
        authority = ""
        if self.login is not None:
            authority += quote(self.login, safe="")
        if self.password is not None:
            authority += ":" + quote(self.password, safe="")
        if authority:
            uri += authority + "@"
        host = quote(self.host, safe="") if self.host else ""
        if self.port:
            host += f":{self.port}" if host or authority else f"@:{self.port}"
        if self.schema:
            host += f"/{quote(self.schema, safe='')}"
        uri += host
        if self.extra:
            uri += ("?" if self.schema else "/?") + _query(self.extra)
        return uri


def _hostname(parts) -> str:
    """The host, percent-decoded; a decoded host with a ``/`` (a socket folder) is taken
    from the URI as written, keeping its case (Airflow's rule)."""
    host = unquote(parts.hostname or "")
    if "/" in host:
        host = parts.netloc.rpartition("@")[2].partition(":")[0]
        host = unquote(host)
    return host


def _extra(query: dict[str, str], source: str) -> dict[str, Any]:
    if _EXTRA not in query:
        return query
    try:
        extra = json.loads(query[_EXTRA])
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise InvalidConnection(source, f"its {_EXTRA} parameter is not a JSON object")
    return extra


def _query(extra: dict[str, Any]) -> str:
    """``extra`` as query parameters when they read back as the same dict (all strings),
    else whole as ``__extra__``."""
    try:
        query = urlencode(extra)
    except TypeError:
        query = None
    if query and dict(parse_qsl(query, keep_blank_values=True)) == extra:
        return query
    return urlencode({_EXTRA: json.dumps(extra)})


def _stored(conn_id: str) -> Connection | None:
    from dagrun.runtime.current import db_url
    from dagrun.store.connections import get_connection
    from dagrun.store.engine import shared_store

    store = shared_store(db_url())
    with store.read() as conn:
        row = get_connection(conn, conn_id)
    return None if row is None else Connection(**row)


class ConnectionAccessor:
    """``conn`` in templates: ``{{ conn.warehouse.host }}`` (or ``conn['my-db']``) is
    ``Connection.get``, called only when a template reads it."""

    def __getattr__(self, conn_id: str) -> Connection:
        if conn_id.startswith("__"):
            raise AttributeError(conn_id)
        return Connection.get(conn_id)

    def __getitem__(self, conn_id: str) -> Connection:
        return Connection.get(conn_id)

    def __repr__(self) -> str:
        return "<connections by id: conn.<conn_id>>"


CONN = ConnectionAccessor()
