"""``/api/openapi.json``: a valid OpenAPI 3.1 document made from the route table and the
TypedDicts the handlers return, describing every ``/api`` route the router serves and no
other; and the JSON Schema made of type hints, checked piece by piece."""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

import jsonschema
import pytest
from openapi_spec_validator import validate

from dagrun.runtime.dag_sync import sync_dags
from dagrun.states import RunState
from dagrun.store import accounts
from dagrun.timing.instants import Instant
from dagrun.webapp import WebApp
from dagrun.webapp.api import API_ROUTES
from dagrun.webapp.auth import SESSION_COOKIE, Gate
from dagrun.webapp.http import Request
from dagrun.webapp.openapi import ApiRoute, Param, Schemas, document, path_pattern
from dagrun.webapp.routes import ROUTES, route
from tests.helpers import write_dag
from tests.webapp.test_webapp import IDLE_DAG, call


@pytest.fixture(scope="module")
def description() -> dict[str, Any]:
    return document(API_ROUTES)


def test_the_description_is_valid_openapi_3_1(description):
    validate(description)
    assert description["openapi"] == "3.1.0"


def test_every_api_route_the_router_serves_is_described_and_nothing_else(description):
    served = {p.pattern for p, _ in ROUTES if p.pattern.startswith("/api")}
    described = {path_pattern(template) for template in description["paths"]}
    assert served == described


def test_each_route_lists_its_ids_and_query_parameters_with_their_types(description):
    runs = description["paths"]["/api/dags/{dag_id}/runs"]["get"]
    params = {(p["in"], p["name"]): p for p in runs["parameters"]}
    assert set(params) == {("path", "dag_id"), ("query", "runs"), ("query", "before")} | {
        ("query", "state")
    }
    assert params["path", "dag_id"]["required"] is True
    assert params["query", "state"]["required"] is False
    assert params["query", "state"]["schema"]["enum"] == [s.value for s in RunState]
    assert params["query", "runs"]["schema"]["type"] == "integer"
    assert params["query", "before"]["schema"]["format"] == "date-time"
    assert set(runs["responses"]) == {"200", "400", "401", "404", "503"}
    assert set(description["paths"]["/api/dags"]["get"]["responses"]) == {"200", "401", "503"}
    assert set(description["paths"]["/api/openapi.json"]["get"]["responses"]) == {
        "200",
        "401",
        "503",
    }


def test_errors_are_described_with_the_error_json_shape(description):
    not_found = description["components"]["responses"]["NotFound"]
    schema = not_found["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/Error"}
    error = description["components"]["schemas"]["Error"]
    assert error["required"] == ["error", "status"]


def test_off_loopback_the_401_without_a_login_is_the_described_one(sqlite_store, tmp_path):
    description = document(API_ROUTES)
    assert description["components"]["securitySchemes"]["session"]["name"] == SESSION_COOKIE
    with sqlite_store.write() as conn:
        key = accounts.session_key(conn)
    gated = WebApp(sqlite_store, logs_root=tmp_path, gate=Gate(key))
    refused = call(gated, "/api/dags")
    assert refused.status == 401
    schema = description["paths"]["/api/dags"]["get"]["responses"]["401"]
    assert schema == {"$ref": "#/components/responses/Unauthorized"}
    error = {"$ref": "#/components/schemas/Error", "components": description["components"]}
    jsonschema.validate(refused.json(), error)


def test_an_answer_with_a_key_or_type_the_description_lacks_does_not_validate(description):
    def valid(run: dict) -> bool:
        schema = {"$ref": "#/components/schemas/Run", "components": description["components"]}
        return jsonschema.Draft202012Validator(schema).is_valid(run)

    run = {
        "run_id": "r1",
        "logical_date": "2026-01-01T00:00:00+00:00",
        "local_logical_date": "2026-01-01T01:00:00+01:00",
        "data_interval_start": "2026-01-01T00:00:00+00:00",
        "data_interval_end": "2026-01-02T00:00:00+00:00",
        "state": "success",
        "run_type": "manual",
        "start_date": None,
        "end_date": None,
        "duration": None,
        "conf": {},
    }
    assert valid(run)
    assert not valid({**run, "extra": 1})
    assert not valid({**run, "state": "exploded"})
    assert not valid({**run, "duration": "long"})
    assert not valid({k: v for k, v in run.items() if k != "conf"})


