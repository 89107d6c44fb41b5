"""What one attempt does: import the DAG file, render templates, call the task, capture logs.

``execute`` runs inside a worker's child process (or in-process for ``dagrun test``). It never
touches task state: it returns an :class:`AttemptResult` and the worker records it with a
fenced update. stdout, stderr (file descriptors 1 and 2, so subprocesses and C extensions
are captured too) and Python logging go to the attempt's own log file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import faulthandler
import functools
import inspect
import json
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

from dagrun import processes
from dagrun.authoring import mapping, templates
from dagrun.authoring.dag import DAG
from dagrun.authoring.params import resolve
from dagrun.authoring.sensor_options import SensorMode
from dagrun.authoring.tasks import BashTask, PythonTask, Task, TaskOutput
from dagrun.errors import NonRetryableError, StoreError
from dagrun.parsing.loader import import_file, isolated
from dagrun.runtime import masking
from dagrun.runtime.context import TaskContext, make_context
from dagrun.runtime.current import set_current
from dagrun.runtime.masking import Masker, MaskingWriter
from dagrun.states import AttemptOutcome
from dagrun.store import logfiles
from dagrun.store.logfiles import LogRange

MAX_RETURN_BYTES = 1_000_000


class ConditionUnmet(Exception):
    """A sensor's poke found its condition unmet: the attempt ends ``rescheduled`` and the
    store decides whether the sensor waits for its next poke or has timed out."""


@dataclass(frozen=True)
class AttemptRequest:
    """Everything a child needs to run one attempt; plain data, sent over a pipe."""

    dag_id: str
    task_id: str
    fileloc: str
    timezone: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    try_number: int = 1
    fence_token: int = 0
    ti_id: int | None = None
    #: The element of a mapped task this attempt runs (-1: not mapped).
    map_index: int = -1
    #: The run's conf as given; declared params are checked against it per attempt.
    conf: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    log_dir: str | None = None
    db_url: str | None = None

    @property
    def label(self) -> str:
        """What the worker's log calls it."""
        return f"{self.dag_id}.{self.task_id}{_index(self)} try {self.try_number}"

    def context(self) -> TaskContext:
        return make_context(
            dag_id=self.dag_id,
            task_id=self.task_id,
            run_id=self.run_id,
            timezone=self.timezone,
            logical_date=self.logical_date,
            data_interval_start=self.data_interval_start,
            data_interval_end=self.data_interval_end,
            try_number=self.try_number,
            conf=self.conf,
            fence_token=self.fence_token,
            ti_id=self.ti_id,
            db_url=self.db_url,
        )


def _index(request: AttemptRequest) -> str:
    """``[i]`` after a mapped task's id, as logs name its instances."""
    return f"[{request.map_index}]" if request.map_index >= 0 else ""


@dataclass(frozen=True)
class AttemptResult:
    outcome: AttemptOutcome
    error: str | None = None
    return_value: str | None = None
    duration: float = 0.0
    log: LogRange | None = None


class DagCache:
    """Imported DAG files, reused while the file is unchanged (mtime and size).

    A file that no longer imports, or no longer defines the task, is run as its last good
    version when the store has one (``dag_file.good_source``): its DAGs keep being
    scheduled from their last good spec, so their attempts must run the code that made it.
    """

    def __init__(self) -> None:
        self._files: dict[str, tuple[tuple[int, int], dict[str, DAG]]] = {}

    def task(self, fileloc: str, dag_id: str, task_id: str, db_url: str | None = None) -> Task:
        return self._find(fileloc, db_url, lambda dags: _task_of(dags, fileloc, dag_id, task_id))

    def dag(self, fileloc: str, dag_id: str, db_url: str | None = None) -> DAG:
        return self._find(fileloc, db_url, lambda dags: _dag_of(dags, fileloc, dag_id))

    def _find(self, fileloc: str, db_url: str | None, find: Callable[[dict[str, DAG]], Any]) -> Any:
        """What ``find`` picks from the file's DAGs: as the file is now, or as its last good
        version when it no longer imports or no longer has what is wanted."""
        try:
            return find(self._dags(fileloc))
        except Exception as exc:
            source = _good_source(db_url, fileloc)
            if source is None:
                raise
            note("WARNING", f"{fileloc} fails ({one_line(exc)}); running its last good version")
            return find(self._last_good(fileloc, source))

    def preload(self, fileloc: str) -> None:
        """Import a DAG file before any attempt needs it, as an attempt would (``isolated``),
        its output discarded; a file that fails is left to the attempt to report."""
        with (
            open(os.devnull, "w") as sink,
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
            contextlib.suppress(Exception),
            isolated(fileloc),
        ):
            self._dags(fileloc)

    def _dags(self, fileloc: str) -> dict[str, DAG]:
        st = os.stat(fileloc)
        key = (st.st_mtime_ns, st.st_size)
        cached = self._files.get(fileloc)
        if cached is None or cached[0] != key:
            self._files.pop(fileloc, None)
            cached = self._files[fileloc] = (key, {d.dag_id: d for d in import_file(fileloc)})
        return cached[1]

    def _last_good(self, fileloc: str, source: str) -> dict[str, DAG]:
        key = ("good", hash(source))
        cached = self._files.get(fileloc)
        if cached is None or cached[0] != key:
            dags = {d.dag_id: d for d in import_file(fileloc, source)}
            cached = self._files[fileloc] = (key, dags)
        return cached[1]


