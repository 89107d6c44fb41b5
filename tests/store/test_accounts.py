"""Accounts, password hashes, bearer tokens and the session key, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from dagrun.store import accounts
from dagrun.store.accounts import AccountError, AccountExists, AccountNotFound, ScryptCost
from tests.helpers import db_rows

#: Cheap enough for many hashes in a test; the cost is stored with each hash.
CHEAP = ScryptCost(n=2**10, r=8, p=1)


def test_a_hash_names_its_scheme_and_cost_and_has_a_salt_of_its_own():
    first = accounts.hash_password("correct horse", CHEAP)
    second = accounts.hash_password("correct horse", CHEAP)
    scheme, n, r, p, salt, digest = first.split("$")
    assert (scheme, n, r, p) == ("scrypt", "1024", "8", "1")
    assert first != second  # a fresh salt each time
    assert salt != second.split("$")[4] and digest != second.split("$")[5]
    assert "correct horse" not in first


def test_a_password_matches_its_hash_only():
    stored = accounts.hash_password("correct horse", CHEAP)
    assert accounts.password_matches("correct horse", stored)
    assert not accounts.password_matches("correct horsE", stored)
    assert not accounts.password_matches("", stored)


def test_a_hash_is_checked_with_the_cost_it_was_made_with():
    stored = accounts.hash_password("correct horse")  # the default cost
    assert stored.split("$")[1:4] == ["32768", "8", "3"]
    assert accounts.password_matches("correct horse", stored)


def test_the_hash_is_scrypt_itself():
    stored = accounts.hash_password("pw-123456", CHEAP)
    _, n, r, p, salt, digest = stored.split("$")
    salt_bytes = accounts._unb64(salt)
    expected = hashlib.scrypt(b"pw-123456", salt=salt_bytes, n=int(n), r=int(r), p=int(p))
    assert accounts._unb64(digest) == expected[: len(accounts._unb64(digest))]


@pytest.mark.parametrize(
    "stored",
    ["", "plain text", "bcrypt$1$2$3$c2FsdA$aGFzaA", "scrypt$x$8$1$c2FsdA$aGFzaA", "scrypt$1024$8"],
)
def test_a_stored_text_that_is_no_scrypt_hash_matches_nothing(stored):
    assert not accounts.password_matches("anything", stored)


def test_a_login_with_no_account_fails_after_the_same_check():
    assert not accounts.login_matches("whatever-password", None)
    stored = accounts.hash_password("right-password", CHEAP)
    assert accounts.login_matches("right-password", stored)
    assert not accounts.login_matches("wrong-password", stored)


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "ali/ce", "é", "a\nb"])
def test_bad_names_are_refused_with_what_a_name_may_be(name):
    with pytest.raises(AccountError, match="letters, digits"):
        accounts.check_name(name)


@pytest.mark.parametrize(
    ("password", "why"),
    [("", "empty"), ("short", "shorter than 8"), ("x" * 1025, "longer than 1024")],
)
def test_bad_passwords_are_refused_saying_why(password, why):
    with pytest.raises(AccountError, match=why):
        accounts.check_password(password)


def test_add_list_and_delete_accounts(store):
    with store.write() as conn:
        now = store.now(conn)
        accounts.add_account(conn, "bob", accounts.hash_password("pw-bob-123", CHEAP), now)
        accounts.add_account(conn, "alice", accounts.hash_password("pw-alice-1", CHEAP), now)
    with store.read() as conn:
        assert accounts.has_accounts(conn)
        assert [a.name for a in accounts.list_accounts(conn)] == ["alice", "bob"]
        stored = accounts.password_hash(conn, "alice")
    assert stored is not None and accounts.password_matches("pw-alice-1", stored)
    with store.write() as conn:
        accounts.delete_account(conn, "alice")
    with store.read() as conn:
        assert [a.name for a in accounts.list_accounts(conn)] == ["bob"]
        assert accounts.password_hash(conn, "alice") is None


def test_a_store_without_accounts_says_so(store):
    with store.read() as conn:
        assert not accounts.has_accounts(conn)
        assert accounts.list_accounts(conn) == []


def test_a_second_account_of_one_name_is_refused_and_the_first_keeps_its_password(store):
    with store.write() as conn:
        accounts.add_account(conn, "alice", accounts.hash_password("first-pw", CHEAP), store.now())
    with pytest.raises(AccountExists, match="'alice' exists"), store.write() as conn:
        accounts.add_account(conn, "alice", accounts.hash_password("second-pw", CHEAP), store.now())
    with store.read() as conn:
        assert accounts.login_matches("first-pw", accounts.password_hash(conn, "alice"))


def test_deleting_an_unknown_account_names_it(store):
    with pytest.raises(AccountNotFound, match="no account 'ghost'"), store.write() as conn:
        accounts.delete_account(conn, "ghost")


def _alice(store) -> None:
    with store.write() as conn:
        accounts.add_account(
            conn, "alice", accounts.hash_password("pw-alice-1", CHEAP), store.now()
        )


def test_a_token_is_stored_as_its_sha256_only(store, db_url):
    _alice(store)
    with store.write() as conn:
        token_id, token = accounts.make_token(conn, "alice", store.now(conn))
    assert len(token) >= 43  # 32 random bytes, URL-safe base64
    rows = db_rows({"DAGRUN_DB_URL": db_url}, "SELECT id, account, token_hash FROM api_token")
    assert rows == [(token_id, "alice", hashlib.sha256(token.encode()).hexdigest())]
    with store.read() as conn:
        found = accounts.find_token(conn, token)
        assert found is not None and (found.id, found.account) == (token_id, "alice")
        assert accounts.find_token(conn, token + "x") is None
        assert accounts.find_token(conn, "") is None


def test_tokens_are_distinct_and_revoked_one_or_all(store):
    _alice(store)
    with store.write() as conn:
        made = [accounts.make_token(conn, "alice", store.now(conn)) for _ in range(3)]
    assert len({token for _, token in made}) == 3
    with store.write() as conn:
        assert accounts.revoke_tokens(conn, "alice", made[0][0]) == 1
        assert accounts.revoke_tokens(conn, "alice", made[0][0]) == 0
    with store.read() as conn:
        assert accounts.find_token(conn, made[0][1]) is None
        assert accounts.find_token(conn, made[1][1]) is not None
        assert accounts.list_accounts(conn)[0].tokens == 2
    with store.write() as conn:
        assert accounts.revoke_tokens(conn, "alice") == 2
    with store.read() as conn:
        assert all(accounts.find_token(conn, token) is None for _, token in made)


def test_a_token_of_no_account_is_refused(store):
    with pytest.raises(AccountNotFound), store.write() as conn:
        accounts.make_token(conn, "ghost", store.now(conn))
    with pytest.raises(AccountNotFound), store.write() as conn:
        accounts.revoke_tokens(conn, "ghost")


def test_deleting_an_account_revokes_its_tokens(store):
    _alice(store)
    with store.write() as conn:
        _, token = accounts.make_token(conn, "alice", store.now(conn))
        accounts.delete_account(conn, "alice")
    with store.read() as conn:
        assert accounts.find_token(conn, token) is None


def test_a_tokens_use_is_recorded_at_most_once_a_minute(store):
    _alice(store)
    with store.write() as conn:
        now = store.now(conn)
        _, token = accounts.make_token(conn, "alice", now)
    with store.read() as conn:
        row = accounts.find_token(conn, token)
    assert row is not None and row.last_used_at is None and accounts.is_stale(row, now)
    with store.write() as conn:
        accounts.touch_token(conn, row.id, now)
    with store.read() as conn:
        row = accounts.find_token(conn, token)
        assert accounts.list_accounts(conn)[0].token_used_at == now
    assert row is not None and row.last_used_at == now
    assert not accounts.is_stale(row, now + accounts.TOKEN_TOUCH_EVERY - timedelta(seconds=1))
    assert accounts.is_stale(row, now + accounts.TOKEN_TOUCH_EVERY)


def test_the_session_key_is_made_once_and_kept(store):
    with store.write() as conn:
        first = accounts.session_key(conn)
    with store.write() as conn:
        second = accounts.session_key(conn)
    assert first == second and len(first) == 32
