"""What an ``/api`` route declares about itself, and the OpenAPI 3.1 document made of that.

Each route is declared once (``ApiRoute``): its path with the ids it names, its handler and
its query parameters. The router matches the path the declaration compiles to, and the
document describes the same declaration: the parameters as declared, the answer as the JSON
Schema of the handler's return annotation (a TypedDict of ``documents``, or a list of one),
the errors from what the route names. Every ``/api`` route the router knows comes from the
table, and a handler cannot answer a shape other than the one described: mypy checks what it
builds against its annotation.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from http import HTTPStatus
from typing import (
    Annotated,
    Any,
    NotRequired,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from dagrun import __version__
from dagrun.timing.instants import Instant
from dagrun.webapp.auth import SESSION_COOKIE
from dagrun.webapp.documents import ErrorJson
from dagrun.webapp.http import Request, Response, json_response

#: The characters of a DAG's or task's id in a URL; a run id may hold any (even ``/``) but
#: a line break or NUL (which PostgreSQL refuses in text).
ID_CHARS = r"[A-Za-z0-9_.-]+"
RUN_ID_CHARS = r"[^\n\x00]+"
TRY_CHARS = r"[0-9]{1,9}"

#: Called as ``handler(site, request, **ids)``; returns the route's JSON document.
ApiHandler = Callable[..., Any]

_PLAIN_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


#: What each answer other than 200 means (its body is an ``ErrorJson``).
_ERRORS = {
    HTTPStatus.UNAUTHORIZED: "Served off loopback, the request carries no valid bearer token "
    "or session.",
    HTTPStatus.BAD_REQUEST: "A query parameter is not valid; the error says which.",
    HTTPStatus.NOT_FOUND: "No DAG, run, task or try with the ids the path names.",
    HTTPStatus.SERVICE_UNAVAILABLE: "The database does not answer; try again later.",
}


_SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A token `dagrun users token NAME` made.",
    },
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": SESSION_COOKIE,
        "description": "The session cookie the login form sets.",
    },
}


@dataclass(frozen=True)
class Param:
    """A parameter of a route: its name, its JSON Schema and what it does."""

    name: str
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True)
class PathId:
    """An id a path names, and the characters it may hold (checked by the router)."""

    name: str
    chars: str
    description: str

    @property
    def param(self) -> Param:
        return Param(self.name, {"type": "string", "pattern": f"^{self.chars}$"}, self.description)


PATH_IDS = {
    p.name: p
    for p in (
        PathId("dag_id", ID_CHARS, "The DAG's id."),
        PathId("run_id", RUN_ID_CHARS, "The run's id, percent-encoded."),
        PathId("task_id", ID_CHARS, "The task's id."),
        PathId("try_number", TRY_CHARS, "The attempt's try number (1 for the first)."),
    )
}


@dataclass(frozen=True)
class ApiRoute:
    """An ``/api`` route: its path (ids in braces, as OpenAPI writes them), its handler and
    its query parameters."""

    path: str
    handler: ApiHandler
    query: tuple[Param, ...] = ()

    @property
    def ids(self) -> list[PathId]:
        return [PATH_IDS[name] for name in re.findall(r"\{(\w+)\}", self.path)]

    @property
    def pattern(self) -> str:
        """The path as the router's regular expression, each id a named group."""
        return path_pattern(self.path)

    def respond(self, site: Any, request: Request, **ids: str) -> Response:
        """Answer with the handler's document. Only the declared query parameters reach
        the handler, so the description lists every parameter a handler can read."""
        known = {p.name for p in self.query}
        query = {k: v for k, v in request.query.items() if k in known}
        return json_response(self.handler(site, replace(request, query=query), **ids))

    @property
    def errors(self) -> list[HTTPStatus]:
        """What the route may answer besides 200: 401 without a login off loopback, 400
        for a bad query parameter, 404 for an id the store does not know, 503 when the
        database does not answer (off loopback even the login reads it)."""
        found = [HTTPStatus.UNAUTHORIZED]
        found += [HTTPStatus.BAD_REQUEST] if self.query else []
        found += [HTTPStatus.NOT_FOUND] if self.ids else []
        return [*found, HTTPStatus.SERVICE_UNAVAILABLE]


def path_pattern(path: str) -> str:
    """``/api/dags/{dag_id}`` as ``/api/dags/(?P<dag_id>[A-Za-z0-9_.-]+)``."""
    parts = re.split(r"\{(\w+)\}", path)
    return "".join(
        re.escape(part) if i % 2 == 0 else f"(?P<{part}>{PATH_IDS[part].chars})"
        for i, part in enumerate(parts)
    )


# ---------------------------------------------------------------- the document


