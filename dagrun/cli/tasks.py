"""``dagrun test``, ``tasks test``, ``tasks failed`` and ``logs``: running and debugging tasks."""

from __future__ import annotations

from itertools import chain, count
from pathlib import Path

import click

from dagrun.authoring import params
from dagrun.cli.app import (
    App,
    echo_json,
    echo_table,
    pass_app,
    pick_run,
    resolve_date,
)
from dagrun.cli.log_setup import setup_logging
from dagrun.cli.options import conf_option
from dagrun.errors import DagNotFound, TaskNotFound, UsageError
from dagrun.parsing.loader import import_file
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.local_run import run_locally
from dagrun.runtime.requests import AttemptResult
from dagrun.states import AttemptOutcome, RunState, TaskState
from dagrun.store import audit, callbacks, logfiles, operator_actions, run_reads, task_reads
from dagrun.store.runs import run_id_for
from dagrun.timing.instants import iso
from dagrun.timing.timetable import DataInterval


def _interval(spec: DagSpec, value: str) -> DataInterval:
    logical = resolve_date(spec, value)
    found = next(iter(spec.timetable.intervals(logical, logical)), None)
    return found or DataInterval(logical, logical)


def _conf(spec: DagSpec, conf: dict) -> dict:
    """``--conf`` for a test run, checked against the DAG's params as a trigger is."""
    params.resolve(spec.params, conf)
    return conf


def _check_importable(spec: DagSpec) -> None:
    """Import the file here first so a broken file fails with its reason, not per task."""
    if not any(d.dag_id == spec.dag_id for d in import_file(spec.fileloc)):
        raise DagNotFound(spec.dag_id)


@click.command("test")
@click.argument("dag_id")
@click.argument("date")
@conf_option
@click.option(
    "--record",
    is_flag=True,
    help="Record the run in the store: run it as `dagrun run --date DATE` does.",
)
@pass_app
def test_dag(app: App, dag_id: str, date: str, conf: dict, record: bool) -> None:
    """Run every task of DAG for DATE in this process, deciding what a real run decides
    (branches, skips, trigger rules, mapping, sensors, retries); nothing is recorded. With
    --record, a run that `dagrun run` makes and runs, recorded."""
    spec = app.spec(dag_id)
    if record:
        _record(app, spec, date, conf)
        return
    setup_logging(app.verbose)
    checked = _conf(spec, conf)
    interval = _interval(spec, date)
    _check_importable(spec)
    done = run_locally(app.store, spec, interval, checked, _started, _ended)
    rows = [[t.task_id, "" if t.map_index < 0 else t.map_index, t.state] for t in done.tasks]
    echo_table(["task_id", "index", "state"], rows)
    if done.state != RunState.SUCCESS:
        raise click.exceptions.Exit(1)


def _record(app: App, spec: DagSpec, date: str, conf: dict) -> None:
    """``test --record``: the run ``dagrun run --date DATE`` makes (same checks, audit,
    driver and report), keyed ``test__<logical date>`` (then ``.2``, ``.3``...), so each
    recorded test is a run of its own and a run of the date made otherwise is left alone."""
    from dagrun.cli.backfill import run

    logical = _interval(spec, date).start
    base = run_id_for("test", logical)
    with app.store.read() as conn:
        taken = {r.run_id for r in run_reads.runs_between(conn, spec.dag_id, logical, logical)}
    keys = chain([base], (f"{base}.{n}" for n in count(2)))
    key = next(k for k in keys if k not in taken)
    click.get_current_context().invoke(
        run, dag_id=spec.dag_id, date_=date, conf=conf, run_id=key, workers=None
    )


def _label(task_id: str, map_index: int) -> str:
    return task_id if map_index < 0 else f"{task_id}[{map_index}]"


def _started(task_id: str, map_index: int) -> None:
    click.secho(f"--- {_label(task_id, map_index)}", bold=True, err=True)


def _ended(task_id: str, map_index: int, result: AttemptResult) -> None:
    shown = "" if result.outcome in _TEST_STATES else f": {result.error}"
    click.echo(
        f"--- {_label(task_id, map_index)}: {result.outcome.value} in "
        f"{result.duration:.2f}s{shown}",
        err=True,
    )


#: The outcomes of a test attempt that are no failure (a sensor's unmet poke waits).
_TEST_STATES = {AttemptOutcome.SUCCESS, AttemptOutcome.SKIPPED, AttemptOutcome.RESCHEDULED}


@click.group("tasks")
def tasks_group() -> None:
    """Test tasks, mark them by hand, list dead letters."""


