"""Declared params and run conf: ``Param``, the form a DAG's params are stored in, and the
check of a run's conf against them (DESIGN section 6.1).

A DAG declares its params once; the parser stores them in the spec as plain JSON, so the
CLI can check a ``--conf`` before it makes a run without importing the DAG file, and a
worker checks the same stored form again when an attempt starts (the file may have changed
since the trigger). JSON Schema is checked by the ``jsonschema`` package, imported only when
a param has a schema: it costs about 0.1 s, and most DAGs declare none.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Mapping
from typing import Any

from dagrun.errors import DagDefinitionError, ParamError, UsageError

_REQUIRED = object()  # the default of a Param given none: the run's conf must supply it


class Param:
    """A DAG param: a default (absent means the run's conf must give one), a description
    for people, and JSON Schema keywords (``type``, ``minimum``, ``enum``...).

    The schema and the default are checked when the DAG takes the param, not here: only
    there is its name known, and an error that does not name the param is hard to act on.
    """

    __slots__ = ("default", "description", "schema")

    def __init__(self, default: Any = _REQUIRED, description: str | None = None, **schema: Any):
        self.default = default
        self.description = description
        self.schema = schema

    def __repr__(self) -> str:
        shown = [] if self.default is _REQUIRED else [repr(self.default)]
        if self.description is not None:
            shown.append(f"description={self.description!r}")
        shown += [f"{k}={v!r}" for k, v in self.schema.items()]
        return f"Param({', '.join(shown)})"


class ParamRef:
    """A DAG param standing for its value in a run: an argument of a task call that the
    task receives as the run's value (what Airflow's ``@dag`` function's parameters are)."""

    __slots__ = ("default", "name")

    def __init__(self, name: str, default: Any = None):
        self.name = name
        self.default = default

    def __repr__(self) -> str:
        return f"<param {self.name}>"


def serialise(params: Mapping[str, Any], *, dag_id: str) -> dict[str, dict]:
    """The stored form of a DAG's params: ``{name: {"default", "schema", "description"}}``,
    with no ``"default"`` for a required param. A plain value is a Param with that default
    and no schema. Errors name the DAG and the param, and surface when the file is parsed."""
    stored = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name or not name.isprintable():
            raise DagDefinitionError(
                f"param name {name!r} must be a non-empty string of printable characters",
                dag_id=dag_id,
            )
        try:
            stored[name] = _entry(value if isinstance(value, Param) else Param(value))
        except ValueError as exc:
            raise DagDefinitionError(f"param {name!r}: {exc}", dag_id=dag_id) from None
    return stored


def _entry(param: Param) -> dict[str, Any]:
    """One param's stored form, after checking its schema and its default against it.
    Both go through JSON first, so a tuple default is checked (and later given) as the
    list the stored spec will hold."""
    if param.description is not None and not isinstance(param.description, str):
        raise ValueError(f"description must be a string, not {param.description!r}")
    schema = _json_copy(param.schema, "schema")
    if schema:
        from jsonschema.exceptions import SchemaError

        try:
            _validator(schema).check_schema(schema)
        except SchemaError as exc:
            raise ValueError(f"bad JSON Schema: {_one_line(exc)}") from None
    entry: dict[str, Any] = {}
    if param.default is not _REQUIRED:
        entry["default"] = _json_copy(param.default, "default")
        problem = _problem(schema, entry["default"])
        if problem:
            raise ValueError(f"default {problem}")
    return {**entry, "schema": schema, "description": param.description}


def _json_copy(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable ({exc})") from None


def parse_conf(text: str | bytes | None, source: str = "--conf") -> dict[str, Any]:
    """The run conf given as ``--conf`` text (or the bytes of a file, named by
    ``source`` in the errors); no text is an empty conf."""
    if not text:
        return {}
    try:
        conf = json.loads(text)
    except ValueError as exc:  # a UnicodeDecodeError too
        raise UsageError(f"{source} is not JSON: {exc}") from None
    if not isinstance(conf, dict):
        raise UsageError(f"{source} must be a JSON object, e.g. '{{\"n\": 3}}'")
    return conf


def resolve(declared: Mapping[str, dict], conf: Mapping[str, Any]) -> dict[str, Any]:
    """The params a run's tasks see: the declared defaults, overridden by the conf (keys
    the DAG does not declare are kept, as Airflow does), each declared param checked
    against its schema. Raises :class:`ParamError` for the first bad param in name order.

    Defaults are copied: they live in the DAG a worker child keeps between attempts, and a
    task that changed a list it was given must not change the next attempt's."""
    values = copy.deepcopy({n: p["default"] for n, p in declared.items() if "default" in p})
    values.update(conf)
    for name in sorted(declared):
        if name not in values:
            raise ParamError(
                f"param {name!r} is required: give it in --conf, "
                f"e.g. --conf '{{{json.dumps(name)}: ...}}'",
                name=name,
            )
        problem = _problem(declared[name]["schema"], values[name])
        if problem:
            raise ParamError(f"param {name!r}: {problem}", name=name, value=values[name])
    return values


def resolve_or_defaults(declared: Mapping[str, dict], conf: Mapping[str, Any]) -> dict[str, Any]:
    """``resolve``, for what must go on when a conf no longer fits the DAG's params (a
    callback hearing of the failure that conf caused, a clear following a marker): the
    defaults alone, or no params at all when a param is required."""
    for given in (conf, {}):
        with contextlib.suppress(ParamError):
            return resolve(declared, given)
    return {}


def _problem(schema: dict, value: Any) -> str | None:
    """What is wrong with ``value`` under ``schema``, in one line, or None. The validator
    is built per call (a few microseconds), which caching by schema text would not beat."""
    if not schema:
        return None
    from jsonschema.exceptions import best_match

    kind = _validator(schema)
    error = best_match(kind(schema, format_checker=kind.FORMAT_CHECKER).iter_errors(value))
    return _one_line(error) if error else None


def _validator(schema: dict) -> Any:
    """The validator class for the schema's ``$schema`` (the latest draft without one)."""
    from jsonschema.validators import validator_for

    return validator_for(schema)


def _one_line(error: Any) -> str:
    """A jsonschema error's message, and where inside the value (or the schema) it lies when
    not at its top: the message alone does not say which field of an object is wrong."""
    return f"{error.message} (at {error.json_path})" if error.path else error.message
