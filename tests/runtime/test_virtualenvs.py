"""Python environments for tasks and calls into them (dagrun.runtime.virtualenvs): an
environment made once and reused, by one process when two ask at once, never used half-made;
installs that fail with the installer's last lines; a function's value, exception, exit and
arguments across the interpreter boundary; and the whole path through a worker.

Most environments here have no requirements (made without pip, in a fraction of a second)
or use ``sys.executable`` as the external interpreter; the installs through the real pip
and a package index are marked slow."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import sysconfig
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dagrun import settings
from dagrun.authoring.context_names import CONTEXT_NAMES
from dagrun.authoring.context_names import PORTABLE_CONTEXT_NAMES as PORTABLE
from dagrun.authoring.python_environments import (
    PythonEnvironment,
    external_environment,
    function_source,
)
from dagrun.errors import NonRetryableError, SkipTask
from dagrun.runtime import masking, virtualenvs
from dagrun.runtime.runner import DagCache, execute, one_line
from dagrun.runtime.virtualenvs import (
    CallFailed,
    FunctionFailed,
    InstallFailed,
    PythonNotFound,
    RequirementNotFound,
    SerializationFailed,
)
from dagrun.store import logfiles
from tests.helpers import (
    attempt_request,
    attempts_of,
    log_of,
    process_gone,
    run_once,
    wait_until,
    write_dag,
)

FORK = multiprocessing.get_context("fork")
HERE = sys.executable


@pytest.fixture
def venvs(tmp_path: Path) -> Path:
    return tmp_path / "venvs"


def call(function, *args, env: PythonEnvironment | None = None, **kwargs):
    """Call ``function`` (a module-level function of this file) as a task would."""
    env = env or external_environment(python=HERE)
    return virtualenvs.call_function(function_source(function), env, args, kwargs)


def python_of(path: str) -> Path:
    """The environment folder of an interpreter path (``<folder>/bin/python``)."""
    return Path(path).parent.parent


# The functions called in another interpreter: each takes what it needs as arguments.


def add(x, y=0):
    return {"sum": x + y}


def raises(message):
    raise ValueError(message)


def echo_strings():
    return virtualenv_string_args  # noqa: F821 - the global the call script sets


def describe(when):
    return [type(when).__name__, when.isoformat()]


def leaves(code):
    import sys

    sys.exit(code)


def crashes():
    import os

    os._exit(7)


def variables(name):
    import os

    return [os.environ.get(name), "PATH" in os.environ]


def imports_helper():
    import venv_test_helper

    return venv_test_helper.VALUE


def returns_local_object():
    class Local:
        pass

    return Local()


def where_am_i():
    import sys

    return {"prefix": sys.prefix, "path": sys.path, "version": list(sys.version_info[:2])}


# ---------------------------------------------------------------- environments


def test_an_environment_is_made_once_and_reused(venvs, monkeypatch):
    made = []
    real_make = virtualenvs._make
    monkeypatch.setattr(virtualenvs, "_make", lambda *a: made.append(a) or real_make(*a))
    env = PythonEnvironment(venv_cache_path=str(venvs))
    first = virtualenvs.ensure_environment(env)
    before = os.stat(python_of(first))
    second = virtualenvs.ensure_environment(env)
    after = os.stat(python_of(second))
    assert first == second
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert len(made) == 1
    assert call(where_am_i, env=env)["prefix"] == str(python_of(first))
    other = PythonEnvironment(venv_cache_path=str(venvs), system_site_packages=True)
    assert virtualenvs.ensure_environment(other) != first
    assert len(made) == 2


def test_two_processes_asking_at_once_make_it_once(venvs, tmp_path, monkeypatch):
    """The maker holds the lock until the other process is seen waiting on it, so the two
    really overlap; then both use the one environment."""
    flags = tmp_path / "flags"
    flags.mkdir()
    real_make, real_note = virtualenvs._make, virtualenvs.note

    def note(level, message):
        if message.startswith("waiting for another process"):
            (flags / f"waiting-{os.getpid()}").touch()
        real_note(level, message)

    def make(*args):
        (flags / f"making-{os.getpid()}").touch()
        wait_until(lambda: any(flags.glob("waiting-*")), what="the other process to wait")
        real_make(*args)

    monkeypatch.setattr(virtualenvs, "note", note)
    monkeypatch.setattr(virtualenvs, "_make", make)
    env = PythonEnvironment(venv_cache_path=str(venvs))
    barrier, results = FORK.Barrier(2), FORK.Queue()

    def ask():
        barrier.wait(timeout=30)
        results.put(virtualenvs.ensure_environment(env))

    askers = [FORK.Process(target=ask) for _ in range(2)]
    for p in askers:
        p.start()
    got = [results.get(timeout=60) for _ in askers]
    for p in askers:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert got[0] == got[1]
    assert len(list(flags.glob("making-*"))) == 1
    assert len(list(flags.glob("waiting-*"))) == 1
    assert len(list(venvs.glob("*.env-*"))) == 1


def test_a_maker_killed_mid_install_leaves_nothing_that_counts_as_ready(venvs, monkeypatch):
    env = PythonEnvironment(venv_cache_path=str(venvs))
    key = virtualenvs.environment_key(env)
    real_make = virtualenvs._make

    def dies(env, folder, on_process_group):
        real_make(env, folder, on_process_group)  # all there but the pointer
        (folder / "half-made").touch()
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(virtualenvs, "_make", dies)
    maker = FORK.Process(target=virtualenvs.ensure_environment, args=(env,))
    maker.start()
    maker.join(timeout=60)
    assert maker.exitcode == -signal.SIGKILL
    [half] = venvs.glob(f"{key}.env-*")
    assert (half / "half-made").exists()
    assert not (venvs / key).exists()

    monkeypatch.setattr(virtualenvs, "_make", real_make)
    python = virtualenvs.ensure_environment(env)
    assert not half.exists()
    assert python_of(python) != half
    assert call(add, 1, 2, env=env) == {"sum": 3}


def test_an_environment_whose_interpreter_is_gone_is_made_again(venvs):
    env = PythonEnvironment(venv_cache_path=str(venvs))
    first = virtualenvs.ensure_environment(env)
    Path(first).unlink()  # as when its base interpreter is removed
    second = virtualenvs.ensure_environment(env)
    assert python_of(second) != python_of(first)
    assert not python_of(first).exists()
    assert call(add, 2, env=env) == {"sum": 2}


def test_system_site_packages_shares_the_base_interpreters_packages(venvs):
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    shared = PythonEnvironment(venv_cache_path=str(venvs), system_site_packages=True)
    isolated = PythonEnvironment(venv_cache_path=str(venvs))
    assert base["purelib"] in call(where_am_i, env=shared)["path"]
    assert base["purelib"] not in call(where_am_i, env=isolated)["path"]


def test_python_version_uses_that_interpreter_from_path(venvs, tmp_path, monkeypatch):
    version = "{}.{}".format(*sys.version_info[:2])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / f"python{version}").symlink_to(HERE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env = PythonEnvironment(venv_cache_path=str(venvs), python_version=version)
    assert call(where_am_i, env=env)["version"] == list(sys.version_info[:2])


def test_a_python_version_not_installed_is_a_clear_error(venvs, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3.99"  # a version manager's shim for a version it lacks
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.99: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(PythonNotFound) as missing:
        virtualenvs.ensure_environment(PythonEnvironment(python_version="2.1"))
    assert str(missing.value) == (
        "Python interpreter python2.1: python_version '2.1' asks for python2.1, not on PATH"
    )
    with pytest.raises(PythonNotFound) as caught:
        virtualenvs.ensure_environment(
            PythonEnvironment(venv_cache_path=str(venvs), python_version="3.99")
        )
    assert str(caught.value) == (
        f"Python interpreter python3.99: {shim} does not run as Python 3.99: "
        "pyenv: python3.99: command not found"
    )
    assert isinstance(caught.value, NonRetryableError)
    assert not list(venvs.glob("*.env-*"))


FAKE_UV = """\
#!{python}
# A stand-in for uv: records how it was called, makes environments with the venv module,
# and fails an install as uv does for a requirement named nope (unresolvable) or flaky.
import json, os, subprocess, sys
with open({log!r}, "a") as log:
    seen = {{k: v for k, v in os.environ.items() if k.startswith("UV_")}}
    log.write(json.dumps({{"argv": sys.argv[1:], "env": seen}}) + "\\n")