@tasks_group.command("test")
@click.argument("dag_id")
@click.argument("task_id")
@click.argument("date")
@conf_option
@pass_app
def test_task(app: App, dag_id: str, task_id: str, date: str, conf: dict) -> None:
    """Run TASK for DATE in this process as a run would: the tasks it depends on run
    first, so its trigger rule, a branch or short-circuit above it, its mapping (one
    instance per element) and its inputs are decided as in a run; nothing is recorded."""
    setup_logging(app.verbose)
    spec = app.spec(dag_id)
    checked = _conf(spec, conf)
    if task_id not in spec.task_map:
        raise TaskNotFound(dag_id, task_id)
    interval = _interval(spec, date)
    _check_importable(spec)
    results: dict[int, AttemptResult] = {}

    def ended(ended_id: str, map_index: int, result: AttemptResult) -> None:
        _ended(ended_id, map_index, result)
        if ended_id == task_id:
            results[map_index] = result

    done = run_locally(app.store, spec, interval, checked, _started, ended, task_id)
    chosen = [t for t in done.tasks if t.task_id == task_id]
    for t in chosen:
        _report_instance(t, results.get(t.map_index))
    if any(t.state not in _TASK_TEST_PASSED for t in chosen):
        raise click.exceptions.Exit(1)


#: The states of the tested task's instances that make ``tasks test`` pass.
_TASK_TEST_PASSED = {TaskState.SUCCESS.value, TaskState.SKIPPED.value}


def _report_instance(row: task_reads.TaskRow, result: AttemptResult | None) -> None:
    """How the tested task ended, per instance (stderr): its state, ``not run`` when the run
    decided so (a branch not taken, an upstream failure), and why it did not pass; then what
    it returned (stdout)."""
    label = _label(row.task_id, row.map_index)
    passed = row.state in _TASK_TEST_PASSED
    why = f": {row.last_error}" if row.last_error and not passed else ""
    click.echo(f"{label}: {row.state}{'' if result else ', not run'}{why}", err=True)
    if result is not None and result.return_value is not None:
        click.echo(("" if row.map_index < 0 else f"{label} ") + f"returned {result.return_value}")


@tasks_group.command("state")
@click.argument("dag_id")
@click.argument("task_id")
@click.option("--date", "date_", default=None, help="The run's logical date.")
@click.option("--run-id", default=None, help="The run's id (instead of --date).")
@click.option(
    "--map-index", type=click.IntRange(0), default=None, help="One index of a mapped task."
)
@pass_app
def state(
    app: App,
    dag_id: str,
    task_id: str,
    date_: str | None,
    run_id: str | None,
    map_index: int | None,
) -> None:
    """Print a task instance's state (Airflow's ``tasks state DAG TASK DATE``); a mapped
    task's, one line per index."""
    spec = app.spec(dag_id)
    if task_id not in spec.task_map:
        raise TaskNotFound(dag_id, task_id)
    with app.store.read() as conn:
        row = pick_run(conn, spec, run_id, date_)
        found = [t for t in task_reads.task_instances(conn, [row.id]) if t.task_id == task_id]
    if map_index is not None:
        found = [t for t in found if t.map_index == map_index]
    if not found:
        raise UsageError(f"task '{task_id}' has no instance in run {row.run_id} (not expanded yet)")
    for t in found:
        click.echo(
            t.state if t.map_index < 0 or map_index is not None else f"{t.map_index}: {t.state}"
        )


@tasks_group.command("mark")
@click.argument("dag_id")
@click.argument("task_id")
@click.option("--date", "date_", default=None, help="The run's logical date.")
@click.option("--run-id", default=None, help="The run's id (instead of --date).")
@click.option(
    "--state",
    required=True,
    type=click.Choice([s.value for s in (TaskState.SUCCESS, TaskState.FAILED, TaskState.SKIPPED)]),
)
@click.option("--downstream", is_flag=True, help="Mark every task downstream of it too.")
@click.option(
    "--map-index",
    type=click.IntRange(0),
    default=None,
    help="The index of a mapped task.",
)
@pass_app
def mark(
    app: App,
    dag_id: str,
    task_id: str,
    date_: str | None,
    run_id: str | None,
    state: str,
    downstream: bool,
    map_index: int | None,
) -> None:
    """Set a task instance's state by hand (a running attempt is stopped). Tasks downstream
    that were upstream_failed or skipped are decided again: marking a failed task success
    lets its downstream run (a finished run reopens for it). ``--map-index`` marks one index
    of a mapped task (with --downstream, of the mapped tasks downstream too)."""
    spec = app.spec(dag_id)
    if task_id not in spec.task_map:
        raise TaskNotFound(dag_id, task_id)
    chosen = spec.descendants({task_id}) if downstream else {task_id}
    with app.store.write() as conn:
        row = pick_run(conn, spec, run_id, date_)
        reason = f"marked {state} by hand"
        now = app.store.now(conn)
        wanted = TaskState(state)
        change = operator_actions.mark_tasks(
            conn, spec, row.id, chosen, wanted, reason, now, map_index
        )
        detail = {"task_id": task_id, "state": state, "downstream": downstream}
        if map_index is not None:
            detail["map_index"] = map_index
        audit.record(app.store, conn, "mark_task", dag_id, row.run_id, **detail, **change.detail())
    click.echo(
        f"marked {change.tasks} task instance(s) of run {row.run_id} {state}"
        + (f" ({change.stopped} running attempt(s) stopped)" if change.stopped else "")
        + f"; the run is {change.after}"
        + (_reopened(spec, row.run_id) if change.reopened else "")
    )


