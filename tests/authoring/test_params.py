"""Declared params and run conf (dagrun.authoring.params): checked when the DAG is defined,
stored as plain JSON, and resolved against a run's conf."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dagrun import DAG, Param
from dagrun.authoring.params import parse_conf, resolve, serialise
from dagrun.errors import DagDefinitionError, ParamError, UsageError


def test_a_plain_value_is_a_param_with_that_default_and_no_schema():
    assert serialise({"region": "EU"}, dag_id="d") == {
        "region": {"default": "EU", "schema": {}, "description": None}
    }


def test_a_param_keeps_its_schema_and_description_and_without_default_is_required():
    stored = serialise(
        {
            "n": Param(5, "how many", type="integer", minimum=1),
            "region": Param(enum=["EU", "US"]),
            "pair": Param((1, 2), type="array"),
        },
        dag_id="d",
    )
    assert stored == {
        "n": {"default": 5, "schema": {"type": "integer", "minimum": 1}, "description": "how many"},
        "region": {"schema": {"enum": ["EU", "US"]}, "description": None},
        # checked and stored as the list the JSON spec holds: a tuple is no JSON array
        "pair": {"default": [1, 2], "schema": {"type": "array"}, "description": None},
    }
    assert json.loads(json.dumps(stored)) == stored


def test_a_dag_stores_its_params_serialised():
    dag = DAG("d", params={"n": Param(5, type="integer"), "region": "EU"})
    assert dag.params == {
        "n": {"default": 5, "schema": {"type": "integer"}, "description": None},
        "region": {"default": "EU", "schema": {}, "description": None},
    }


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"n": Param(type="integr")},
            "param 'n': bad JSON Schema: 'integr' is not valid under any of the given schemas"
            " (at $.type)",
        ),
        (
            {"n": Param(minimum="1")},
            "param 'n': bad JSON Schema: '1' is not of type 'number' (at $.minimum)",
        ),
        (
            {"n": Param(0, type="integer", minimum=1)},
            "param 'n': default 0 is less than the minimum of 1",
        ),
        ({"n": Param("5", type="integer")}, "param 'n': default '5' is not of type 'integer'"),
        ({"day": Param("2026-13-01", format="date")}, "param 'day': default '2026-13-01' is not"),
        (
            {"o": Param({"a": "x"}, properties={"a": {"type": "integer"}})},
            "param 'o': default 'x' is not of type 'integer' (at $.a)",
        ),
        ({"when": object()}, "param 'when': default is not JSON-serialisable"),
        ({"x": float("nan")}, "param 'x': default is not JSON-serialisable"),
        ({"e": Param(1, enum=[object()])}, "param 'e': schema is not JSON-serialisable"),
        ({"n": Param(1, description=3)}, "param 'n': description must be a string, not 3"),
        ({"": 1}, "param name '' must be"),
        ({"a\nb": 1}, "param name 'a\\nb' must be"),
        ({3: 1}, "param name 3 must be"),
    ],
)
def test_a_bad_param_is_a_definition_error_naming_the_dag_and_the_param(params, message):
    with pytest.raises(DagDefinitionError) as info:
        DAG("d", params=params)
    assert str(info.value).startswith(f"DAG 'd': {message}")
    assert "\n" not in str(info.value)
    assert info.value.dag_id == "d"


@pytest.mark.parametrize(
    ("text", "conf"),
    [(None, {}), ("", {}), ('{"n": 3, "x": [1]}', {"n": 3, "x": [1]}), ("{}", {})],
)
def test_parse_conf_reads_a_json_object(text, conf):
    assert parse_conf(text) == conf


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{n: 3}", "--conf is not JSON: Expecting property name enclosed in double quotes"),
        ("{'n': 3}", "--conf is not JSON: "),
        ("[1, 2]", "--conf must be a JSON object, e.g. '{\"n\": 3}'"),
        ("3", "--conf must be a JSON object"),
        ("null", "--conf must be a JSON object"),
    ],
)
def test_parse_conf_rejects_what_is_not_a_json_object(text, message):
    with pytest.raises(UsageError) as info:
        parse_conf(text)
    assert str(info.value).startswith(message)


DECLARED = serialise(
    {
        "tags": Param(["a"], type="array", items={"type": "string"}),
        "n": Param(5, type="integer", minimum=1),
        "region": "EU",
    },
    dag_id="d",
)


def test_resolve_gives_the_defaults_without_a_conf():
    assert resolve(DECLARED, {}) == {"n": 5, "region": "EU", "tags": ["a"]}


def test_resolve_lets_the_conf_override_and_keeps_keys_not_declared():
    got = resolve(DECLARED, {"n": 3, "region": 7, "extra": {"any": "thing"}})
    assert got == {"n": 3, "region": 7, "tags": ["a"], "extra": {"any": "thing"}}


def test_resolve_copies_defaults_so_a_task_cannot_change_the_next_attempts():
    resolve(DECLARED, {})["tags"].append("changed")
    assert resolve(DECLARED, {})["tags"] == ["a"]


@pytest.mark.parametrize(
    ("conf", "name", "message"),
    [
        ({"n": -3}, "n", "param 'n': -3 is less than the minimum of 1"),
        ({"n": "3"}, "n", "param 'n': '3' is not of type 'integer'"),
        ({"tags": ["a", 2]}, "tags", "param 'tags': 2 is not of type 'string' (at $[1])"),
        # both are bad: the first in name order is the one reported, not in declared order
        ({"tags": "a", "n": 0}, "n", "param 'n': 0 is less than the minimum of 1"),
    ],
)
def test_resolve_rejects_a_conf_that_breaks_a_schema_naming_the_param(conf, name, message):
    with pytest.raises(ParamError) as info:
        resolve(DECLARED, conf)
    assert str(info.value) == message
    assert (info.value.name, info.value.value) == (name, conf[name])
    assert isinstance(info.value, UsageError | ValueError)


def test_resolve_requires_a_param_without_default():
    declared = serialise({"region": Param(type="string"), "n": 1}, dag_id="d")
    with pytest.raises(ParamError) as info:
        resolve(declared, {"n": 2})
    assert str(info.value) == (
        "param 'region' is required: give it in --conf, e.g. --conf '{\"region\": ...}'"
    )
    assert (info.value.name, info.value.value) == ("region", None)
    assert resolve(declared, {"region": "EU"}) == {"n": 1, "region": "EU"}


def test_params_without_a_schema_do_not_import_jsonschema():
    """It costs about 0.1 s to import, in every parse and worker child of a DAG file."""
    code = (
        "import sys\n"
        "from dagrun import DAG\n"
        "from dagrun.authoring.params import resolve\n"
        "dag = DAG('d', params={'n': 1})\n"
        "assert resolve(dag.params, {'n': 2, 'x': 3}) == {'n': 2, 'x': 3}\n"
        "print('jsonschema' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