if sys.argv[1] == "venv":
    python = sys.argv[sys.argv.index("--python") + 1]
    subprocess.run([python, "-m", "venv", "--without-pip", sys.argv[-1]], check=True)
    sys.exit(0)
wanted = open(sys.argv[sys.argv.index("-r") + 1]).read()
if "nope" in wanted:
    print("  x No solution found when resolving dependencies:")
    print("  Because nope was not found in the package registry and you require nope, we")
    print("  can conclude that your requirements are unsatisfiable.")
    sys.exit(1)
if "flaky" in wanted:
    print("error: Failed to fetch: `https://pypi.org/simple/flaky/`")
    print("  Caused by: connection reset by peer")
    sys.exit(2)
"""


@pytest.fixture
def fake_uv(tmp_path, monkeypatch) -> Path:
    """``uv`` on PATH as a recording stand-in; returns the file of its calls."""
    bin_dir, log = tmp_path / "uv-bin", tmp_path / "uv-calls.jsonl"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(FAKE_UV.format(python=HERE, log=str(log)))
    uv.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(settings.BY_NAME["core.venv_installer"].variable, "auto")
    return log


def test_uv_makes_the_environment_when_it_is_on_path(venvs, fake_uv):
    env = PythonEnvironment(
        venv_cache_path=str(venvs),
        requirements=("six",),
        pip_install_options=("--no-cache",),
        index_urls=("https://one.example/simple", "https://two.example/simple"),
    )
    python = virtualenvs.ensure_environment(env)
    made, installed = [json.loads(line) for line in fake_uv.read_text().splitlines()]
    assert made["argv"][:5] == ["venv", "--allow-existing", "--python", HERE, "--seed"]
    assert installed["argv"][:4] == ["pip", "install", "--python", python]
    assert installed["argv"][4:6] == ["--no-cache", "-r"]
    assert installed["env"] == {
        "UV_DEFAULT_INDEX": "https://one.example/simple",
        "UV_INDEX": "https://two.example/simple",
    }
    assert (python_of(python) / "requirements.txt").read_text() == "six\n"


def test_an_unresolvable_requirement_fails_with_the_installers_last_lines_and_no_retry(
    venvs, fake_uv
):
    env = PythonEnvironment(venv_cache_path=str(venvs), requirements=("nope",))
    with pytest.raises(RequirementNotFound) as caught:
        virtualenvs.ensure_environment(env)
    assert isinstance(caught.value, NonRetryableError)
    assert one_line(caught.value) == (
        "RequirementNotFound: installing nope failed (exited with code 1): x No solution "
        "found when resolving dependencies: / Because nope was not found in the package "
        "registry and you require nope, we / can conclude that your requirements are "
        "unsatisfiable."
    )
    assert not list(venvs.glob("*.env-*"))  # nothing half-made is left
    assert not (venvs / virtualenvs.environment_key(env)).exists()


def test_an_install_that_fails_for_another_reason_is_retried(venvs, fake_uv):
    env = PythonEnvironment(venv_cache_path=str(venvs), requirements=("flaky",))
    with pytest.raises(InstallFailed) as caught:
        virtualenvs.ensure_environment(env)
    assert not isinstance(caught.value, NonRetryableError)
    assert "(exited with code 2): error: Failed to fetch" in str(caught.value)
    assert caught.value.requirements == ("flaky",)


# ---------------------------------------------------------------- calls


def test_the_return_value_and_arguments_cross_both_ways():
    assert call(add, 1, y=41) == {"sum": 42}
    when = datetime(2026, 1, 5, 6, 30, tzinfo=UTC)
    assert call(describe, when) == ["datetime", "2026-01-05T06:30:00+00:00"]


def test_an_exception_comes_back_as_its_type_and_message_in_one_line(capfd):
    with pytest.raises(FunctionFailed) as caught:
        call(raises, "no good\nsecond line")
    assert one_line(caught.value) == "ValueError: no good"
    assert not isinstance(caught.value, NonRetryableError)  # retried as any task error
    printed = capfd.readouterr()
    assert "Traceback" in printed.err
    assert "raise ValueError(message)" in printed.err


def test_string_args_are_the_global_virtualenv_string_args():
    env = external_environment(python=HERE, string_args=["a b ", 3])
    assert call(echo_strings, env=env) == ["a b", "3"]


def test_an_exit_code_listed_in_skip_on_exit_code_skips_and_others_fail():
    skipping = external_environment(python=HERE, skip_on_exit_code=[99, 100])
    with pytest.raises(SkipTask, match="exited with code 99"):
        call(leaves, 99, env=skipping)
    with pytest.raises(CallFailed, match="the function's process exited with code 3"):
        call(leaves, 3, env=skipping)
    with pytest.raises(CallFailed, match="exited with code 7"):
        call(crashes)
    assert call(leaves, 0) is None


def test_env_vars_and_inherit_env(monkeypatch):
    monkeypatch.setenv("FROM_WORKER", "yes")
    assert call(variables, "FROM_WORKER") == ["yes", True]
    clean = external_environment(python=HERE, inherit_env=False, env_vars={"ONLY": "this"})
    assert call(variables, "FROM_WORKER", env=clean) == [None, False]
    assert call(variables, "ONLY", env=clean) == ["this", False]


def test_the_dag_files_folder_is_importable(tmp_path):
    (tmp_path / "venv_test_helper.py").write_text("VALUE = 'beside the DAG file'\n")
    source = function_source(imports_helper)
    env = external_environment(python=HERE)
    value = virtualenvs.call_function(source, env, (), {}, folder=str(tmp_path))
    assert value == "beside the DAG file"


def test_values_that_cannot_cross_are_clear_errors():
    with pytest.raises(SerializationFailed, match="'y' cannot be serialised with pickle"):
        call(add, 1, y=lambda: 2)
    with pytest.raises(SerializationFailed, match="the return value cannot be serialised"):
        call(returns_local_object)


def test_a_serializer_missing_on_either_side_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # not installed beside dagrun
    with pytest.raises(SerializationFailed, match="'cloudpickle' is not installed beside"):
        call(add, 1, env=external_environment(python=HERE, serializer="cloudpickle"))
    fake = tmp_path / "fake-dill"  # a dill the worker has and the interpreter has not
    fake.mkdir()
    (fake / "dill.py").write_text("from pickle import dump, dumps, load, loads\n")
    monkeypatch.syspath_prepend(str(fake))
    monkeypatch.delitem(sys.modules, "dill", raising=False)
    without = external_environment(python=HERE, serializer="dill")
    with pytest.raises(SerializationFailed, match=f"'dill' is not importable by {HERE}"):
        call(add, 1, env=without)
    pythonpath = os.pathsep.join(filter(None, [str(fake), os.environ.get("PYTHONPATH")]))
    with_it = external_environment(
        python=HERE, serializer="dill", env_vars={"PYTHONPATH": pythonpath}
    )
    assert call(add, 1, 2, env=with_it) == {"sum": 3}


def test_an_external_interpreter_that_is_not_there_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "no" / "python")
    with pytest.raises(PythonNotFound, match="no such executable file on this host"):
        call(add, 1, env=external_environment(python=missing))


# ---------------------------------------------------------------- through a worker


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """``DAGRUN_HOME`` for the worker's children, whose environments go to its venvs/."""
    monkeypatch.setenv("DAGRUN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_virtualenv_and_external_python_tasks_run_through_a_worker(store, dags_dir, home, tmp_path):
    out = tmp_path / "after.json"
    write_dag(
        dags_dir,
        "elsewhere.py",
        f"""
        import json
        from dagrun import DAG, task

        with DAG("elsewhere", schedule=None, params={{"n": 2}}):
            @task
            def start():
                return 20

            @task.virtualenv(requirements=[], templates_dict={{"day": "{{{{ ds }}}}"}})
            def inside(x, ds, logical_date, params, templates_dict):
                import sys
                print("running in", sys.prefix)
                return {{
                    "x": x + params["n"],
                    "same_day": templates_dict["day"] == ds == logical_date.strftime("%Y-%m-%d"),
                    "prefix": sys.prefix,
                }}

            @task.external_python(python={HERE!r})
            def fails(value):
                raise KeyError(f"no key {{value['x']}}")

            @task
            def after(value):
                open({str(out)!r}, "w").write(json.dumps(value))

            value = inside(start())
            fails(value)
            after(value)
        """,
    )
    run, tasks = run_once(store, dags_dir, "elsewhere")
    assert run.state == "failed"
    assert {t: tasks[t].state for t in tasks} == {
        "start": "success",
        "inside": "success",
        "fails": "failed",
        "after": "success",
    }
    value = json.loads(out.read_text())
    assert value["x"] == 22 and value["same_day"] is True
    assert Path(value["prefix"]).parent == home / "venvs"
    assert f"running in {value['prefix']}" in log_of(attempts_of(store, "inside")[0])
    [failed] = attempts_of(store, "fails")
    assert failed["outcome"] == "failed"
    assert failed["error"] == "KeyError: 'no key 22'"
    assert "raise KeyError(" in log_of(failed)


@pytest.mark.slow
def test_a_timeout_kills_the_functions_process(store, dags_dir, tmp_path):
    pid_file = tmp_path / "pid"
    write_dag(
        dags_dir,
        "hangs.py",
        f"""
        from dagrun import DAG, task

        with DAG("hangs", schedule=None):
            @task.external_python(python={HERE!r}, execution_timeout=2)
            def hangs(path):
                import os, time
                open(path, "w").write(str(os.getpid()))
                time.sleep(600)

            hangs({str(pid_file)!r})
        """,
    )
    _, tasks = run_once(store, dags_dir, "hangs")
    assert tasks["hangs"].state == "failed"
    assert attempts_of(store, "hangs")[0]["outcome"] == "timed_out"
    pid = int(pid_file.read_text())
    wait_until(lambda: process_gone(pid), timeout=10, what="the function's process to end")


@pytest.mark.slow
def test_a_real_install_of_a_small_package(tmp_path, venvs):
    """Through the standard venv module and pip, from the package index pip is set to."""
    source = function_source(six_version)
    env = PythonEnvironment(venv_cache_path=str(venvs), requirements=("six",))
    version = virtualenvs.call_function(source, env, (), {})
    assert isinstance(version, str) and version.count(".") >= 1
    assert virtualenvs.call_function(source, env, (), {}) == version  # reused, not reinstalled
    assert len(list(venvs.glob("*.env-*"))) == 1


def six_version():
    import six

    return six.__version__


@pytest.mark.slow
def test_a_requirement_pip_cannot_find_fails_the_attempt_with_pips_last_lines(
    sqlite_store, dags_dir, home
):
    write_dag(
        dags_dir,
        "missing.py",
        """
        from dagrun import DAG, task

        with DAG("missing", schedule=None):
            @task.virtualenv(requirements=["dagrun-no-such-package==0.0.1"], index_urls=[],
                             retries=3, retry_delay=0.01)
            def needs_it():
                return 1

            needs_it()
        """,
    )
    _, tasks = run_once(sqlite_store, dags_dir, "missing")
    assert tasks["needs_it"].state == "failed"
    [attempt] = attempts_of(sqlite_store, "needs_it")  # not retried
    assert attempt["outcome"] == "non_retryable"
    assert attempt["error"].startswith(
        "RequirementNotFound: installing dagrun-no-such-package==0.0.1 failed (exited with code 1)"
    )
    assert "No matching distribution found for dagrun-no-such-package==0.0.1" in attempt["error"]
    assert "Could not find a version that satisfies" in log_of(attempt)
    assert not list((home / "venvs").glob("*.env-*"))


def test_the_script_puts_the_def_on_its_line_in_the_dag_file():
    source = function_source(add)
    text = virtualenvs.script(source, "pickle")
    assert text.splitlines()[source.line - 1] == "def add(x, y=0):"
    compile(text, "call.py", "exec")
    assert textwrap.dedent(source.text) == source.text


def test_a_last_good_version_sends_the_source_that_ran(tmp_path):
    """A worker runs a file that no longer imports as its last good text: the function
    sent to the other interpreter is that text's, not the broken file's."""
    from dagrun.parsing.loader import import_file

    path = tmp_path / "good_then_broken.py"
    good = textwrap.dedent(
        """
        from dagrun import DAG, task

        with DAG("d"):
            @task.virtualenv
            def f():
                return "good"

            f()
        """
    )
    path.write_text("this is broken(\n")
    [dag] = import_file(str(path), good)
    assert 'return "good"' in dag.tasks["f"].function_source.text
    path.write_text(good.replace('"good"', '"fixed"'))
    [dag] = import_file(str(path))
    assert 'return "fixed"' in dag.tasks["f"].function_source.text


def test_templates_dict_and_context_names_as_each_kind_of_python_task_gets_them(tmp_path, venvs):
    """In one attempt each (in-process, as a worker child runs it): ``templates_dict``
    rendered for any Python task that declares it; a native ``**kwargs`` gets the native
    names only, as before; a function elsewhere gets the names that can cross, and each
    mapped instance its own element."""
    path = write_dag(
        tmp_path / "dags",
        "kinds.py",
        f"""
        from dagrun import DAG, task

        with DAG("kinds", schedule=None):
            @task(templates_dict={{"day": "{{{{ ds }}}}", "n": 3}})
            def native(templates_dict):
                return templates_dict

            @task
            def everything(**kwargs):
                return sorted(kwargs)

            @task.virtualenv(
                venv_cache_path={str(venvs)!r}, templates_dict={{"day": "{{{{ ds_nodash }}}}"}}
            )
            def elsewhere(x, **kwargs):
                return [x, kwargs.pop("templates_dict"), sorted(kwargs)]

            native()
            everything()
            elsewhere.expand(x=[1, 2])
        """,
    )

    def value(task_id: str, **fields):
        result = execute(attempt_request(path, task_id, None, "kinds", **fields), DagCache())
        assert result.outcome == "success", result.error
        return json.loads(result.return_value)

    assert value("native") == {"day": "2026-01-05", "n": 3}
    assert value("everything") == sorted(CONTEXT_NAMES)
    assert value("elsewhere", map_index=1) == [2, {"day": "20260105"}, sorted(PORTABLE)]


def test_secrets_the_function_prints_are_masked_in_the_log(tmp_path, monkeypatch):
    monkeypatch.setattr(masking, "CACHE", masking.SecretCache())  # learns the one below
    monkeypatch.setenv("DAGRUN_VAR_API_TOKEN", "tok-5ecret-value")
    path = write_dag(
        tmp_path / "dags",
        "prints.py",
        f"""
        from dagrun import DAG, task

        with DAG("prints", schedule=None):
            @task.external_python(python={HERE!r})
            def prints():
                import os
                print("the token is", os.environ["DAGRUN_VAR_API_TOKEN"])

            prints()
        """,
    )
    logs = tmp_path / "logs"
    result = execute(attempt_request(path, "prints", logs, "prints"), DagCache())
    assert result.outcome == "success", result.error
    text = logfiles.read(result.log.path, result.log.offset, result.log.length)[0]
    assert "the token is ***" in text
    assert "tok-5ecret-value" not in text