def document(routes: Sequence[ApiRoute]) -> dict[str, Any]:
    """The OpenAPI 3.1 description of ``routes``."""
    schemas = Schemas()
    error = schemas.of(ErrorJson)
    paths = {r.path: {"get": _operation(r, schemas)} for r in routes}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "dagrun",
            "version": __version__,
            "description": "The read-only JSON API of the dagrun web page. Every instant is "
            "ISO 8601 in UTC; a DAG's local time is alongside where the page shows it. Served "
            "off loopback, it needs a bearer token or the login form's session.",
        },
        "paths": paths,
        # On loopback no login is needed (the empty requirement); off it, either will do.
        "security": [{}, {"bearer": []}, {"session": []}],
        "components": {
            "securitySchemes": _SECURITY_SCHEMES,
            "schemas": schemas.components,
            "responses": {
                _response_name(status): {
                    "description": _ERRORS[status],
                    "content": {"application/json": {"schema": error}},
                }
                for status in sorted({s for r in routes for s in r.errors})
            },
        },
    }


def _operation(route: ApiRoute, schemas: Schemas) -> dict[str, Any]:
    doc = inspect.getdoc(route.handler) or route.handler.__name__
    summary, _, description = doc.partition("\n\n")
    answer = _return_type(route.handler)
    parameters = [_parameter(p.param, "path", True) for p in route.ids]
    parameters += [_parameter(p, "query", False) for p in route.query]
    operation: dict[str, Any] = {
        "operationId": route.handler.__name__,
        "summary": " ".join(summary.split()),
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": schemas.of(answer)}},
            },
            **{
                str(status.value): {"$ref": f"#/components/responses/{_response_name(status)}"}
                for status in route.errors
            },
        },
    }
    if description:
        operation["description"] = " ".join(description.split())
    if parameters:
        operation["parameters"] = parameters
    return operation


def _return_type(handler: ApiHandler) -> Any:
    """The handler's return annotation, evaluated alone: its parameters may name types
    imported only for the type check (``Site``)."""
    returns = types.SimpleNamespace(__annotations__={"return": handler.__annotations__["return"]})
    return get_type_hints(returns, globalns=handler.__globals__, include_extras=True)["return"]


def _parameter(param: Param, where: str, required: bool) -> dict[str, Any]:
    return {
        "name": param.name,
        "in": where,
        "required": required,
        "description": param.description,
        "schema": param.schema,
    }


def _response_name(status: HTTPStatus) -> str:
    return status.phrase.replace(" ", "")


class Schemas:
    """JSON Schema for type hints; each TypedDict becomes a named component (its name
    without ``Json``), described by its docstring, with no keys beyond its own."""

    def __init__(self) -> None:
        self.components: dict[str, dict[str, Any]] = {}
        self._named: dict[str, type] = {}

    def of(self, hint: Any) -> dict[str, Any]:
        if hint is Any:
            return {}
        if hint is Instant:
            return {"type": "string", "format": "date-time"}
        if hint in _PLAIN_TYPES:
            return {"type": _PLAIN_TYPES[hint]}
        if is_typeddict(hint):
            return {"$ref": f"#/components/schemas/{self._component(hint)}"}
        origin, args = get_origin(hint), get_args(hint)
        if origin is Annotated:
            return self._annotated(args[0], args[1:])
        if origin in (Union, types.UnionType):
            return _one_of([self.of(a) for a in args])
        if origin is list:
            return {"type": "array", "items": self.of(args[0])}
        if origin is tuple:
            items = [self.of(a) for a in args]
            return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items)}
        if origin is dict:
            values = self.of(args[1])
            return {"type": "object", **({"additionalProperties": values} if values else {})}
        raise TypeError(f"no JSON Schema for the type {hint!r}")

    def _annotated(self, base: Any, notes: tuple[Any, ...]) -> dict[str, Any]:
        """A type with an enum of the values it may take (``Annotated[str, RunState]``)."""
        schema = self.of(base)
        for note in notes:
            if isinstance(note, type) and issubclass(note, Enum):
                schema["enum"] = [member.value for member in note]
        return schema

    def _component(self, typed: type) -> str:
        name = typed.__name__.removesuffix("Json")
        if self._named.setdefault(name, typed) is not typed:
            raise TypeError(f"two documents are called {name}: {typed!r} and {self._named[name]!r}")
        if name not in self.components:
            self.components[name] = {}  # named before its fields, so a field may refer to it
            self.components[name] = self._object(typed)
        return name

    def _object(self, typed: type) -> dict[str, Any]:
        hints = get_type_hints(typed, include_extras=True)
        optional = {k for k, h in hints.items() if get_origin(h) is NotRequired}
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                k: self.of(get_args(h)[0] if k in optional else h) for k, h in hints.items()
            },
            "required": [k for k in hints if k not in optional],
            "additionalProperties": False,
        }
        if typed.__doc__:
            schema["description"] = " ".join(typed.__doc__.split())
        return schema


def _one_of(members: list[dict[str, Any]]) -> dict[str, Any]:
    """A union: plain types as one ``type`` list, anything else as ``anyOf``."""
    if all(m.keys() == {"type"} for m in members):
        return {"type": [m["type"] for m in members]}
    return {"anyOf": members}