def _dag_of(dags: dict[str, DAG], fileloc: str, dag_id: str) -> DAG:
    dag = dags.get(dag_id)
    if dag is None:
        raise LookupError(f"{fileloc} no longer defines DAG '{dag_id}'")
    return dag


def _task_of(dags: dict[str, DAG], fileloc: str, dag_id: str, task_id: str) -> Task:
    dag = _dag_of(dags, fileloc, dag_id)
    if task_id not in dag.tasks:
        raise LookupError(f"DAG '{dag_id}' no longer has task '{task_id}'")
    return dag.tasks[task_id]


def _good_source(db_url: str | None, fileloc: str) -> str | None:
    """The file's last good source from the store (None outside a worker, or if none)."""
    if db_url is None:
        return None
    from dagrun.store import reads
    from dagrun.store.engine import shared_store

    with shared_store(db_url).read() as conn:
        return reads.good_source(conn, fileloc)


def execute(
    request: AttemptRequest,
    cache: DagCache,
    on_process_group: Callable[[int], None] | None = None,
) -> AttemptResult:
    """Run one attempt to its end and say how it went; never raises for task errors. Its
    log and its error text have the secrets known to this process masked."""
    started = time.monotonic()
    context = request.context()
    set_current(context)
    try:
        masker = masking.for_attempt(request.db_url)
        with captured(request.log_dir, masker) as log:
            result = _run_logged(request, context, cache, on_process_group)
    except OSError as exc:  # the log itself: its folder full, read-only, removed
        reason = f"{log_folder_problem(exc)}: {exc.strerror or exc} ({request.log_dir})"
        return AttemptResult(AttemptOutcome.INFRA_FAILED, reason, None, time.monotonic() - started)
    except StoreError as exc:  # nothing ran: the secrets it would have to mask are unknown
        reason = f"cannot read the secrets to mask: {exc}"
        return AttemptResult(AttemptOutcome.INFRA_FAILED, reason, None, time.monotonic() - started)
    finally:
        set_current(None)
    return AttemptResult(
        result.outcome,
        result.error and masker.mask(result.error),
        result.return_value,
        time.monotonic() - started,
        log[0] if log else None,
    )


def _run_logged(
    request: AttemptRequest,
    context: TaskContext,
    cache: DagCache,
    on_process_group: Callable[[int], None] | None,
) -> AttemptResult:
    note(
        "INFO",
        f"attempt {request.try_number} of {request.dag_id}.{request.task_id}{_index(request)} for "
        f"{context.logical_date.isoformat()} (fence {request.fence_token})",
    )
    try:
        with isolated(request.fileloc):
            value = _run_task(request, context, cache, on_process_group)
        encoded = _encode(value)
    except ConditionUnmet as unmet:
        note("INFO", str(unmet))
        return AttemptResult(AttemptOutcome.RESCHEDULED)
    except NonRetryableError as exc:
        note("ERROR", f"non-retryable failure:\n{traceback.format_exc()}")
        return AttemptResult(AttemptOutcome.NON_RETRYABLE, one_line(exc))
    except BaseException as exc:  # a task may raise anything; only its attempt fails
        note("ERROR", f"failed:\n{traceback.format_exc()}")
        return AttemptResult(AttemptOutcome.FAILED, one_line(exc))
    note("INFO", "success")
    return AttemptResult(AttemptOutcome.SUCCESS, return_value=encoded)


