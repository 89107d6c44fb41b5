"""Python environments for tasks, and calling a task's function in one
(``@task.virtualenv``, ``@task.external_python``; ``dagrun.authoring.python_environments``
describes them).

**Environments.** One per distinct requirements set (with its interpreter, site-packages
flag, pip options and indexes: ``PythonEnvironment.cache_key``), kept under
``$DAGRUN_HOME/venvs`` (or the task's ``venv_cache_path``) and made once, however many
workers want it at once::

    venvs/<key>.lock         held (flock) by the one process making <key>
    venvs/<key>.env-<rand>/  an environment, made where it stays
    venvs/<key> -> <key>.env-<rand>   the pointer: present only once it is complete

An environment cannot be moved once made (its scripts and ``pyvenv.cfg`` name its folder),
so it is built in a folder of its own and a symlink to it is renamed into place
(``os.replace``, atomic) only when the install succeeded. A process killed mid-install
leaves a folder no pointer names: it never counts as ready, and the next maker removes it.
Readers take no lock: a pointer whose interpreter runs is ready.

The standard ``venv`` module makes it (with pip only when there is something to install),
or ``uv`` when it is on PATH (``DAGRUN_VENV_INSTALLER=auto|uv|pip``, as Airflow's
``venv_install_method``). An install that fails is the attempt's error with the
installer's last lines: ``RequirementNotFound`` (no retry) when a requirement cannot be
resolved, which another try will not change; ``InstallFailed`` (retried as the task's
``retries`` say) for anything else (the network, a full disk, a build that broke).

**Calls.** As Airflow does: the function's source is written to a script with its
arguments serialised beside it (pickle; cloudpickle or dill when asked and importable on
both sides), run by the environment's interpreter as a command of the attempt (its output
in the log), and its return value comes back the same way. What the function raises fails
the attempt with its type and message (``FunctionFailed``); its traceback is in the log.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagrun import settings
from dagrun.authoring.python_environments import SERIALIZERS, FunctionSource, PythonEnvironment
from dagrun.errors import DagrunError, NonRetryableError, SkipTask
from dagrun.processes import describe_exit
from dagrun.runtime.attempt_logs import note
from dagrun.runtime.commands import GroupListener, run_captured, run_command
from dagrun.settings import ConfigError
from dagrun.store.location import dagrun_home

#: What an installer says when a requirement cannot be resolved (pip, then uv): trying
#: again will not change it.
_UNRESOLVABLE = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "ResolutionImpossible",
    "Invalid requirement",
    "No solution found",
    "requirements are unsatisfiable",
)


class PythonNotFound(DagrunError, NonRetryableError, LookupError):
    """The interpreter a task asks for is not there, or does not run as the version asked
    for; carries what was asked for (a path, or ``python3.11``) and why."""

    def __init__(self, python: str, reason: str):
        super().__init__(f"Python interpreter {python}: {reason}")
        self.python = python
        self.reason = reason


class InstallFailed(DagrunError, RuntimeError):
    """Making an environment failed; carries the requirements and the installer's last
    lines (all of its output is in the attempt's log). The message is one line."""

    def __init__(self, requirements: Sequence[str], code: int, lines: Sequence[str]):
        said = [line.strip() for line in lines if line.strip()]
        errors = [line for line in said if line.startswith("ERROR:")]  # pip's own prefix
        said = (errors or said)[-3:]
        what = f"installing {', '.join(requirements)}" if requirements else "making an environment"
        tail = " / ".join(line[:300] for line in said) or "no output"
        super().__init__(f"{what} failed ({describe_exit(code)}): {tail}")
        self.requirements = tuple(requirements)
        self.code = code
        self.lines = tuple(lines)


class RequirementNotFound(InstallFailed, NonRetryableError):
    """A requirement the installer cannot resolve (no such package or version, conflicts,
    a malformed line): the attempt fails without a retry."""


class SerializationFailed(DagrunError, NonRetryableError, TypeError):
    """The arguments or the return value could not cross between interpreters with the
    task's serializer, or the serializer is not installed on one side; the same call fails
    the same way, so no retry."""


class CallFailed(DagrunError, RuntimeError):
    """The function's process ended without a result and without an exception of the
    function (killed by a signal, ``os._exit``, ``sys.exit`` with a code)."""


class FunctionFailed(DagrunError, RuntimeError):
    """The function raised in the other interpreter. ``remote_type`` is the name of what it
    raised, which the attempt's error gives in place of this class's (``runner.one_line``);
    the message is the exception's."""

    def __init__(self, remote_type: str, message: str):
        super().__init__(message)
        self.remote_type = remote_type


# ---------------------------------------------------------------- environments


def interpreter(env: PythonEnvironment, on_process_group: GroupListener | None = None) -> str:
    """The interpreter to call the function with: the external one, checked, or the
    environment's, made first if it is not ready."""
    if env.python is None:
        return ensure_environment(env, on_process_group)
    found = env.python if os.sep in env.python else shutil.which(env.python)  # a bare name
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise PythonNotFound(env.python, "no such executable file on this host")
    return found


def environment_key(env: PythonEnvironment) -> str:
    """The name of an environment's folder: a hash of what makes it (with the worker's own
    Python version when the task names none)."""
    described = {
        **env.cache_key(),
        "python_version": env.python_version or "{}.{}".format(*sys.version_info[:2]),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def environments_folder(env: PythonEnvironment) -> Path:
    return Path(env.venv_cache_path or dagrun_home() / "venvs").absolute()


def ensure_environment(
    env: PythonEnvironment, on_process_group: GroupListener | None = None
) -> str:
    """The interpreter of the environment for ``env``, made now if it is not ready: by this
    process alone, while any other that wants it waits on the lock and then uses it."""
    folder = environments_folder(env)
    key = environment_key(env)
    pointer = folder / key
    ready = _ready(pointer)
    if ready:
        return ready
    folder.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder / f"{key}.lock", key):
        ready = _ready(pointer)
        if ready:
            return ready
        _remove_unfinished(folder, key)
        started = time.monotonic()
        made = Path(tempfile.mkdtemp(prefix=f"{key}.env-", dir=folder))
        try:
            made.chmod(0o755)  # as the venv module would make it, not mkdtemp's 0o700
            _make(env, made, on_process_group)
        except BaseException:
            shutil.rmtree(made, ignore_errors=True)
            raise
        _point(pointer, made)
        note("INFO", f"Python environment {made} ready in {time.monotonic() - started:.1f} s")
        return str(made / "bin" / "python")


def _ready(pointer: Path) -> str | None:
    """The interpreter of a complete environment (its pointer is there and its interpreter
    too: a base interpreter removed since leaves one that must be made again); else None."""
    python = pointer / "bin" / "python"
    if not python.exists():  # follows the links: the pointer, then python to its base
        return None
    return str(pointer.resolve() / "bin" / "python")


@contextlib.contextmanager
def _exclusive(path: Path, key: str) -> Iterator[None]:
    """Hold the lock of one environment (released when the holder ends, even killed)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note("INFO", f"waiting for another process making Python environment {key}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_unfinished(folder: Path, key: str) -> None:
    """Remove what makers of ``key`` that died left (under its lock, so none is at work):
    environments no pointer names, pointers not yet renamed into place; and a broken
    environment the pointer names (its base interpreter gone), which is made again."""
    for path in folder.glob(f"{key}.env-*"):
        note("INFO", f"removing {path}, an environment unfinished or broken")
        shutil.rmtree(path, ignore_errors=True)
    for path in folder.glob(f"{key}.link-*"):
        path.unlink(missing_ok=True)


def _point(pointer: Path, made: Path) -> None:
    """Make ``pointer`` name ``made`` in one step: a symlink (relative, so the folder of
    environments can move) renamed over whatever was there."""
    staged = pointer.with_name(f"{pointer.name}.link-{uuid.uuid4().hex[:8]}")
    os.symlink(made.name, staged)
    os.replace(staged, pointer)


def _make(env: PythonEnvironment, folder: Path, on_process_group: GroupListener | None) -> None:
    """Make the environment in ``folder`` and install its requirements."""
    base = _base_interpreter(env)
    uv = _use_uv()
    note("INFO", f"making a Python environment in {folder} with {'uv' if uv else base}")
    wanted = list(env.requirements)
    if uv:
        argv = ["uv", "venv", "--allow-existing", "--python", base]
        argv += ["--seed"] if wanted else []
    else:
        argv = [base, "-m", "venv"] + ([] if wanted else ["--without-pip"])
    argv += ["--system-site-packages"] if env.system_site_packages else []
    _install([*argv, str(folder)], wanted, dict(os.environ), on_process_group)
    (folder / "dagrun-environment.json").write_text(json.dumps(env.cache_key(), indent=2))
    if not wanted:
        return
    listed = folder / "requirements.txt"
    listed.write_text("\n".join(wanted) + "\n")
    python = str(folder / "bin" / "python")
    variables = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if uv:
        argv = ["uv", "pip", "install", "--python", python, *env.pip_install_options]
        argv += ["--no-index"] if env.index_urls == () else []
        variables.update(_uv_indexes(env.index_urls or ()))
    else:
        argv = [python, "-m", "pip", "install", *env.pip_install_options]
        if env.index_urls is not None:
            (folder / "pip.conf").write_text(_pip_conf(env.index_urls))
    _install([*argv, "-r", str(listed)], wanted, variables, on_process_group)


def _install(
    argv: list[str],
    wanted: list[str],
    variables: dict[str, str],
    on_process_group: GroupListener | None,
) -> None:
    try:
        code, lines = run_captured(argv, env=variables, on_process_group=on_process_group)
    except OSError as exc:  # the installer itself is missing
        code, lines = 127, [f"{argv[0]}: {exc.strerror or exc}"]
    if code == 0:
        return
    if any(marker in line for line in lines for marker in _UNRESOLVABLE):
        raise RequirementNotFound(wanted, code, lines)
    raise InstallFailed(wanted, code, lines)


def _pip_conf(index_urls: Sequence[str]) -> str:
    """pip's settings inside the environment (read as its site configuration): the first
    index is the main one and the others extra; none at all means no index, as Airflow."""
    if not index_urls:
        return "[global]\nno-index = true\n"
    extra = f"extra-index-url = {' '.join(index_urls[1:])}\n" if index_urls[1:] else ""
    return f"[global]\nindex-url = {index_urls[0]}\n{extra}"


def _uv_indexes(index_urls: Sequence[str]) -> dict[str, str]:
    if not index_urls:
        return {}
    extra = {"UV_INDEX": " ".join(index_urls[1:])} if index_urls[1:] else {}
    return {"UV_DEFAULT_INDEX": index_urls[0], **extra}


def _use_uv() -> bool:
    try:
        method = settings.get("core.venv_installer")
    except ConfigError as exc:
        raise NonRetryableError(str(exc)) from None
    return method == "uv" or (method == "auto" and shutil.which("uv") is not None)


def _base_interpreter(env: PythonEnvironment) -> str:
    """The interpreter to make the environment with: the worker's own, or ``python3.11``
    for ``python_version="3.11"``, found on PATH and checked to run as that version (a
    version manager's shim can be on PATH for a version it does not have)."""
    if env.python_version is None:
        return sys.executable
    wanted = env.python_version
    name = f"python{wanted}"
    found = shutil.which(name)
    if found is None:
        raise PythonNotFound(name, f"python_version {wanted!r} asks for {name}, not on PATH")
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    try:
        ran = subprocess.run([found, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PythonNotFound(name, f"{found} does not run ({exc})") from None
    version = ran.stdout.strip()
    if ran.returncode != 0 or not (version == wanted or version.startswith(wanted + ".")):
        said = (ran.stderr.strip().splitlines() or [f"it is Python {version}"])[-1]
        raise PythonNotFound(name, f"{found} does not run as Python {wanted}: {said}")
    return found


# ---------------------------------------------------------------- calls

_SCRIPT_TAIL = '''

def _dagrun_call():
    """Written by dagrun: call the function above with the arguments the worker wrote, and
    write back what it returned, or what it raised."""
    import json
    import sys
    import traceback

    function = globals()[{name!r}]
    arguments, result, error, strings = sys.argv[1:5]

    def failed(kind, exc):
        try:
            message = str(exc)
        except Exception:
            message = ""
        with open(error, "w") as file:
            json.dump({{"kind": kind, "type": type(exc).__name__, "message": message}}, file)

    with open(strings) as file:
        globals()["virtualenv_string_args"] = [line.strip() for line in file]
    try:
        import {serializer} as serializer
    except ImportError as exc:
        failed("serializer", exc)
        sys.exit(3)
    try:
        with open(arguments, "rb") as file:
            call = serializer.load(file)
    except Exception as exc:
        traceback.print_exc()
        failed("arguments", exc)
        sys.exit(3)
    try:
        value = function(*call["args"], **call["kwargs"])
    except Exception as exc:
        traceback.print_exc()
        failed("function", exc)
        sys.exit(1)
    try:
        data = serializer.dumps(value)
    except Exception as exc:
        traceback.print_exc()
        failed("result", exc)
        sys.exit(3)
    with open(result, "wb") as file:
        file.write(data)


if __name__ == "__main__":
    _dagrun_call()
'''


def script(source: FunctionSource, serializer: str) -> str:
    """The script that calls the function: its ``def`` on the line it has in its file (so
    tracebacks name the DAG file's lines), then the call."""
    padding = "\n" * max(0, source.line - 2)
    tail = _SCRIPT_TAIL.format(name=source.name, serializer=serializer)
    return f"from __future__ import annotations\n{padding}{source.text}{tail}"


def call_function(
    source: FunctionSource,
    env: PythonEnvironment,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    folder: str | None = None,
    on_process_group: GroupListener | None = None,
) -> Any:
    """Call the function in its environment with these arguments and return its value.
    ``folder`` (the DAG file's) joins the end of its ``PYTHONPATH``, so that it can import
    the helper modules beside its DAG file, as the file itself can."""
    python = interpreter(env, on_process_group)
    serializer = _serializer(env.serializer)
    with tempfile.TemporaryDirectory(prefix="dagrun-call-") as tmp:
        files = [Path(tmp, name) for name in ("call.py", "args", "result", "error", "strings")]
        code_file, args_file, result_file, error_file, strings_file = files
        code_file.write_text(script(source, env.serializer))
        args_file.write_bytes(_dump_arguments(serializer, env.serializer, args, kwargs))
        strings_file.write_text("\n".join(env.string_args))
        note("INFO", f"calling {source.name} with {python}")
        code = run_command(
            [python, *map(str, files)],
            env=_variables(env, folder),
            on_process_group=on_process_group,
        )
        if code in env.skip_on_exit_code:  # before any failure, as Airflow
            raise SkipTask(f"the function's process exited with code {code}")
        _raise_failure(error_file, code, env.serializer, python)
        data = result_file.read_bytes() if result_file.exists() else b""
    try:
        return serializer.loads(data) if data else None
    except Exception as exc:
        raise SerializationFailed(
            f"the return value cannot be read by the worker's Python ({type(exc).__name__}: "
            f"{exc}); return plain values (JSON: text, numbers, lists, dicts)"
        ) from None


def _serializer(name: str) -> Any:
    """The serializer module on the worker's side."""
    if name not in SERIALIZERS:
        raise SerializationFailed(f"serializer must be one of {', '.join(SERIALIZERS)}")
    try:
        return importlib.import_module(name)
    except ImportError:
        raise SerializationFailed(
            f"serializer {name!r} is not installed beside dagrun (pip install {name})"
        ) from None


def _dump_arguments(
    serializer: Any, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> bytes:
    """The arguments serialised, or an error naming those that cannot be."""
    try:
        return serializer.dumps({"args": list(args), "kwargs": dict(kwargs)})
    except Exception as exc:
        named = [*(f"argument {i}" for i in range(len(args))), *map(repr, kwargs)]
        values = [*args, *kwargs.values()]
        bad = [n for n, value in zip(named, values, strict=True) if not _dumps(serializer, value)]
        raise SerializationFailed(
            f"{', '.join(bad) or 'the arguments'} cannot be serialised with {name} "
            f"({type(exc).__name__}: {exc})"
        ) from None


def _dumps(serializer: Any, value: Any) -> bool:
    try:
        serializer.dumps(value)
    except Exception:
        return False
    return True


def _variables(env: PythonEnvironment, folder: str | None) -> dict[str, str]:
    """The function's environment variables: the worker's (unless ``inherit_env=False``),
    then the task's ``env_vars``; output unbuffered, so that it reaches the log in order."""
    variables = dict(os.environ) if env.inherit_env else {}
    variables.update(env.env_vars)
    if folder:
        path = variables.get("PYTHONPATH")
        variables["PYTHONPATH"] = f"{path}{os.pathsep}{folder}" if path else folder
    variables.setdefault("PYTHONUNBUFFERED", "1")
    return variables


def _raise_failure(error_file: Path, code: int, serializer: str, python: str) -> None:
    """Raise what ended the call, if it did not succeed: the function's exception, a value
    that could not cross, or the process's end."""
    try:
        failure = json.loads(error_file.read_text()) if error_file.exists() else None
    except (OSError, ValueError):
        failure = None
    if failure is None:
        if code != 0:
            raise CallFailed(f"the function's process {describe_exit(code)}")
        return
    kind, raised = failure.get("kind"), f"{failure.get('type')}: {failure.get('message')}"
    if kind == "function":
        raise FunctionFailed(str(failure.get("type")), str(failure.get("message", "")))
    if kind == "serializer":
        raise SerializationFailed(
            f"serializer {serializer!r} is not importable by {python}; add it to the "
            "requirements (or install it there)"
        )
    if kind == "arguments":
        raise SerializationFailed(f"the arguments cannot be read by {python} ({raised})")
    raise SerializationFailed(f"the return value cannot be serialised with {serializer} ({raised})")
