"""``/api`` keeps its contract, over real HTTP against ``dagrun web``, with what real commands
recorded: a run with a task group, a mapped task, a retried failure and its callback, logs, an asset
a scheduler-made run consumed, a waiting run with a conf, audit entries, an import error and
an import warning.

Every answer of every route (200s and errors) validates against ``/api/openapi.json``, every
route was called, and a bounded schemathesis run (a fixed number of derandomized examples per
route) finds no server error and no answer the description does not allow.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from dagrun.webapp.api import API_ROUTES
from dagrun.webapp.openapi import document, path_pattern
from tests.helpers import (
    cli_env_in,
    db_rows,
    run_cli,
    start_cli,
    stop_process,
    wait_until,
    write_dag,
)

pytestmark = pytest.mark.slow

SHOP_DAG = """
    from dagrun import DAG, Asset, TaskGroup, task


    def heard(context):
        print("heard the failure")


    with DAG("shop", schedule="@daily", start_date="2026-01-01", catchup=False,
             timezone="Europe/Paris", tags=["sales"], description="The shop's day"):
        @task
        def make():
            return [1, 2, 3]

        @task
        def add(x):
            if x == 2:
                raise ValueError("two is bad")
            return x

        with TaskGroup("prep"):
            @task(outlets=[Asset("daily")])
            def clean(ds):
                return 1

            @task(retries=1, retry_delay=0, on_failure_callback=heard)
            def flaky():
                raise RuntimeError("always")

            clean() >> flaky()

        add.expand(x=make())
    """

REPORT_DAG = """
    from dagrun import DAG, Asset, task

    with DAG("report", schedule=[Asset("daily")]):
        @task
        def report():
            return 1

        report()
    """

WARNED_DAG = """
    from airflow import DAG
    from airflow.operators.bash import BashOperator

    with DAG("warned", schedule=None, owner_links={"data": "https://wiki"}):
        BashOperator(task_id="hello", bash_command="echo hi")
    """

BROKEN_DAG = """
    raise ValueError("broken <b>file</b>")
    """

SERVING = re.compile(r"serving (http://127\.0\.0\.1:\d+)/")


@dataclass(frozen=True)
class Served:
    base: str
    description: dict[str, Any]


@pytest.fixture(scope="module")
def served(module_db_url, tmp_path_factory) -> Iterator[Served]:
    """``dagrun web`` over a store filled by real commands (see the module's docstring),
    shared by the module's tests, which only read."""
    folder = tmp_path_factory.mktemp("api")
    env = {**cli_env_in(folder), "DAGRUN_DB_URL": module_db_url}
    for name, source in [
        ("shop.py", SHOP_DAG),
        ("report.py", REPORT_DAG),
        ("warned.py", WARNED_DAG),
        ("broken.py", BROKEN_DAG),
    ]:
        write_dag(folder / "dags", name, source)
    ran = run_cli("run", "shop", "--run-id", "r1", env=env)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # flaky and add[1] fail
    _schedule_until_report_ran(env, folder / "scheduler.log")
    triggered = run_cli("trigger", "shop", "--conf", '{"x": [1, "<b>"]}', env=env)
    assert triggered.returncode == 0, triggered.stdout + triggered.stderr
    log = folder / "web.log"
    web = start_cli("web", "--port", "0", env=env, log=log)
    try:
        base = wait_until(lambda: _address(web, log), timeout=60, what="dagrun web to serve")
        yield Served(str(base), _get_json(f"{base}/api/openapi.json"))
    finally:
        assert stop_process(web) == 0, log.read_text()


def _schedule_until_report_ran(env: dict[str, str], log: Path) -> None:
    """A real scheduler until the asset ``shop`` made has run ``report`` and nothing is left
    to run (the callback of flaky's failure sent)."""
    scheduler = start_cli("scheduler", "--workers", "1", "--poll", "0.2", env=env, log=log)
    try:

        def settled() -> bool:
            [(done,)] = db_rows(
                env, "SELECT count(*) FROM dag_run WHERE dag_id = 'report' AND state = 'success'"
            )
            [(busy,)] = db_rows(
                env, "SELECT count(*) FROM dag_run WHERE state IN ('waiting', 'queued', 'running')"
            )
            [(pending,)] = db_rows(
                env, "SELECT count(*) FROM callback WHERE state IN ('pending', 'running')"
            )
            return done > 0 and busy == 0 and pending == 0

        wait_until(settled, 60, interval=0.2, what="the scheduler to run report and settle")
    finally:
        assert stop_process(scheduler) == 0, log.read_text()


def _address(process, log: Path) -> str | None:
    if process.poll() is not None:
        raise AssertionError(f"dagrun web exited {process.returncode}: {log.read_text()}")
    found = SERVING.search(log.read_text())
    return found.group(1) if found else None


def _get(url: str) -> tuple[int, str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return response.status, response.headers["Content-Type"], json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], json.load(error)


def _get_json(url: str) -> Any:
    status, _, document = _get(url)
    assert status == 200, (url, document)
    return document


# ---------------------------------------------------------------- every route, real answers


def _template(description: dict[str, Any], path: str) -> str:
    """The described route the router would answer ``path`` with (the first that matches)."""
    for template in description["paths"]:
        if re.fullmatch(path_pattern(template), path):
            return template
    raise AssertionError(f"{path} is not described")


def _answer_schema(description: dict[str, Any], template: str, status: int) -> dict[str, Any]:
    answers = description["paths"][template]["get"]["responses"]
    assert str(status) in answers, f"{template} answered {status}, which it does not describe"
    answer = answers[str(status)]
    if "$ref" in answer:
        answer = description["components"]["responses"][answer["$ref"].rsplit("/", 1)[1]]
    # The components ride along, so the schema's "#/components/..." references resolve.
    schema = answer["content"]["application/json"]["schema"]
    return {**schema, "components": description["components"]}


def _check(served: Served, url: str) -> tuple[str, int, Any]:
    """GET ``url`` and validate its answer against the description; (route, status, body)."""
    status, content_type, body = _get(served.base + url)
    assert content_type.startswith("application/json"), (url, content_type)
    template = _template(served.description, url.split("?")[0])
    schema = _answer_schema(served.description, template, status)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(body)]
    assert not errors, f"GET {url} ({status}) does not match {template}:\n" + "\n".join(errors)
    return template, status, body


