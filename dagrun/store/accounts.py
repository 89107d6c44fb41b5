"""Who may use the web page and the API off loopback: accounts, bearer tokens, the session key.

A password is kept only as an scrypt hash (``hashlib.scrypt``) with a random salt of its own
and its cost parameters beside it, ``scrypt$N$r$p$SALT$HASH``, so raising the cost later
leaves the hashes already stored readable. The cost, N=2^15 with r=8 and p=3 (32 MiB and
about a quarter of a second per check), is OWASP's lower-memory equivalent of its minimum
(N=2^17, p=1), so that eight web threads checking passwords at once stay within 256 MiB.

A bearer token is random (``secrets``: 32 bytes) and shown once, when it is made; the store
keeps its SHA-256 only. A token is a key, not a password: it has 256 bits of entropy, so a
fast hash loses nothing, and a lookup by hash finds it with an index instead of a check of
every row.

The key that signs the web's session cookies is kept in ``dagrun_meta``, made once by the
first ``dagrun web`` that needs it: every web server of one store (several behind a load
balancer, or one restarted on another host) then accepts the same sessions, and the key is
kept where the accounts it protects are, in the store's backups with them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dagrun.errors import UsageError
from dagrun.store import sql

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/accounts.py``).
Q = sql.Catalogue("dagrun.store.queries.accounts", "accounts.")

#: What an account may be called: letters, digits and ``_ . @ -``, as a login form shows it.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
MIN_PASSWORD_LENGTH = 8
#: A password longer than this is refused: scrypt would hash it, but nobody types it.
MAX_PASSWORD_LENGTH = 1024
#: A token's use is recorded at most this often: an API client polling every second would
#: otherwise write to the store at every request.
TOKEN_TOUCH_EVERY = timedelta(minutes=1)
SESSION_KEY = "web_session_key"


@dataclass(frozen=True)
class ScryptCost:
    """scrypt's parameters: CPU/memory cost ``n``, block size ``r``, parallelism ``p``."""

    n: int = 2**15
    r: int = 8
    p: int = 3

    @property
    def memory(self) -> int:
        """The bytes scrypt needs (128·n·r), plus room: the maximum OpenSSL must allow."""
        return 128 * self.n * self.r + 1024 * 1024


DEFAULT_COST = ScryptCost()


class AccountError(UsageError, ValueError):
    """A name or a password that cannot be an account's."""


class AccountExists(UsageError, ValueError):
    """``users add`` of a name that has an account already."""

    def __init__(self, name: str):
        super().__init__(
            f"account {name!r} exists; to give it a new password, "
            f"`dagrun users delete {name}` then `dagrun users add {name}`"
        )
        self.name = name


class AccountNotFound(UsageError, LookupError):
    """No account of this name."""

    def __init__(self, name: str):
        super().__init__(f"no account {name!r} (see `dagrun users list`)")
        self.name = name

    __str__ = Exception.__str__  # LookupError's would quote the message


# ---------------------------------------------------------------- statements


# ---------------------------------------------------------------- passwords


def check_name(name: str) -> str:
    """``name`` if it can name an account, else ``AccountError`` saying what it may be."""
    if not NAME_PATTERN.fullmatch(name):
        raise AccountError(
            f"bad account name {name!r}: use 1 to 64 letters, digits, '_', '.', '@' or '-'"
        )
    return name


def check_password(password: str) -> str:
    """``password`` if it is long enough to be one, else ``AccountError``."""
    if not password:
        raise AccountError("the password is empty")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password is shorter than {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise AccountError(f"the password is longer than {MAX_PASSWORD_LENGTH} characters")
    return password


def hash_password(password: str, cost: ScryptCost = DEFAULT_COST) -> str:
    """``scrypt$N$r$p$SALT$HASH``: a fresh random salt, the cost kept beside the hash."""
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, cost)
    return f"scrypt${cost.n}${cost.r}${cost.p}${_b64(salt)}${_b64(digest)}"


def password_matches(password: str, stored: str) -> bool:
    """Whether ``password`` hashes to ``stored``, compared in constant time. A stored text
    that is not an scrypt hash matches nothing."""
    scheme, *fields = stored.split("$")
    if scheme != "scrypt" or len(fields) != 5:
        return False
    try:
        n, r, p, salt, digest = fields
        expected = _unb64(digest)
        found = _scrypt(password, _unb64(salt), ScryptCost(int(n), int(r), int(p)), len(expected))
    except ValueError:
        return False
    return hmac.compare_digest(found, expected)


