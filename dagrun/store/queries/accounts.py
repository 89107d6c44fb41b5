"""The statements of ``accounts`` (see ``queries``)."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select, update

from dagrun.store.schema import account, api_token, meta
from dagrun.store.sql import Statement, insert_new, name_all
from dagrun.store.sql import bind as _b

ADD_ACCOUNT = Statement(
    "Add an account unless one of its name exists (then no row: the caller says so).",
    insert_new(account, ("name", "password_hash", "created_at")),
)


PASSWORD_HASH = Statement(
    "An account's password hash: checked at each login and each request of a session.",
    select(account.c.password_hash).where(account.c.name == _b("name")),
)


ANY_ACCOUNT = Statement(
    "Whether the store has an account (a web server off loopback needs one).",
    select(account.c.name).limit(1),
)


ACCOUNTS = Statement(
    "Every account by name, with its number of tokens and their latest use.",
    select(
        account.c.name,
        account.c.created_at,
        func.count(api_token.c.id),
        func.max(api_token.c.last_used_at),
    )
    .select_from(account.outerjoin(api_token, api_token.c.account == account.c.name))
    .group_by(account.c.name, account.c.created_at)
    .order_by(account.c.name),
)


DELETE_ACCOUNT = Statement(
    "Delete an account; its tokens go with it (ON DELETE CASCADE).",
    delete(account).where(account.c.name == _b("name")),
)


ADD_TOKEN = Statement(
    "Record a new token of an account by its hash; its id names it to ``users revoke``.",
    insert(api_token)
    .values(account=_b("account"), token_hash=_b("token_hash"), created_at=_b("created_at"))
    .returning(api_token.c.id),
)


TOKEN = Statement(
    "The token of this hash: its id, account and last use (unique index on the hash).",
    select(*api_token.c["id", "account", "last_used_at"]).where(
        api_token.c.token_hash == _b("token_hash")
    ),
)


TOUCH_TOKEN = Statement(
    "Record when a token was last used.",
    update(api_token).where(api_token.c.id == _b("id")).values(last_used_at=_b("at")),
)


REVOKE_TOKENS = Statement(
    "Revoke every token of an account.",
    delete(api_token).where(api_token.c.account == _b("account")),
)


REVOKE_TOKEN = Statement(
    "Revoke one token of an account, by its id.",
    delete(api_token).where(api_token.c.account == _b("account"), api_token.c.id == _b("id")),
)


KEEP_SESSION_KEY = Statement(
    "Keep a session key unless one is kept already (two servers starting at once agree).",
    insert_new(meta, ("key", "value")),
)


SESSION_KEY_VALUE = Statement(
    "The key that signs the web's session cookies.",
    select(meta.c.value).where(meta.c.key == _b("key")),
)


name_all(globals(), prefix="accounts.")