def test_every_answer_of_every_route_matches_the_description(served):
    def check(url: str, expected: int = 200) -> Any:
        template, status, body = _check(served, url)
        assert status == expected, (url, body)
        seen.setdefault(template, set()).add(status)
        return body

    seen: dict[str, set[int]] = {}
    runs = check("/api/dags/shop/runs")["runs"]
    states = {r["state"] for r in runs}
    assert {"failed", "waiting"} <= states, states
    waiting = next(r["run_id"] for r in runs if r["state"] == "waiting")
    report_run = check("/api/dags/report/runs?state=success")["runs"][0]
    older = check("/api/dags/shop/runs?runs=1")["older_before"]
    check(f"/api/dags/shop/runs?runs=1&before={quote(older)}")

    run = check("/api/dags/shop/runs/r1")
    assert [c["event"] for c in run["callbacks"]] == ["task_failure"]
    assert {t["task_id"]: t["try_number"] for t in run["tasks"]}["prep.flaky"] == 2
    assert check(f"/api/dags/shop/runs/{quote(waiting, safe='')}")["conf"] == {"x": [1, "<b>"]}
    check(f"/api/dags/report/runs/{quote(report_run['run_id'], safe='')}")

    log = "/api/dags/shop/runs/r1/tasks/{}/tries/{}/log"
    clean = check(log.format("prep.clean", 1))
    assert (clean["running"], clean["found"], clean["skipped"]) == (False, True, 0)
    assert clean["offset"] == len(clean["text"].encode()) > 0
    failed = check(log.format("add", 1) + "?map_index=1&offset=0")
    assert "two is bad" in failed["text"]
    assert check(log.format("add", 1) + f"?map_index=1&offset={failed['offset']}")["text"] == ""
    assert check(log.format("prep.clean", 1) + f"?offset={10**18 - 1}")["text"] == ""
    check(log.format("prep.clean", 9), 404)
    check(log.format("add", 1) + "?map_index=7", 404)
    check(log.format("add", 1) + "?offset=-1", 400)

    grid = check("/api/dags/shop/grid?expand=add&runs=5")
    mapped = next(t for t in grid["tasks"] if t["task_id"] == "add")
    assert mapped["indexes"] and any("counts" in c for c in mapped["cells"])
    assert [g["group"] for g in grid["groups"]] == ["prep"]
    check("/api/dags/shop/grid?fold=prep")
    check("/api/dags/shop/graph")
    assert {n["state"] for n in check("/api/dags/shop/graph?run=r1")["nodes"]} >= {"failed"}

    [daily] = check("/api/assets")
    assert daily["partitions"] and daily["partitions"][-1]["consumed_by"], daily
    assert check("/api/dags/report/assets")["waits_for"][0]["status"] == "consumed"
    check("/api/dags/shop/assets")

    dags = check("/api/dags")
    assert dags["import_errors"] == 1 and {d["dag_id"] for d in dags["dags"]} >= {"shop"}
    assert [e["file"].rsplit("/", 1)[1] for e in check("/api/import-errors")] == ["broken.py"]
    assert check("/api/import-warnings")[0]["file"].endswith("warned.py")
    assert {e["action"] for e in check("/api/audit")} == {"trigger"}
    assert len(check("/api/audit?limit=1")) == 1
    assert {e["dag_id"] for e in check("/api/dags/shop/audit")} == {"shop"}
    assert check("/api/openapi.json")["openapi"].startswith("3.1")

    check("/api/dags/nope/grid", 404)
    check("/api/dags/nope/audit", 404)
    check("/api/dags/shop/runs/no-such-run", 404)
    check("/api/dags/shop/graph?run=no-such-run", 404)
    check("/api/dags/shop/runs?runs=many", 400)
    check("/api/dags/shop/grid?before=yesterday", 400)

    answered = {t for t, statuses in seen.items() if 200 in statuses}
    assert answered == set(served.description["paths"]), "a route was not called"


# ---------------------------------------------------------------- schemathesis, bounded


#: The description the server answers with (checked below), known before the server starts
#: so that schemathesis can make a test per route.
DESCRIPTION = document(API_ROUTES)
fuzzed = schemathesis.openapi.from_dict(DESCRIPTION)
#: Ids of what the store holds: a fuzzed id alone would almost only ever be a 404.
KNOWN_IDS = {"dag_id": "shop", "run_id": "r1", "task_id": "make", "try_number": "1"}


def test_the_server_answers_with_the_description_the_routes_make(served):
    assert served.description == json.loads(json.dumps(DESCRIPTION))


@fuzzed.parametrize()
@fuzzed.given(known=st.booleans())
@settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_fuzzed_requests_get_no_server_error_and_conforming_answers(case, known, served):
    """Every route, 20 derandomized cases: fuzzed query parameters on ids the store holds
    (when ``known``) or fuzzed ones."""
    if known and case.path_parameters:
        case.path_parameters.update({k: KNOWN_IDS[k] for k in case.path_parameters})
    case.call_and_validate(
        base_url=served.base,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