def log_folder_problem(exc: OSError) -> str:
    """What an error writing the log says about the log folder, in a few words."""
    return {
        errno.ENOSPC: "log folder full",
        errno.EDQUOT: "log folder over its quota",
        errno.EROFS: "log folder read-only",
        errno.EACCES: "log folder not writable",
        errno.EPERM: "log folder not writable",
    }.get(exc.errno, "log folder unusable")


def note(level: str, message: str) -> None:
    """dagrun's own lines in the attempt log, in the logging format but without its cost
    (this runs twice per attempt, and small tasks are many)."""
    now = time.time()
    sys.stderr.write(
        f"{_stamp(int(now))},{int(now % 1 * 1000):03d} {level} dagrun.task: {message}\n"
    )


@functools.lru_cache(maxsize=1)
def _stamp(second: int) -> str:
    """The local time of a whole second, formatted once: both lines of a short attempt, and
    the attempts after it, fall in the same second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))


def _run_task(
    request: AttemptRequest,
    context: TaskContext,
    cache: DagCache,
    on_process_group: Callable[[int], None] | None,
) -> Any:
    task = cache.task(request.fileloc, request.dag_id, request.task_id, request.db_url)
    if isinstance(task, BashTask):
        _run_bash(task, context, on_process_group, _mapped_values(task, request))
        return None
    if isinstance(task, PythonTask):
        elements = _mapped_values(task, request)
        if task.sensor is not None:
            value = _sense(task, context, request.inputs, elements)
        else:
            value = _run_python(task, context, request.inputs, elements)
        _check_value(task, value)
        return value
    raise TypeError(f"cannot run task of type {type(task).__name__}")


def _sense(
    task: PythonTask, context: TaskContext, inputs: dict[str, Any], elements: dict[str, Any]
) -> Any:
    """A sensor's pokes: its callable's truthy value, once its condition holds. In
    reschedule mode one poke, raising ``ConditionUnmet`` when it does not; in poke mode one
    every ``poke_interval`` while the attempt keeps its slot, until the timeout has passed
    since the first (then ``ConditionUnmet`` too, and the store ends the sensor)."""
    sensor = task.sensor
    deadline = time.monotonic() + sensor.timeout
    while True:
        value = _run_python(task, context, inputs, elements)
        if value:
            return value
        if sensor.mode == SensorMode.RESCHEDULE:
            raise ConditionUnmet(f"condition unmet; next poke in {sensor.poke_interval:.10g} s")
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConditionUnmet(f"condition unmet after {sensor.timeout:.10g} s of pokes")
        time.sleep(min(sensor.poke_interval, left))


def _mapped_values(task: Task, request: AttemptRequest) -> dict[str, Any]:
    """The elements a mapped task's instance runs with, by argument (none if not mapped):
    from the literal lists in the DAG file, or the upstream values it maps over."""
    if not task.mapped:
        return {}
    lists = [
        request.inputs.get(v.task.task_id) if isinstance(v, TaskOutput) else v
        for v in task.mapped.values()
    ]
    return dict(zip(task.mapped, mapping.elements(lists, request.map_index), strict=True))


def _check_value(task: PythonTask, value: Any) -> None:
    """A value that readiness acts on must make sense, or the task fails (not a retry: the
    same code returns the same value): a list to map over for a task others map over, the
    ids of direct downstream tasks for a branch."""
    if task.feeds_mapping:
        problem = mapping.problem(value)
        if problem:
            raise NonRetryableError(f"its return value {problem}")
    if task.choice == "branch":
        downstream = sorted(
            t.task_id for t in task.dag.tasks.values() if task.task_id in t.upstream_ids
        )
        picked = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(picked, list) or not all(isinstance(p, str) for p in picked):
            raise NonRetryableError(
                f"a branch returns a task id, a list of them or None, not {value!r}"
            )
        unknown = [p for p in picked if p not in downstream]
        if unknown:
            raise NonRetryableError(
                f"branch chose {unknown[0]!r}, which is not a direct downstream task "
                f"(those are: {', '.join(downstream) or 'none'})"
            )


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _encode(value: Any) -> str | None:
    if value is None:
        return None
    try:
        encoded = json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"return value is not JSON-serialisable ({exc}); write bulk data to a partition"
        ) from None
    if len(encoded) > MAX_RETURN_BYTES:
        raise ValueError(
            f"return value is {len(encoded)} bytes (limit {MAX_RETURN_BYTES}); "
            "write bulk data to a partition"
        )
    return encoded


def render(value: Any, names: dict[str, Any]) -> Any:
    """Render Jinja2 templates in strings, recursively through lists and dicts."""
    if isinstance(value, str):
        if not templates.is_template(value):
            return value
        from jinja2 import TemplateError

        try:
            return templates.environment().from_string(value).render(**names)
        except TemplateError as exc:
            raise NonRetryableError(f"template {value!r}: {exc}") from None
    if isinstance(value, list | tuple):
        return type(value)(render(v, names) for v in value)
    if isinstance(value, dict):
        return {k: render(v, names) for k, v in value.items()}
    return value


def _with_params(task: Task, context: TaskContext) -> TaskContext:
    """The context with ``params``: the DAG's declared params resolved against the run's conf
    (checked again here, as the DAG may have changed since the run was triggered), then the
    task's own rendered params on top. The context itself when there is neither a param nor
    a conf (most tasks), as nothing would change."""
    own = task.options.get("params")
    if not task.dag.params and not own and not context.conf:
        return context
    params = resolve(task.dag.params, context.conf)
    if own:
        params.update(render(own, {**context.names(), "params": params}))
    return dataclasses.replace(context, params=params)


def _run_python(
    task: PythonTask,
    context: TaskContext,
    inputs: dict[str, Any],
    elements: dict[str, Any] | None = None,
) -> Any:
    context = _with_params(task, context)
    set_current(context)

    def resolve(value: Any) -> Any:
        return inputs.get(value.task.task_id) if isinstance(value, TaskOutput) else value

    args = [resolve(a) for a in task.args]
    kwargs = {k: resolve(v) for k, v in task.kwargs.items()}
    kwargs.update(elements or {})
    wanted = _wanted_names(task, context)
    if wanted:
        names = context.names()
        kwargs.update((name, names[name]) for name in wanted)
    return task.python_callable(*args, **kwargs)


_WANTED: weakref.WeakKeyDictionary[PythonTask, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _wanted_names(task: PythonTask, context: TaskContext) -> tuple[str, ...]:
    """The context names to pass the callable as keywords, in order: the parameters the call
    leaves unbound that are context names, or every name not already passed when it takes
    ``**kwargs``. This depends only on the task (its signature and how it is called), so it
    is worked out once per task, not per attempt; a reloaded file brings new tasks."""
    wanted = _WANTED.get(task)
    if wanted is None:
        known = context.names()
        signature = inspect.signature(task.python_callable)
        bound = signature.bind_partial(*task.args, **task.kwargs, **task.mapped).arguments
        found: list[str] = []
        for name, param in signature.parameters.items():
            if param.kind == param.VAR_KEYWORD:
                taken = {*bound, *task.kwargs, *task.mapped, *found}
                found += [k for k in known if k not in taken]
            elif name not in bound and name in known:
                found.append(name)
        wanted = _WANTED[task] = tuple(found)
    return wanted


def bash_environment(context: TaskContext, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a BashTask: the worker's, the run's dates as DS-style variables."""
    env = dict(os.environ)
    env.update(
        {
            "DS": context.ds,
            "DS_NODASH": context.ds_nodash,
            "LOGICAL_DATE": context.logical_date.isoformat(),
            "DATA_INTERVAL_START": context.data_interval_start.isoformat(),
            "DATA_INTERVAL_END": context.data_interval_end.isoformat(),
            "RUN_ID": context.run_id,
            "DAG_ID": context.dag_id,
            "TASK_ID": context.task_id,
            "TRY_NUMBER": str(context.try_number),
            "IDEMPOTENCY_KEY": context.idempotency_key,
            "FENCE_TOKEN": str(context.fence_token),
        }
    )
    env.update(extra)
    return env