def _scrypt(password: str, salt: bytes, cost: ScryptCost, length: int = 32) -> bytes:
    return hashlib.scrypt(
        password.encode(),
        salt=salt,
        n=cost.n,
        r=cost.r,
        p=cost.p,
        maxmem=cost.memory,
        dklen=length,
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64") from exc


@functools.cache
def _nobody() -> str:
    """Checked when a login names no account, so that a wrong name takes as long as a wrong
    password and the time of an answer does not tell which names exist."""
    return hash_password(secrets.token_urlsafe(16))


# ---------------------------------------------------------------- accounts


@dataclass(frozen=True)
class AccountRow:
    """A web account as listed: never its password hash."""

    name: str
    created_at: datetime
    tokens: int
    token_used_at: datetime | None


def add_account(conn: Connection, name: str, password_hash: str, now: datetime) -> None:
    """Add account ``name``; ``AccountExists`` if there is one (its password stays)."""
    params = {"b_name": check_name(name), "b_password_hash": password_hash, "b_created_at": now}
    if sql.execute(conn, Q.ADD_ACCOUNT, params).rowcount == 0:
        raise AccountExists(name)


def list_accounts(conn: Connection) -> list[AccountRow]:
    return [AccountRow(*row) for row in sql.tuples(conn, Q.ACCOUNTS)]


def has_accounts(conn: Connection) -> bool:
    return sql.scalar(conn, Q.ANY_ACCOUNT) is not None


def delete_account(conn: Connection, name: str) -> None:
    """Delete account ``name`` and its tokens; ``AccountNotFound`` if there is none."""
    if sql.execute(conn, Q.DELETE_ACCOUNT, {"b_name": name}).rowcount == 0:
        raise AccountNotFound(name)


def password_hash(conn: Connection, name: str) -> str | None:
    """The stored hash of ``name``'s password, None when there is no such account."""
    return sql.scalar(conn, Q.PASSWORD_HASH, {"b_name": name})


def login_matches(password: str, stored: str | None) -> bool:
    """Whether ``password`` is the password of the account whose hash is ``stored`` (None:
    no such account, which costs the same scrypt check as a wrong password). Called outside
    any transaction: the check takes a quarter of a second."""
    matches = password_matches(password, stored or _nobody())
    return matches and stored is not None


# ---------------------------------------------------------------- tokens


@dataclass(frozen=True)
class TokenRow:
    """An API token as listed: its id and account, never the token."""

    id: int
    account: str
    last_used_at: datetime | None


def make_token(conn: Connection, name: str, now: datetime) -> tuple[int, str]:
    """A new bearer token of account ``name``: its id and the token itself, which is never
    stored and cannot be shown again. ``AccountNotFound`` if there is no such account."""
    if password_hash(conn, name) is None:
        raise AccountNotFound(name)
    token = secrets.token_urlsafe(32)
    params = {"b_account": name, "b_token_hash": token_hash(token), "b_created_at": now}
    return sql.scalar(conn, Q.ADD_TOKEN, params), token


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def find_token(conn: Connection, token: str) -> TokenRow | None:
    """The token's row (which account it is of), None for a token unknown or revoked."""
    found = sql.first(conn, Q.TOKEN, {"b_token_hash": token_hash(token)})
    return TokenRow(*found) if found is not None else None


def is_stale(row: TokenRow, now: datetime) -> bool:
    """Whether the token's last use is old enough to be recorded again (``touch_token``)."""
    return row.last_used_at is None or now - row.last_used_at >= TOKEN_TOUCH_EVERY


def touch_token(conn: Connection, token_id: int, now: datetime) -> None:
    sql.execute(conn, Q.TOUCH_TOKEN, {"b_id": token_id, "b_at": now})


def revoke_tokens(conn: Connection, name: str, token_id: int | None = None) -> int:
    """Revoke ``name``'s token ``token_id``, or all of its tokens; how many were revoked.
    ``AccountNotFound`` if there is no such account."""
    if password_hash(conn, name) is None:
        raise AccountNotFound(name)
    if token_id is None:
        return sql.execute(conn, Q.REVOKE_TOKENS, {"b_account": name}).rowcount
    return sql.execute(conn, Q.REVOKE_TOKEN, {"b_account": name, "b_id": token_id}).rowcount


# ---------------------------------------------------------------- the session key


def session_key(conn: Connection) -> bytes:
    """The key that signs session cookies: made and kept by the first caller, in a write
    transaction; read by every later one."""
    sql.execute(conn, Q.KEEP_SESSION_KEY, {"b_key": SESSION_KEY, "b_value": secrets.token_hex(32)})
    return bytes.fromhex(sql.scalar(conn, Q.SESSION_KEY_VALUE, {"b_key": SESSION_KEY}))