# ---------------------------------------------------------------- the route table


def _echo(site: object, request: Request, dag_id: str) -> dict[str, Any]:
    """Answers with what reached it."""
    return {"dag_id": dag_id, "query": request.query}


def test_only_the_declared_query_parameters_reach_the_handler():
    echo = ApiRoute("/api/dags/{dag_id}/echo", _echo, (Param("run", {"type": "string"}, "A run."),))
    request = Request("GET", "/api/dags/d/echo", {"run": "r", "undeclared": "x"})
    assert echo.respond(None, request, dag_id="d").body == (b'{"dag_id":"d","query":{"run":"r"}}')


def test_a_path_names_its_ids_for_the_router():
    assert path_pattern("/api/dags/{dag_id}/runs/{run_id}") == (
        r"/api/dags/(?P<dag_id>[A-Za-z0-9_.-]+)/runs/(?P<run_id>[^\n\x00]+)"
    )
    handler, ids = route("/api/dags/a.b-c/runs/manual__2026-01-01T00:00:00+00:00")
    assert handler.__self__.path == "/api/dags/{dag_id}/runs/{run_id}"
    assert ids == {"dag_id": "a.b-c", "run_id": "manual__2026-01-01T00:00:00+00:00"}
    handler, ids = route("/api/dags/d/runs/r/tasks/t/tries/2/log")
    assert handler.__self__.path.endswith("/tasks/{task_id}/tries/{try_number}/log")
    assert ids == {"dag_id": "d", "run_id": "r", "task_id": "t", "try_number": "2"}


def test_a_nul_in_an_id_or_a_query_value_is_refused_before_the_store(store, tmp_path):
    """PostgreSQL refuses text holding a NUL: a lookup of one was a 500 there."""
    write_dag(tmp_path / "dags", "idle.py", IDLE_DAG)
    sync_dags(store, str(tmp_path / "dags"))
    app = WebApp(store, logs_root=tmp_path / "logs")
    assert call(app, "/api/dags/idle/graph").status == 200
    refused = call(app, "/api/dags/idle/graph?run=r%00")
    assert (refused.status, refused.json()["error"]) == (400, "run holds a NUL character (%00)")
    assert call(app, "/dags/idle/graph?run=r%00").status == 400
    assert call(app, "/api/dags/idle/runs?state=queued%00").status == 400
    assert call(app, "/api/dags/idle/runs/r%00").status == 404


# ---------------------------------------------------------------- JSON Schema of type hints


class Inner(TypedDict):
    """An inner document."""

    name: str


class OuterJson(TypedDict):
    when: Instant
    maybe: Instant | None
    state: Annotated[str, RunState]
    count: int | None
    inner: Inner | None
    pair: tuple[str, int]
    tally: dict[str, int]
    anything: dict[str, Any]
    later: NotRequired[list[Inner]]


def test_a_typed_dict_becomes_a_named_closed_object():
    schemas = Schemas()
    assert schemas.of(OuterJson) == {"$ref": "#/components/schemas/Outer"}
    outer = schemas.components["Outer"]
    assert outer["additionalProperties"] is False
    assert "later" not in outer["required"] and "when" in outer["required"]
    assert schemas.components["Inner"]["description"] == "An inner document."
    assert outer["properties"] == {
        "when": {"type": "string", "format": "date-time"},
        "maybe": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
        "state": {"type": "string", "enum": [s.value for s in RunState]},
        "count": {"type": ["integer", "null"]},
        "inner": {"anyOf": [{"$ref": "#/components/schemas/Inner"}, {"type": "null"}]},
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "integer"}],
            "items": False,
            "minItems": 2,
        },
        "tally": {"type": "object", "additionalProperties": {"type": "integer"}},
        "anything": {"type": "object"},
        "later": {"type": "array", "items": {"$ref": "#/components/schemas/Inner"}},
    }


def test_a_type_with_no_json_schema_is_refused_by_name():
    with pytest.raises(TypeError, match="set"):
        Schemas().of(set[int])


def test_two_documents_of_one_name_are_refused():
    def inner() -> type:
        class Inner(TypedDict):
            other: int

        return Inner

    schemas = Schemas()
    schemas.of(Inner)
    with pytest.raises(TypeError, match="two documents are called Inner"):
        schemas.of(inner())
