"""``dagrun users``: accounts and tokens as a user makes them, the real CLI in a subprocess on
SQLite and PostgreSQL; the password read at a terminal, in-process."""

from __future__ import annotations

import hashlib

import pytest

from dagrun.cli import users
from dagrun.errors import UsageError
from dagrun.store import accounts
from tests.helpers import cli_json, db_rows, run_cli


@pytest.fixture
def env(cli_env, db_url) -> dict[str, str]:
    return {**cli_env, "DAGRUN_DB_URL": db_url}


def audit_trail(env: dict[str, str]) -> list[tuple[str, str]]:
    return db_rows(env, "SELECT action, detail FROM audit_log ORDER BY id")


@pytest.mark.slow
def test_add_reads_one_line_from_a_pipe_and_stores_only_an_scrypt_hash(env):
    result = run_cli("users", "add", "alice", env=env, input="correct horse battery\n")
    assert (result.returncode, result.stdout) == (0, "account alice added\n"), result.stderr
    [(name, stored)] = db_rows(env, "SELECT name, password_hash FROM account")
    assert name == "alice" and stored.startswith("scrypt$32768$8$3$")
    assert "correct horse" not in stored
    assert accounts.password_matches("correct horse battery", stored)  # no newline kept
    assert audit_trail(env) == [("account_add", '{"account": "alice"}')]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "stdin", "message"),
    [
        ("alice", "", "the password is empty"),
        ("alice", "\n", "the password is empty"),
        ("alice", "short\n", "shorter than 8 characters"),
        ("bad name", "long enough\n", "bad account name 'bad name'"),
    ],
)
def test_add_refuses_a_bad_password_or_name_in_one_line_and_adds_nothing(
    cli_env, name, stdin, message
):
    result = run_cli("users", "add", name, env=cli_env, input=stdin)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1
    assert run_cli("users", "list", env=cli_env).stdout.startswith("no accounts;")


@pytest.mark.slow
def test_a_second_add_of_a_name_is_refused_and_the_password_stays(env):
    assert run_cli("users", "add", "alice", env=env, input="first-password\n").returncode == 0
    again = run_cli("users", "add", "alice", env=env, input="second-password\n")
    assert again.returncode == 2
    assert "account 'alice' exists" in again.stderr and "dagrun users delete alice" in again.stderr
    [(stored,)] = db_rows(env, "SELECT password_hash FROM account")
    assert accounts.password_matches("first-password", stored)


@pytest.mark.slow
def test_list_token_revoke_and_delete(env):
    assert run_cli("users", "list", env=env).stdout.startswith("no accounts;")
    for name in ("bob", "alice"):
        assert run_cli("users", "add", name, env=env, input="long-enough\n").returncode == 0
    made = run_cli("users", "token", "alice", env=env)
    assert made.returncode == 0
    token = made.stdout.strip()
    assert made.stdout == token + "\n"  # alone on stdout, for a script to capture
    assert "token 1 of alice: it is not shown again" in made.stderr
    assert db_rows(env, "SELECT token_hash FROM api_token") == [
        (hashlib.sha256(token.encode()).hexdigest(),)
    ]
    listed = cli_json("users", "list", env=env)
    assert [(u["name"], u["tokens"]) for u in listed] == [("alice", 1), ("bob", 0)]
    table = run_cli("users", "list", env=env).stdout.splitlines()
    assert table[0].split() == ["name", "created", "tokens", "token", "last", "used"]
    assert run_cli("users", "revoke", "alice", "--id", "7", env=env).returncode == 2
    revoked = run_cli("users", "revoke", "alice", env=env)
    assert revoked.stdout == "revoked 1 token of alice\n"
    deleted = run_cli("users", "delete", "bob", env=env)
    assert deleted.stdout == "account bob deleted\n"
    gone = run_cli("users", "delete", "bob", env=env)
    assert gone.returncode == 2 and "no account 'bob'" in gone.stderr
    assert [a for a, _ in audit_trail(env)] == [
        "account_add",
        "account_add",
        "token_make",
        "token_revoke",
        "account_delete",
    ]
    assert token not in str(audit_trail(env))


@pytest.mark.slow
def test_a_token_of_no_account_is_refused(cli_env):
    result = run_cli("users", "token", "ghost", env=cli_env)
    assert result.returncode == 2 and result.stdout == ""
    assert "no account 'ghost'" in result.stderr


class TerminalInput:
    """Standard input that is a terminal (getpass then reads the terminal itself)."""

    def isatty(self) -> bool:
        return True


class Terminal:
    """A terminal that answers getpass prompts from a list, recording them."""

    def __init__(self, answers: list[str]):
        self.answers, self.prompts = answers, []

    def getpass(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)


@pytest.fixture
def terminal(monkeypatch):
    def make(*answers: str) -> Terminal:
        typed = Terminal(list(answers))
        monkeypatch.setattr(users.sys, "stdin", TerminalInput())
        monkeypatch.setattr(users.getpass, "getpass", typed.getpass)
        return typed

    return make


def test_at_a_terminal_the_password_is_asked_twice(terminal):
    typed = terminal("long-enough", "long-enough")
    assert users._read_password("alice") == "long-enough"
    assert typed.prompts == ["password for alice: ", "again: "]


def test_at_a_terminal_two_different_passwords_add_nothing(terminal):
    terminal("long-enough", "long-enougH")
    with pytest.raises(UsageError, match="the two passwords differ"):
        users._read_password("alice")


def test_at_a_terminal_a_short_password_is_refused_before_it_is_asked_again(terminal):
    typed = terminal("short")
    with pytest.raises(accounts.AccountError, match="shorter than 8"):
        users._read_password("alice")
    assert typed.prompts == ["password for alice: "]
