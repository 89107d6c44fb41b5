"""``dagrun variables set|get|list|delete`` and ``dagrun connections add|get|list|delete``.

What tasks read through ``Variable`` and ``Connection`` (and templates through ``var`` and
``conn``), kept in the store. Every change is audited in the transaction that makes it,
naming the key or id and never a value or a password. Nothing here prints a password
(``***`` when one is set) nor a sensitive variable's value, except ``variables get
--reveal``. An environment variable ``DAGRUN_VAR_<KEY>`` or ``DAGRUN_CONN_<ID>`` overrides
the stored one in the processes that have it: ``get`` says so when this shell has one.
"""

from __future__ import annotations

import json
import os
from typing import TypedDict, Unpack

import click

from dagrun.cli.app import App, echo_json, echo_table, pass_app
from dagrun.errors import UsageError
from dagrun.runtime.connections import Connection, ConnectionNotFound, check_id, check_type
from dagrun.runtime.environment import connection_env_name, variable_env_name
from dagrun.runtime.masking import REPLACEMENT
from dagrun.runtime.variables import VariableNotFound, check_key, decode
from dagrun.store import audit
from dagrun.store import connections as conn_store
from dagrun.store import variables as var_store
from dagrun.store.sensitive import is_sensitive


@click.group("variables")
def variables() -> None:
    """Set, read, list and delete the variables tasks read (``Variable.get``,
    ``{{ var.value.key }}``)."""


@variables.command("set")
@click.argument("key")
@click.argument("value")
@click.option("--json", "as_json", is_flag=True, help="VALUE is JSON (checked, stored compact).")
@click.option("--description", default=None, help="What the variable is for.")
@pass_app
def set_variable(app: App, key: str, value: str, as_json: bool, description: str | None) -> None:
    """Create variable KEY with VALUE, or change it."""
    check_key(key)
    if as_json:
        value = json.dumps(decode(key, value))
    with app.store.write() as conn:
        var_store.set_variable(conn, key, value, description, app.store.now(conn))
        audit.record(app.store, conn, "variable_set", None, key=key)
    click.echo(f"variable {key} set")


@variables.command("get")
@click.argument("key")
@click.option("--reveal", is_flag=True, help="Print a sensitive variable's value too.")
@pass_app
def get_variable(app: App, key: str, reveal: bool) -> None:
    """Print the stored value of KEY (``***`` for a key naming a secret, unless --reveal)."""
    with app.store.read() as conn:
        value = var_store.get_variable(conn, key)
    if value is None:
        raise VariableNotFound(key)
    click.echo(value if reveal or not is_sensitive(key) else REPLACEMENT)
    _note_override(variable_env_name(key))


