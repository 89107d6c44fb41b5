"""Variables: named settings a task reads at run time, kept in the store.

``Variable.get("region")`` reads the environment variable ``DAGRUN_VAR_REGION`` (the key
upper-cased) when it is set, the store otherwise (``dagrun variables set``); in an attempt
the attempt's store, outside one this process's own (``DAGRUN_DB_URL``, or the default under
``DAGRUN_HOME``). The value of a key naming a secret (``sensitive.is_sensitive``) is masked
in attempt logs from the moment it is fetched or set.

In templates, ``{{ var.value.region }}`` and ``{{ var.json.limits.daily }}`` (``VAR``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from dagrun.errors import UsageError
from dagrun.runtime import masking
from dagrun.runtime.environment import variable_env_name
from dagrun.store.sensitive import is_sensitive

#: Keys name environment variables and CLI arguments: no spaces, no line breaks.
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,250}")
_RAISE: Any = object()


class VariableNotFound(UsageError, KeyError):
    """No variable with this key, in the environment or the store."""

    def __init__(self, key: str):
        super().__init__(
            f"no variable '{key}' (see `dagrun variables list`; or set {variable_env_name(key)})"
        )
        self.key = key

    __str__ = Exception.__str__  # KeyError's would quote the message


class InvalidVariable(UsageError, ValueError):
    """A key that cannot be stored, or a value that is not what was asked for (not text,
    not JSON); carries the key, never the value, which may be a secret."""

    def __init__(self, key: object, reason: str):
        super().__init__(f"variable {key!r}: {reason}")
        self.key = key


def check_key(key: object) -> str:
    """A key that can be stored: 1-250 letters, digits, ``_``, ``.`` or ``-``."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidVariable(key, "a key is 1-250 letters, digits, '_', '.' or '-'")
    return key


def decode(key: str, text: str) -> Any:
    """A variable's text as JSON, or ``InvalidVariable`` saying where it breaks."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidVariable(key, f"not JSON: {exc.msg} (line {exc.lineno})") from None


class Variable:
    """Read and write variables (Airflow's ``Variable.get`` and ``Variable.set``)."""

    @staticmethod
    def get(key: str, default: Any = _RAISE, deserialize_json: bool = False) -> Any:
        """The value of ``key`` (text, or its JSON with ``deserialize_json``); ``default``
        when there is none, else ``VariableNotFound``."""
        text = os.environ.get(variable_env_name(key))
        if text is None:
            text = _stored(key)
        if text is None:
            if default is _RAISE:
                raise VariableNotFound(key)
            return default
        if is_sensitive(key):
            masking.register(text)
        return decode(key, text) if deserialize_json else text

    @staticmethod
    def set(
        key: str, value: Any, serialize_json: bool = False, description: str | None = None
    ) -> None:
        """Store ``value`` under ``key`` (a str, or anything JSON can write with
        ``serialize_json``), audited; a secret is masked from now on. An environment
        variable ``DAGRUN_VAR_<KEY>`` still overrides it where it is set."""
        check_key(key)
        if serialize_json:
            try:
                value = json.dumps(value)
            except (TypeError, ValueError) as exc:
                raise InvalidVariable(key, f"cannot be written as JSON ({exc})") from None
        elif not isinstance(value, str):
            raise InvalidVariable(
                key, f"a value is a str (or pass serialize_json=True), not {type(value).__name__}"
            )
        if is_sensitive(key):
            masking.register(value)
        _store_value(key, value, description)


def _stored(key: str) -> str | None:
    from dagrun.runtime.current import db_url
    from dagrun.store.engine import shared_store
    from dagrun.store.variables import get_variable

    store = shared_store(db_url())
    with store.read() as conn:
        return get_variable(conn, key)


def _store_value(key: str, value: str, description: str | None) -> None:
    """Write the variable and its audit entry (naming the task that set it, in an attempt)
    in one transaction."""
    from dagrun.runtime.current import current, db_url
    from dagrun.store import audit
    from dagrun.store.engine import shared_store
    from dagrun.store.variables import set_variable

    context = current()
    store = shared_store(db_url())
    where = {"task_id": context.task_id} if context else {}
    with store.write() as conn:
        set_variable(conn, key, value, description, store.now(conn))
        audit.record(
            store,
            conn,
            "variable_set",
            context.dag_id if context else None,
            context.run_id if context else None,
            key=key,
            **where,
        )


class _Values:
    """``var.value`` or ``var.json``: each attribute (or item, for keys like ``my-key``) is
    ``Variable.get`` of that key; ``get(key, default)`` gives a default."""

    def __init__(self, deserialize_json: bool) -> None:
        self._json = deserialize_json

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        return Variable.get(key, deserialize_json=self._json)

    def __getitem__(self, key: str) -> Any:
        return Variable.get(key, deserialize_json=self._json)

    def get(self, key: str, default: Any = None) -> Any:
        return Variable.get(key, default, deserialize_json=self._json)

    def __repr__(self) -> str:
        return f"<variables by key: var.{'json' if self._json else 'value'}.<key>>"


class VariableAccessor:
    """``var`` in templates: ``{{ var.value.key }}`` (text) and ``{{ var.json.key.field }}``
    (its JSON), read only when a template touches them."""

    value = _Values(deserialize_json=False)
    json = _Values(deserialize_json=True)

    def __repr__(self) -> str:
        return "<variables: var.value.<key>, var.json.<key>>"


VAR = VariableAccessor()
