"""``dagrun users add|list|delete|token|revoke``: who may log in to a web page served off
loopback, and the bearer tokens of API clients.

A password is read from standard input, never from an argument (which ``ps`` and the shell's
history would show): typed twice at a terminal, or one line from a pipe. A token is printed
once, alone on standard output, so that a script can capture it; the store keeps only its
hash. Every change is audited in the transaction that makes it, naming the account, never a
password or a token.
"""

from __future__ import annotations

import getpass
import sys

import click

from dagrun.cli.app import App, echo_json, echo_table, pass_app
from dagrun.errors import UsageError
from dagrun.store import accounts, audit


@click.group("users")
def users() -> None:
    """Accounts of the web page and the API (needed when `dagrun web` listens off loopback)."""


@users.command("add")
@click.argument("name")
@pass_app
def add_user(app: App, name: str) -> None:
    """Add account NAME; its password is read from stdin (asked twice at a terminal)."""
    accounts.check_name(name)
    stored = accounts.hash_password(_read_password(name))
    with app.store.write() as conn:
        accounts.add_account(conn, name, stored, app.store.now(conn))
        audit.record(app.store, conn, "account_add", None, account=name)
    click.echo(f"account {name} added")


@users.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def list_users(app: App, as_json: bool) -> None:
    """Accounts by name, with their number of API tokens and the tokens' latest use."""
    with app.store.read() as conn:
        rows = accounts.list_accounts(conn)
    if as_json:
        echo_json(
            [
                {
                    "name": r.name,
                    "created_at": r.created_at.isoformat(),
                    "tokens": r.tokens,
                    "token_used_at": r.token_used_at.isoformat() if r.token_used_at else None,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no accounts; add one with `dagrun users add NAME`")
        return
    echo_table(
        ["name", "created", "tokens", "token last used"],
        [[r.name, _when(r.created_at), r.tokens, _when(r.token_used_at)] for r in rows],
    )


@users.command("delete")
@click.argument("name")
@pass_app
def delete_user(app: App, name: str) -> None:
    """Delete account NAME and its tokens; its web sessions end at their next request."""
    with app.store.write() as conn:
        accounts.delete_account(conn, name)
        audit.record(app.store, conn, "account_delete", None, account=name)
    click.echo(f"account {name} deleted")


@users.command("token")
@click.argument("name")
@pass_app
def make_token(app: App, name: str) -> None:
    """Make a bearer token of account NAME for the API (Authorization: Bearer TOKEN).
    It is printed once: the store keeps only its hash."""
    with app.store.write() as conn:
        token_id, token = accounts.make_token(conn, name, app.store.now(conn))
        audit.record(app.store, conn, "token_make", None, account=name, token_id=token_id)
    click.echo(token)
    click.echo(
        f"token {token_id} of {name}: it is not shown again, keep it now "
        f"(`dagrun users revoke {name} --id {token_id}` revokes it)",
        err=True,
    )


@users.command("revoke")
@click.argument("name")
@click.option("--id", "token_id", type=int, default=None, help="Revoke only this token.")
@pass_app
def revoke_tokens(app: App, name: str, token_id: int | None) -> None:
    """Revoke the API tokens of account NAME (all of them, or the one --id names)."""
    with app.store.write() as conn:
        count = accounts.revoke_tokens(conn, name, token_id)
        if token_id is not None and count == 0:
            raise UsageError(f"account {name} has no token {token_id} (see `dagrun users list`)")
        audit.record(app.store, conn, "token_revoke", None, account=name, token_id=token_id)
    click.echo(f"revoked {count} token{'' if count == 1 else 's'} of {name}")


def _read_password(name: str) -> str:
    """The new password: asked twice (not echoed) at a terminal, one line from a pipe."""
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {name}: ")
        accounts.check_password(password)
        if getpass.getpass("again: ") != password:
            raise UsageError("the two passwords differ; nothing was added")
        return password
    return accounts.check_password(sys.stdin.readline().removesuffix("\n").removesuffix("\r"))


def _when(at) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""


COMMANDS = [users]