@variables.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def list_variables(app: App, as_json: bool) -> None:
    """Stored variables, by key; the values of keys naming a secret as ``***``."""
    with app.store.read() as conn:
        rows = var_store.list_variables(conn)
    if as_json:
        echo_json(
            [
                {
                    "key": r.key,
                    "value": _shown(r.key, r.value),
                    "description": r.description,
                    "updated_at": r.updated_at.isoformat(),
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no variables; set one with `dagrun variables set KEY VALUE`")
        return
    echo_table(
        ["key", "value", "description"],
        [[r.key, _one_line(_shown(r.key, r.value)), _one_line(r.description)] for r in rows],
    )


@variables.command("delete")
@click.argument("key")
@pass_app
def delete_variable(app: App, key: str) -> None:
    """Delete variable KEY."""
    with app.store.write() as conn:
        if not var_store.delete_variable(conn, key):
            raise VariableNotFound(key)
        audit.record(app.store, conn, "variable_delete", None, key=key)
    click.echo(f"variable {key} deleted")


def _shown(key: str, value: str) -> str:
    return REPLACEMENT if is_sensitive(key) else value


def _one_line(text: str | None) -> str:
    """A value in a table row: its line breaks shown escaped, so a row stays one line."""
    return (text or "").replace("\r", "\\r").replace("\n", "\\n")


def _note_override(name: str) -> None:
    """Say so when this shell has the environment variable that overrides what was shown:
    a task run with it reads that instead."""
    if name in os.environ:
        click.echo(f"note: {name} is set in this shell; tasks run with it read that", err=True)


ADD_EXAMPLES = """\b
Examples:
  dagrun connections add warehouse --uri 'postgresql://etl:s%40cret@db:5432/sales'
  dagrun connections add api --conn-type http --host api.example.com --password "$TOKEN"
"""


@click.group("connections")
def connections() -> None:
    """Add, read, list and delete the connections tasks read (``Connection.get``,
    ``{{ conn.my_db.host }}``)."""


@connections.command("add", epilog=ADD_EXAMPLES)
@click.argument("conn_id")
@click.option("--uri", default=None, help="The whole connection as a URI (percent-encoded).")
@click.option("--conn-type", default=None, help="Its type (postgresql, http...).")
@click.option("--host", default=None)
@click.option("--port", type=click.IntRange(0, 65535), default=None)
@click.option("--login", default=None)
@click.option("--password", default=None)
@click.option("--schema", default=None, help="The database (or path) on the host.")
@click.option("--extra", default=None, help="More fields, a JSON object.")
@click.option("--description", default=None, help="What the connection is for.")
@pass_app
def add_connection(
    app: App,
    conn_id: str,
    uri: str | None,
    description: str | None,
    **fields: Unpack[_FieldOptions],
) -> None:
    """Add connection CONN_ID from --uri or from --conn-type and the other fields, or
    replace the one with that id."""
    connection = _connection_from(check_id(conn_id), uri, fields)
    with app.store.write() as conn:
        replaced = conn_store.get_connection(conn, conn_id) is not None
        conn_store.set_connection(conn, connection, description, app.store.now(conn))
        audit.record(
            app.store,
            conn,
            "connection_add",
            None,
            conn_id=conn_id,
            conn_type=connection.conn_type,
            replaced=replaced,
        )
    click.echo(f"connection {conn_id} {'replaced' if replaced else 'added'}")


class _FieldOptions(TypedDict):
    """The options of ``connections add`` that are a connection's fields (None: not given)."""

    conn_type: str | None
    host: str | None
    port: int | None
    login: str | None
    password: str | None
    schema: str | None
    extra: str | None


def _connection_from(conn_id: str, uri: str | None, fields: _FieldOptions) -> Connection:
    """The connection the options describe: a URI, or fields, never both."""
    given = [f"--{name.replace('_', '-')}" for name, v in fields.items() if v is not None]
    if uri is not None:
        if given:
            raise UsageError(f"give --uri or the fields, not both (--uri and {given[0]})")
        return Connection.from_uri(conn_id, uri, source="--uri")
    if fields["conn_type"] is None:
        raise UsageError("give --uri URI or --conn-type TYPE (see `dagrun connections add --help`)")
    return Connection(
        conn_id=conn_id,
        conn_type=check_type(fields["conn_type"]),
        host=fields["host"],
        port=fields["port"],
        login=fields["login"],
        password=fields["password"],
        schema=fields["schema"],
        extra=_extra(fields["extra"]),
    )


def _extra(text: str | None) -> dict:
    if text is None:
        return {}
    try:
        extra = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--extra is not JSON: {exc}") from None
    if not isinstance(extra, dict):
        raise UsageError(f"--extra must be a JSON object, not {type(extra).__name__}")
    return extra


@connections.command("get")
@click.argument("conn_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def get_connection(app: App, conn_id: str, as_json: bool) -> None:
    """Print stored connection CONN_ID (its password as ``***``)."""
    with app.store.read() as conn:
        found = conn_store.get_connection(conn, conn_id)
    if found is None:
        raise ConnectionNotFound(conn_id)
    shown = _connection_json(Connection(**found))
    if as_json:
        echo_json(shown)
    else:
        for name, value in shown.items():
            text = json.dumps(value) if isinstance(value, dict) else value
            click.echo(f"{name}: {'' if value is None else _one_line(str(text))}")
    _note_override(connection_env_name(conn_id))


@connections.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def list_connections(app: App, as_json: bool) -> None:
    """Stored connections, by id (passwords as ``***``)."""
    with app.store.read() as conn:
        rows = [Connection(**row) for row in conn_store.list_connections(conn)]
    if as_json:
        echo_json([_connection_json(c) for c in rows])
        return
    if not rows:
        click.echo("no connections; add one with `dagrun connections add CONN_ID --uri URI`")
        return
    echo_table(
        ["conn_id", "type", "host", "port", "login", "password", "schema"],
        [
            [c.conn_id, c.conn_type, c.host, c.port, c.login, _masked(c.password), c.schema]
            for c in rows
        ],
    )


@connections.command("delete")
@click.argument("conn_id")
@pass_app
def delete_connection(app: App, conn_id: str) -> None:
    """Delete connection CONN_ID."""
    with app.store.write() as conn:
        if not conn_store.delete_connection(conn, conn_id):
            raise ConnectionNotFound(conn_id)
        audit.record(app.store, conn, "connection_delete", None, conn_id=conn_id)
    click.echo(f"connection {conn_id} deleted")


def _masked(password: str | None) -> str | None:
    return REPLACEMENT if password else None


def _connection_json(c: Connection) -> dict:
    """A connection as ``get --json`` and ``list --json`` print it: the password masked."""
    return {
        "conn_id": c.conn_id,
        "conn_type": c.conn_type,
        "host": c.host,
        "port": c.port,
        "login": c.login,
        "password": _masked(c.password),
        "schema": c.schema,
        "extra": c.extra,
        "description": c.description,
    }


COMMANDS = [variables, connections]