def _reopened(spec: DagSpec, run_id: str) -> str:
    return (
        " again: tasks downstream can run now; the scheduler runs them (or `dagrun run "
        f"{spec.dag_id} --run-id {run_id}`)"
    )


@tasks_group.command("failed")
@click.argument("dag_id", required=False)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def failed(app: App, dag_id: str | None, as_json: bool) -> None:
    """The dead letters: tasks that exhausted their attempts, with their last error."""
    if dag_id:
        app.spec(dag_id)
    with app.store.read() as conn:
        rows = task_reads.dead_letters(conn, dag_id)
    if as_json:
        echo_json(
            [
                {
                    "dag_id": r.dag_id,
                    "task_id": r.task_id,
                    "map_index": r.map_index,
                    "run_id": r.run_id,
                    "logical_date": iso(r.logical_date),
                    "try_number": r.try_number,
                    "error": r.error,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no failed tasks")
        return
    echo_table(
        ["dag_id", "task_id", "logical date (UTC)", "tries", "last error"],
        [
            [
                r.dag_id,
                f"{r.task_id}[{r.map_index}]" if r.map_index >= 0 else r.task_id,
                r.logical_date.strftime("%Y-%m-%d %H:%MZ"),
                r.try_number,
                r.error or "",
            ]
            for r in rows
        ],
    )


@click.command("logs")
@click.argument("dag_id")
@click.argument("task_id")
@click.argument("date", required=False)
@click.option("--run-id", default=None, help="Pick the run by run id instead of DATE.")
@click.option(
    "--try",
    "try_number",
    type=click.IntRange(1),
    default=None,
    help="Attempt number (default: the latest).",
)
@click.option(
    "--map-index",
    type=click.IntRange(0),
    default=None,
    help="The index of a mapped task.",
)
@pass_app
def logs(
    app: App,
    dag_id: str,
    task_id: str,
    date: str | None,
    run_id: str | None,
    try_number: int | None,
    map_index: int | None,
) -> None:
    """Print an attempt's log (of the run at DATE, or --run-id), then its callbacks' logs."""
    spec = app.spec(dag_id)
    with app.store.read() as conn:
        run = pick_run(conn, spec, run_id, date)
        ti = task_reads.task_instance(conn, run, task_id, map_index)
        attempts = task_reads.attempts(conn, ti.id)
    if not attempts:
        raise UsageError(f"{dag_id}.{task_id} has not run at {run.logical_date.isoformat()}")
    chosen = [a for a in attempts if try_number in (None, a.try_number)]
    if not chosen:
        tries = ", ".join(str(a.try_number) for a in attempts)
        raise UsageError(f"no try {try_number} of {task_id} (tries: {tries})")
    attempt = chosen[-1]
    click.echo(
        f"# try {attempt.try_number} on {attempt.worker}: {attempt.outcome or 'running'}"
        + (f" ({attempt.error})" if attempt.error else ""),
        err=True,
    )
    path = Path(attempt.log_path) if attempt.log_path else None
    if path is None or not path.exists():
        raise UsageError(f"the log of try {attempt.try_number} is not on this host ({path})")
    text, _ = logfiles.read(str(path), attempt.log_offset, attempt.log_length)
    _echo_log(text, attempt.try_number)
    with app.store.read() as conn:
        fired = callbacks.of_attempt(conn, ti.id, attempt.fence_token)
    for call in fired:
        _echo_callback(call)


def _echo_callback(call) -> None:
    """A callback the attempt fired: how it ended, then its log (if on this host)."""
    reason = f" ({call.outcome_error})" if call.outcome_error else ""
    click.echo(f"# {call.event} callback: {call.state}{reason}", err=True)
    if call.log_path and Path(call.log_path).exists():
        text, _ = logfiles.read(call.log_path, call.log_offset, call.log_length)
        click.echo(text if text.endswith("\n") or not text else text + "\n", nl=False)


def _echo_log(text: str, try_number: int) -> None:
    """The log on stdout, ending with a newline even when its last line had none (a task
    killed mid-line), so the footer on stderr and the shell prompt start on lines of their
    own."""
    click.echo(text if text.endswith("\n") or not text else text + "\n", nl=False)
    click.echo(f"# end of try {try_number} ({len(text.encode())} bytes)", err=True)


COMMANDS = [test_dag, tasks_group, logs]