def _run_bash(
    task: BashTask,
    context: TaskContext,
    on_process_group: Callable[[int], None] | None,
    elements: dict[str, Any] | None = None,
) -> None:
    """Run the task's command (a mapped instance's own ``command``, with its ``env`` on top
    of the task's) in a process group of its own."""
    context = _with_params(task, context)
    names = context.names()
    elements = elements or {}
    command = render(str(elements.get("command", task.command)), names)
    extra = {**task.env, **{str(k): str(v) for k, v in elements.get("env", {}).items()}}
    env = bash_environment(context, {k: render(v, names) for k, v in extra.items()})
    logging.getLogger("dagrun.task").info("running: %s", command)
    sys.stdout.flush()
    sys.stderr.flush()
    masker = masking.active()
    process = subprocess.Popen(
        ["bash", "-c", command],
        env=env,
        cwd=task.cwd,
        preexec_fn=processes.own_session,
        **masking.piped(masker),
    )
    if on_process_group:
        on_process_group(process.pid)
    try:
        if masker:
            masking.pump(process, masker)
        code = process.wait()
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        if process.stdout is not None:
            process.stdout.close()
    if code != 0:
        reason = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        raise RuntimeError(f"command {reason}")


@contextlib.contextmanager
def captured(log_dir: str | None, masker: Masker | None = None) -> Iterator[list[LogRange]]:
    """Send fds 1 and 2, ``sys.stdout``/``sys.stderr`` and Python logging to this process's
    log segment under ``log_dir``, then restore them all (the child runs many attempts);
    the streams and logging through ``masker`` once it knows a secret (``_watch``).
    The list it yields holds the attempt's range of the segment once the block is over."""
    log: list[LogRange] = []
    if log_dir is None:
        yield log
        return
    target = _fd2_target()
    saved_streams = sys.stdout, sys.stderr
    root = logging.getLogger()
    level = root.level
    sys.stdout.flush()
    sys.stderr.flush()
    segment = logfiles.segment(log_dir)
    offset = segment.start()
    saved_fds = _redirect_fds(segment.fd)
    try:
        sys.stdout = sys.stderr = target.stream
        # On fd 2, not on the segment, so it stays valid after the attempt and is left on:
        # a segfault's traceback goes to whatever fd 2 is, this attempt's log while it runs.
        # Enabled every time (under a microsecond) in case a task turned it off or moved it.
        faulthandler.enable(file=2)
        root.addHandler(target.handler)
        _set_level(root, min(level, logging.INFO) if level else logging.INFO)
        if masker is not None:
            _watch(target, masker)
        yield log
    finally:
        if masker is not None:
            _unwatch(target, masker)
        if not target.stream.closed:  # a task may close sys.stdout; _fd2_target replaces it
            with contextlib.suppress(OSError):  # a full disk: what was written stays
                target.stream.flush()
        sys.stdout, sys.stderr = saved_streams
        root.removeHandler(target.handler)
        _set_level(root, level)
        _restore_fds(saved_fds)
        log.append(LogRange(segment.path, offset, segment.end() - offset))


