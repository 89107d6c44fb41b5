"""``@task.virtualenv`` / ``@task.external_python`` as a DAG file sees them: the environment
options checked when the file is imported, and the function's source as it will travel to
another interpreter (dagrun.authoring.python_environments), without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagrun import DAG, PythonTask, task
from dagrun.authoring.python_environments import (
    PythonEnvironment,
    external_environment,
    function_source,
    virtualenv_environment,
)
from dagrun.errors import DagDefinitionError


def made(dag: DAG, task_id: str) -> PythonTask:
    found = dag.tasks[task_id]
    assert isinstance(found, PythonTask)
    return found


# ---------------------------------------------------------------- the decorators


def test_virtualenv_decorator_builds_a_python_task_with_its_environment():
    with DAG("d") as dag:

        @task.virtualenv(
            requirements=["six==1.17.0", "# a comment", ""],
            system_site_packages=True,
            pip_install_options=["--no-cache-dir"],
            index_urls="https://example.org/simple",
            string_args=["a", 2],
            env_vars={"X": "1"},
            retries=2,
        )
        def inside(x, ds):
            return x

        inside(1)
    t = made(dag, "inside")
    env = t.environment
    assert env == PythonEnvironment(
        requirements=("six==1.17.0",),
        system_site_packages=True,
        pip_install_options=("--no-cache-dir",),
        index_urls=("https://example.org/simple",),
        string_args=("a", "2"),
        env_vars={"X": "1"},
    )
    assert t.options["retries"] == 2
    assert t.function_source is not None and t.function_source.name == "inside"


def test_external_python_decorator_and_the_branch_forms():
    with DAG("d") as dag:

        @task.external_python(python="/opt/py/bin/python", serializer="dill")
        def outside():
            return 1

        @task.branch_virtualenv
        def choose():
            return None

        @task.branch_external_python(python="/opt/py/bin/python")
        def choose_outside():
            return None

        outside()
        choose()
        choose_outside()
    assert made(dag, "outside").environment == PythonEnvironment(
        python="/opt/py/bin/python", serializer="dill"
    )
    assert made(dag, "choose").choice == "branch"
    assert made(dag, "choose").environment == PythonEnvironment()
    assert made(dag, "choose_outside").choice == "branch"


def test_a_task_option_stays_the_tasks_and_a_typo_is_an_unknown_option():
    with pytest.raises(DagDefinitionError, match="unknown option 'requirement'"), DAG("d"):

        @task.virtualenv(requirement=["six"])
        def f():
            pass

        f()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"requirements": [1]}, "requirements must hold strings only, not 1"),
        ({"requirements": {"six": 1}}, "requirements must be a list of strings"),
        ({"python_version": 3.11}, "python_version must be a string such as '3.11', not 3.11"),
        ({"python_version": "three"}, "python_version must be a string"),
        ({"system_site_packages": "yes"}, "system_site_packages must be True or False"),
        ({"serializer": "json"}, "serializer must be one of 'pickle', 'cloudpickle', 'dill'"),
        ({"env_vars": {"X": 1}}, "env_vars must be a dict of strings to strings"),
        ({"string_args": "abc"}, "string_args must be a list"),
        ({"skip_on_exit_code": "99"}, "skip_on_exit_code must be an exit code or a list"),
        ({"skip_on_exit_code": [True]}, "skip_on_exit_code must be an exit code or a list"),
        ({"inherit_env": None}, "inherit_env must be True or False"),
        ({"index_urls": [None]}, "index_urls must hold strings only"),
    ],
)
def test_bad_virtualenv_options_fail_the_import_naming_the_task(options, message):
    with pytest.raises(DagDefinitionError, match=f"task 'f': {message}"):

        @task.virtualenv(**options)
        def f():
            pass


def test_external_python_needs_a_path():
    with pytest.raises(DagDefinitionError, match="python must be the path of a Python"):

        @task.external_python()
        def f():
            pass


def test_requirements_from_a_file_text_or_a_txt_file_beside_the_dag(tmp_path):
    (tmp_path / "reqs.txt").write_text("six\n# pinned below\nattrs==23.1\n")
    from_file = virtualenv_environment(requirements="reqs.txt", folder=str(tmp_path))
    from_text = virtualenv_environment(requirements="six\n\nattrs==23.1\n")
    assert from_file.requirements == from_text.requirements == ("six", "attrs==23.1")
    with pytest.raises(DagDefinitionError, match=r"requirements file .*missing\.txt.* cannot"):
        virtualenv_environment(requirements="missing.txt", folder=str(tmp_path), task_id="t")


def test_cloudpickle_or_dill_join_the_requirements_unless_site_packages_are_shared():
    assert virtualenv_environment(serializer="dill").requirements == ("dill",)
    assert virtualenv_environment(serializer="dill", requirements=["dill"]).requirements == (
        "dill",
    )
    shared = virtualenv_environment(serializer="cloudpickle", system_site_packages=True)
    assert shared.requirements == ()


def test_the_cache_key_ignores_the_order_of_requirements_and_how_the_call_is_made():
    one = virtualenv_environment(requirements=["b", "a"], string_args=["x"])
    other = virtualenv_environment(requirements=["a", "b"], env_vars={"Y": "2"})
    assert one.cache_key() == other.cache_key()
    assert one.cache_key() != virtualenv_environment(requirements=["a"]).cache_key()
    assert (
        virtualenv_environment(index_urls=[]).cache_key()
        != virtualenv_environment(index_urls=None).cache_key()
    )
    assert external_environment(python="/p").python == "/p"


# ---------------------------------------------------------------- what can travel


def test_a_lambda_fails_the_import_with_a_clear_error():
    with pytest.raises(DagDefinitionError, match="a lambda has no source of its own"), DAG("d"):
        PythonTask("t", lambda: 1, environment=PythonEnvironment())


def test_a_closure_fails_the_import_naming_the_variable_it_uses():
    limit = 3

    def uses_limit():
        return limit

    with (
        pytest.raises(DagDefinitionError, match="it uses limit of the function around it"),
        DAG("d"),
    ):
        PythonTask("t", uses_limit, environment=PythonEnvironment())


def test_generators_and_builtins_cannot_travel():
    def numbers():
        yield 1

    with pytest.raises(DagDefinitionError, match="not a generator"), DAG("d"):
        PythonTask("t", numbers, environment=PythonEnvironment())
    with (
        pytest.raises(DagDefinitionError, match="defined with def, not builtin_function"),
        DAG("d"),
    ):
        PythonTask("t", len, environment=PythonEnvironment())


def test_source_that_cannot_be_read_is_a_clear_error():
    namespace: dict = {}
    exec("def typed():\n    return 1\n", namespace)  # as at an interactive prompt
    with pytest.raises(DagDefinitionError, match=r"its source cannot be read .* define it in a"):
        function_source(namespace["typed"], task_id="t")


def test_the_source_loses_its_decorators_and_keeps_its_line():
    @task.virtualenv(
        requirements=[],
    )
    def decorated(x):  # the def line
        return x + 1

    source = function_source(decorated.function)
    assert source.name == "decorated"
    assert source.text.startswith("def decorated(x):  # the def line\n")
    assert "@task" not in source.text
    assert source.text.endswith("    return x + 1\n")
    lines = Path(__file__).read_text().splitlines()
    assert lines[source.line - 1].strip() == "def decorated(x):  # the def line"


def test_a_function_running_elsewhere_declares_only_context_names_that_can_cross():
    with (
        pytest.raises(DagDefinitionError, match="asks for 'ctx', an object of the worker"),
        DAG("d"),
    ):

        @task.virtualenv
        def wants_ctx(ctx):
            pass

        wants_ctx()
    with DAG("d") as dag:

        @task.virtualenv
        def wants_values(ds, logical_date, params, templates_dict, ctx=None):
            pass

        wants_values()
    assert made(dag, "wants_values").environment is not None


def test_templates_dict_is_checked_as_a_template_and_must_be_a_dict():
    with pytest.raises(DagDefinitionError, match="template in templates_dict"), DAG("d"):

        @task.virtualenv(templates_dict={"day": "{{ no_such_name }}"})
        def f(templates_dict):
            pass

        f()
    with pytest.raises(DagDefinitionError, match="templates_dict must be a dict"), DAG("d"):
        PythonTask("t", print, templates_dict=["x"])
