"""Variables and connections given in the environment: ``DAGRUN_VAR_<KEY>`` holds a
variable's value, ``DAGRUN_CONN_<ID>`` a connection as an Airflow-style URI; and the
secrets they hold.

A leaf of the runtime: ``variables`` and ``connections`` read these names and tell
``masking`` of each secret they fetch, while ``masking`` scans the environment for the
secrets it must hide from the start, so the forms are kept here, below all three.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

from dagrun import settings
from dagrun.errors import UsageError
from dagrun.store.sensitive import is_sensitive

VARIABLE_PREFIX = "DAGRUN_VAR_"
CONNECTION_PREFIX = "DAGRUN_CONN_"
EXAMPLE_URI = "postgresql://user:password@host:5432/db"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def variable_env_name(key: str) -> str:
    """The environment variable that overrides variable ``key``."""
    return VARIABLE_PREFIX + key.upper()


def connection_env_name(conn_id: str) -> str:
    """The environment variable that overrides connection ``conn_id``."""
    return CONNECTION_PREFIX + conn_id.upper()


class InvalidConnection(UsageError, ValueError):
    """A connection URI that does not parse, or fields that make no connection. Carries
    where the input came from (``DAGRUN_CONN_DB``, ``--uri``) and why; never the URI, which
    holds the password."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


def uri_secrets(uri: str) -> set[str]:
    """The password of a connection URI, decoded and as written (a command that echoes the
    URI shows the latter); none for a URI that does not parse."""
    try:
        written = split_uri(uri, "uri").password
    except InvalidConnection:
        return set()
    return {written, unquote(written)} if written else set()


def split_uri(uri: str, source: str):
    """``urlsplit`` of a connection URI, checked: a type (``postgresql://``) and a port
    that is a number. Never in the error: the URI, nor what ``urlsplit`` says of it, which
    may quote the password (``user:pw/x@host`` makes ``pw`` the port)."""
    if not isinstance(uri, str) or not _SCHEME.match(uri):
        raise InvalidConnection(
            source, f"not a connection URI: it must start with its type, as {EXAMPLE_URI}"
        )
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise InvalidConnection(
            source,
            "not a connection URI: its host or port does not parse (a port is a number "
            "from 0 to 65535; percent-encode '/', '@', ':' and '?' in a login or password)",
        ) from None
    return parts


def environment_secrets() -> set[str]:
    """The secrets the environment holds: sensitive variables' values, connection URIs'
    passwords, the SMTP password."""
    password = settings.get("smtp.password")  # from the environment or dagrun.toml
    found: set[str] = {password} if password else set()
    for name, value in os.environ.items():
        if name.startswith(VARIABLE_PREFIX):
            if is_sensitive(name.removeprefix(VARIABLE_PREFIX)):
                found.add(value)
        elif name.startswith(CONNECTION_PREFIX):
            found.update(uri_secrets(value))
    return found