def _watch(target: _Fd2Target, masker: Masker) -> None:
    """Write ``sys.stdout``, ``sys.stderr`` and the log handler through ``masker`` from the
    moment it knows a secret: at once, or when the task fetches its first. An attempt with
    none keeps the plain stream, and its BashTask writes to the log directly."""

    def mask_streams() -> None:
        if not isinstance(target.handler.stream, MaskingWriter):
            writer = MaskingWriter(target.stream, masker)
            sys.stdout = sys.stderr = writer
            target.handler.setStream(writer)

    masker.on_known = mask_streams
    if masker:
        mask_streams()


def _unwatch(target: _Fd2Target, masker: Masker) -> None:
    """Undo ``_watch``; what the masking writer still holds (a line not ended) is written."""
    masker.on_known = None
    writer = target.handler.stream
    if isinstance(writer, MaskingWriter):
        target.handler.stream = target.stream
        if not target.stream.closed:
            with contextlib.suppress(OSError):
                writer.flush()


def _redirect_fds(fd: int) -> tuple[int, int]:
    """Point fds 1 and 2 at ``fd``; returns copies of what they were."""
    saved = os.dup(1), os.dup(2)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return saved


def _restore_fds(saved: tuple[int, int]) -> None:
    for target, fd in enumerate(saved, start=1):
        os.dup2(fd, target)
        os.close(fd)


@dataclass(frozen=True)
class _Fd2Target:
    """A text stream on fd 2 and a logging handler writing to it. Made once per process:
    every attempt points fd 2 at its log segment, so the same stream and handler serve all
    of them, where building both per attempt was much of a small attempt's cost."""

    stream: TextIO
    handler: logging.Handler


_target: _Fd2Target | None = None


def _fd2_target() -> _Fd2Target:
    global _target
    if _target is None or _target.stream.closed:
        stream = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives on
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        _target = _Fd2Target(stream, handler)
    return _target


def _set_level(logger: logging.Logger, level: int) -> None:
    """``setLevel`` clears the cache of every logger, so only when the level changes (a
    worker started with INFO logging leaves it unchanged across all its attempts)."""
    if logger.level != level:
        logger.setLevel(level)
