"""``dagrun run``, ``backfill``, ``clear`` and ``runs list|show``: making and reading runs."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain, islice

import click

from dagrun.authoring import params
from dagrun.cli.app import (
    App,
    cli_range,
    echo_table,
    fmt_local,
    fmt_seconds,
    pass_app,
    pick_run,
    resolve_date,
    stop_signals,
    within_a_minute,
)
from dagrun.cli.options import conf_option
from dagrun.errors import UsageError
from dagrun.parsing.scopes import with_setups_and_teardowns
from dagrun.parsing.spec import DagSpec
from dagrun.runtime.backfill import (
    RUNNING_ACTIONS,
    Action,
    Mode,
    Plan,
    PlanEntry,
    count_to_run,
    make_plan,
    prepare,
    stream_plan,
)
from dagrun.runtime.driver import DriveResult, RunDriver
from dagrun.runtime.progress import Progress
from dagrun.states import RunState, RunType, TaskState
from dagrun.store import audit, run_reads, runs, task_reads
from dagrun.timing.instants import iso
from dagrun.timing.timetable import DataInterval

#: A backfill that would run more runs than this asks first: a mistyped year can make
#: millions of runs. ``--yes`` skips the question.
CONFIRM_ABOVE = 10_000


@click.command("backfill")
@click.argument("dag_id")
@click.option("--start", "-s", required=True, help="First date (in the DAG's timezone).")
@click.option("--end", "-e", required=True, help="Last date, inclusive (a date = whole day).")
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing.")
@click.option("--rerun-failed", is_flag=True, help="Rerun failed and upstream-failed tasks.")
@click.option("--reset", is_flag=True, help="Rerun every task of every date.")
@click.option(
    "--max-active-runs",
    type=click.IntRange(1),
    default=None,
    help="Runs at once (default: the DAG's max_active_runs).",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=None,
    help="Worker child processes (default: number of cores).",
)
@click.option("--reverse", is_flag=True, help="Run the newest dates first.")
@click.option(
    "--yes", "-y", is_flag=True, help=f"Do not ask before running more than {CONFIRM_ABOVE:,} runs."
)
@pass_app
def backfill(
    app: App,
    dag_id: str,
    start: str,
    end: str,
    dry_run: bool,
    rerun_failed: bool,
    reset: bool,
    max_active_runs: int | None,
    workers: int | None,
    reverse: bool,
    yes: bool,
) -> None:
    """Create and run every scheduled run of DAG with logical date in [start, end]."""
    if rerun_failed and reset:
        raise UsageError("--rerun-failed and --reset exclude each other")
    spec = app.spec(dag_id)
    if reverse and any(t.depends_on_past for t in spec.tasks):
        raise UsageError(f"--reverse cannot run '{dag_id}': it has depends_on_past tasks")
    first, last = _backfill_range(spec, start, end)
    mode = Mode.RESET if reset else Mode.RERUN_FAILED if rerun_failed else Mode.DEFAULT
    if dry_run:
        _print_plan(spec, stream_plan(app.store, spec, first, last, mode))
        return
    command = f"dagrun backfill {dag_id} --start {start} --end {end}"
    if not yes:
        _confirm_size(app, spec, (first, last), mode, command)
    plan = make_plan(app.store, spec, first, last, mode)
    kept_failed = _announce(plan, command)
    if not plan.to_run:
        raise click.exceptions.Exit(1 if kept_failed else 0)
    result = _run_plan(app, plan, max_active_runs, workers, reverse)
    _report(spec, result, command)
    if result.failed or kept_failed:
        raise click.exceptions.Exit(1)


def _backfill_range(spec: DagSpec, start: str, end: str) -> tuple[datetime, datetime]:
    """``--start``/``--end`` in UTC, the start raised to the DAG's start_date when the range
    spans it: no earlier date is scheduled, so the plan is the same, and the timetable never
    steps back from the first instant ``datetime`` can hold."""
    first, last = cli_range(spec, start, end)
    timetable = spec.timetable
    # A trigger schedule's start_date bounds its fires; its first logical date is earlier.
    dag_start = None if timetable.start is None else timetable.start - timetable.lead
    if dag_start is not None and first < dag_start <= last:
        first = dag_start
    return first, last


def _confirm_size(
    app: App, spec: DagSpec, span: tuple[datetime, datetime], mode: Mode, command: str
) -> None:
    """Ask before more than ``CONFIRM_ABOVE`` runs; off a terminal nobody can answer, so
    refuse and say how to go on."""
    count = count_to_run(app.store, spec, *span, mode, CONFIRM_ABOVE + 1)
    if count <= CONFIRM_ABOVE:
        return
    what = f"`{command}` would run more than {CONFIRM_ABOVE:,} runs"
    if not _interactive():
        raise UsageError(f"{what}; pass --yes to go ahead (or --dry-run to see the plan)")
    click.confirm(f"{what}; go on?", abort=True)


def _interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _run_plan(
    app: App, plan: Plan, max_active_runs: int | None, workers: int | None, reverse: bool
) -> DriveResult:
    """Create or reset the plan's runs and drive them to their end, with a progress line."""
    spec = plan.spec
    progress = Progress(len(plan.to_run), len(plan.to_run) * len(spec.tasks))
    app.store.ride_out_outages()
    job = RunDriver(
        app.store,
        spec,
        prepare(app.store, plan),
        max_active_runs=max_active_runs,
        workers=workers,
        reverse=reverse,
        progress=progress,
    )
    with stop_signals(job.stop):
        result = job.run()
    progress.close()
    return result


def _announce(plan, command: str) -> int:
    """Say what the backfill will do; returns how many failed dates it leaves alone."""
    counts = plan.counts()
    click.echo(
        f"backfill {plan.spec.dag_id}: {len(plan.entries)} date(s); "
        + ", ".join(f"{n} {a.value}" for a, n in counts.items()),
        err=True,
    )
    for e in plan.entries:
        if e.action == Action.KEEP_FAILED:
            when = fmt_local(e.interval.start, plan.spec.timetable.tz)
            click.echo(f"{when}: skipped-failed (rerun with `{command} --rerun-failed`)", err=True)
    return counts.get(Action.KEEP_FAILED, 0)


def _report(spec: DagSpec, result, command: str) -> None:
    """The closing summary, and what to do next when something failed or stopped."""
    runs, tasks = result.runs, result.tasks
    click.echo(
        f"backfill {spec.dag_id}: runs {runs.get('success', 0)} succeeded, "
        f"{runs.get('failed', 0)} failed; tasks "
        + ", ".join(f"{n} {s}" for s, n in sorted(tasks.items()))
        + f"; {result.seconds:.1f}s"
    )
    if result.interrupted:
        click.echo("interrupted: run the same command again to resume", err=True)
    _echo_stuck(spec, result.stuck)
    if runs.get("failed") or result.stuck:
        click.echo(
            f"failed tasks: `dagrun tasks failed {spec.dag_id}`; rerun them with "
            f"`{command} --rerun-failed`",
            err=True,
        )


def _echo_stuck(spec: DagSpec, stuck: list[datetime]) -> None:
    if stuck:
        on_past = ", ".join(t.task_id for t in spec.tasks if t.depends_on_past)
        dates = ", ".join(fmt_local(d, spec.timetable.tz) for d in stuck)
        click.echo(
            f"{len(stuck)} run(s) cannot go on: {on_past} (depends_on_past) wait for a previous "
            "run that did not succeed: " + dates,
            err=True,
        )


_PLAN_HEADERS = ["logical date (local)", "logical date (UTC)", "current state", "action"]


def _print_plan(spec: DagSpec, entries: Iterator[PlanEntry]) -> None:
    """Print each date as soon as it is planned, so a plan over centuries of dates streams
    instead of filling memory. Columns are sized from the first row (dates all have one
    shape), with seconds when the first two dates are less than a minute apart."""
    tz = spec.timetable.tz
    head = list(islice(entries, 2))
    seconds = within_a_minute(e.interval.start for e in head)
    utc_format = f"%Y-%m-%d %H:%M{':%S' if seconds else ''}Z"

    def cells(e: PlanEntry) -> list[str]:
        when = e.interval.start
        return [fmt_local(when, tz, seconds), when.strftime(utc_format), e.state or "-"]

    widths = [max(len(h), len(v)) for h, v in zip(_PLAN_HEADERS, cells(head[0]), strict=False)]
    widths[2] = max(widths[2], *(len(s.value) for s in RunState))
    click.echo(_plan_line(_PLAN_HEADERS[:3], widths, _PLAN_HEADERS[3]))
    dates = would_run = 0
    for e in chain(head, entries):
        click.echo(_plan_line(cells(e), widths, e.action.value))
        dates += 1
        would_run += e.action in RUNNING_ACTIONS
    click.echo(f"dry run: {would_run} of {dates} date(s) would run; nothing was changed")


def _plan_line(values: list[str], widths: list[int], action: str) -> str:
    return "  ".join([*(v.ljust(w) for v, w in zip(values, widths, strict=True)), action])


@click.command("run")
@click.argument("dag_id")
@click.option("--date", "date_", default=None, help="Logical date (default: now).")
@conf_option
@click.option(
    "--run-id", default=None, help="Idempotency key: a finished run with it runs nothing."
)
@click.option("--workers", type=click.IntRange(1), default=None)
@pass_app
def run(
    app: App,
    dag_id: str,
    date_: str | None,
    conf: dict,
    run_id: str | None,
    workers: int | None,
) -> None:
    """Trigger one run of DAG and execute it to completion, here, running only its own
    tasks. An unfinished run with the same --run-id (interrupted, cleared) is resumed."""
    spec = app.spec(dag_id)
    manual = ManualRun.of(spec, conf, date_, run_id)
    row, created = manual.record(app)
    if not created:
        if row.state in (RunState.SUCCESS, RunState.FAILED):
            click.echo(f"run {row.run_id} already exists ({row.state}); nothing to do")
            print_run(app, row)
            return
        click.echo(f"run {row.run_id} of {dag_id} exists ({row.state}): resuming it", err=True)
    else:
        click.echo(f"run {row.run_id} of {dag_id} at {iso(row.logical_date)}", err=True)
    if row.not_before is not None and row.not_before > datetime.now(UTC):
        click.echo(f"it starts at {iso(row.not_before)} (trigger --at): waiting", err=True)
    final = _execute_runs(app, spec, [row.id], workers)
    print_run(app, final)
    if final.state != RunState.SUCCESS:
        raise click.exceptions.Exit(1)


#: Whole-string matches only (``fullmatch``): ``$`` would also accept a final newline.
RUN_ID = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.:+-]{1,250}")


@dataclass(frozen=True)
class ManualRun:
    """A manual run as ``trigger`` and ``run`` record it: checked before anything is
    written (key, conf against the DAG's params, dates), so bad input makes no run."""

    spec: DagSpec
    run_id: str
    interval: DataInterval
    conf: dict
    start_at: datetime | None = None

    @classmethod
    def of(
        cls,
        spec: DagSpec,
        conf: dict,
        date_: str | None,
        run_id: str | None,
        start_at: datetime | None = None,
    ) -> ManualRun:
        if run_id is not None and not RUN_ID.fullmatch(run_id):
            raise UsageError(f"--run-id {run_id!r}: use 1-250 letters, digits and '_.:+-'")
        params.resolve(spec.params, conf)
        interval = _manual_interval(spec, date_)
        key = run_id or runs.run_id_for(RunType.MANUAL, interval.start)
        return cls(spec, key, interval, conf, start_at)

    def record(self, app: App) -> tuple[run_reads.RunRow, bool]:
        """Create the run (audited) unless its key exists; (its row, created). Under the
        DAG lock, so two processes recording one key make one run."""
        dag_id = self.spec.dag_id
        with app.store.write() as conn:
            now = app.store.now(conn)
            runs.lock_dag(conn, dag_id)
            pk, created = runs.create_manual_run(
                conn, self.spec, self.interval, self.run_id, now, self.conf, self.start_at
            )
            if created:
                audit.record(
                    app.store,
                    conn,
                    "trigger",
                    dag_id,
                    self.run_id,
                    logical_date=self.interval.start,
                    conf=self.conf,
                    start_at=self.start_at,
                )
            return run_reads.run_by_pk(conn, pk), created


def _manual_interval(spec: DagSpec, value: str | None) -> DataInterval:
    """A manual run's interval: the scheduled one at ``--date`` when there is one; now
    (to the microsecond, so two triggers a moment apart are two runs) without it."""
    if value is None:
        now = datetime.now(UTC)
        return DataInterval(now, now)
    logical = resolve_date(spec, value)
    scheduled = next(iter(spec.timetable.intervals(logical, logical)), None)
    return scheduled or DataInterval(logical, logical)


def _execute_runs(app: App, spec: DagSpec, run_pks: list[int], workers: int | None):
    app.store.ride_out_outages()
    driver = RunDriver(app.store, spec, run_pks, workers=workers)
    with stop_signals(driver.stop):
        result = driver.run()
    _echo_stuck(spec, result.stuck)
    with app.store.read() as conn:
        return run_reads.run_by_pk(conn, run_pks[0])


def spec_order(app: App, dag_id: str) -> list[str]:
    """The DAG's task ids in its spec's (topological) order: how runs list their tasks."""
    return [t.task_id for t in app.spec(dag_id).tasks]


def print_run(app: App, run_row: run_reads.RunRow) -> None:
    """A run's state and its task instances, as a table."""
    with app.store.read() as conn:
        tasks = task_reads.task_instances(conn, [run_row.id], spec_order(app, run_row.dag_id))
    click.echo(f"run {run_row.run_id}: {run_row.state} ({fmt_seconds(run_row.duration)})")
    mapped = any(t.map_index >= 0 for t in tasks)
    echo_table(
        ["task_id", *(["index"] if mapped else []), "state", "try", "duration", "error"],
        [
            [
                t.task_id,
                *([t.map_index if t.map_index >= 0 else ""] if mapped else []),
                t.state,
                t.try_number,
                fmt_seconds(t.duration),
                t.last_error or "",
            ]
            for t in tasks
        ],
    )


@click.command("clear")
@click.argument("dag_id")
@click.option("--start", "-s", default=None, help="First date (with --end).")
@click.option("--end", "-e", default=None, help="Last date, inclusive (a date = whole day).")
@click.option(
    "--run-id", default=None, help="The one run to clear (a manual run's key), instead of dates."
)
@click.option("--tasks", "pattern", default=None, help="Regex on task ids.")
@click.option("--downstream", is_flag=True, help="Also clear everything downstream.")
@click.option("--failed-only", is_flag=True, help="Only failed and upstream-failed tasks.")
@click.option(
    "--map-index",
    type=click.IntRange(0),
    default=None,
    help="Only this index of the chosen mapped tasks.",
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_app
def clear(
    app: App,
    dag_id: str,
    start: str | None,
    end: str | None,
    run_id: str | None,
    pattern: str | None,
    downstream: bool,
    failed_only: bool,
    map_index: int | None,
    yes: bool,
) -> None:
    """Reset task instances so they run again (of the runs with logical dates from --start
    to --end, or of the run --run-id names), and those external task markers among them
    point at."""
    if (start is None) != (end is None) or (start is None) == (run_id is None):
        raise UsageError("give either --start and --end, or --run-id")
    spec = app.spec(dag_id)
    span = None if start is None or end is None else cli_range(spec, start, end)
    chosen = _matching_tasks(spec, pattern, downstream)
    with app.store.read() as conn:
        if span is None:
            chosen_runs = [pick_run(conn, spec, run_id, None)]
        else:
            chosen_runs = run_reads.runs_between(conn, dag_id, *span)
        tis = task_reads.task_instances(conn, [r.id for r in chosen_runs])
    failed = {TaskState.FAILED.value, TaskState.UPSTREAM_FAILED.value}
    # the instances CLEAR_TASK_INDEX picks: that index of mapped tasks, unmapped ones whole
    tis = [t for t in tis if map_index is None or t.map_index in (map_index, -1)]
    selection: dict[int, set[str]] = {}
    for t in tis:
        if t.task_id in chosen and not (failed_only and t.state not in failed):
            selection.setdefault(t.run_pk, set()).add(t.task_id)
    if spec.setup_ids:  # clear_runs clears their setups and teardowns with them
        selection = {pk: with_setups_and_teardowns(spec, ids) for pk, ids in selection.items()}
    count = sum(t.task_id in selection.get(t.run_pk, ()) for t in tis)
    if not selection:
        click.echo("nothing to clear")
        return
    from dagrun.runtime import markers  # what clear needs, not run or backfill
    from dagrun.store import operator_actions

    with app.store.read() as conn:  # what external task markers among them point at
        followed = markers.follow(conn, spec, selection, failed_only=failed_only)
    also = "".join(f", {f.count} of {f.spec.dag_id} (marked)" for f in followed)
    if not yes:
        click.confirm(
            f"clear {count} task instance(s) in {len(selection)} run(s) of {dag_id}{also}?",
            abort=True,
        )
    with app.store.write() as conn:
        now = app.store.now(conn)
        for locked in sorted({dag_id, *(f.spec.dag_id for f in followed)}):
            runs.lock_dag(conn, locked)
        operator_actions.clear_runs(conn, spec, selection, now, map_index)
        audit.record(
            app.store,
            conn,
            "clear",
            dag_id,
            run_id,
            start=span[0] if span else None,
            end=span[1] if span else None,
            pattern=pattern,
            downstream=downstream,
            failed_only=failed_only,
            map_index=map_index,
            tasks=count,
        )
        for f in followed:
            operator_actions.clear_runs(conn, f.spec, f.selection, now)
            audit.record(app.store, conn, "clear", f.spec.dag_id, marked_by=dag_id, tasks=f.count)
    run_ids = [r.run_id for r in chosen_runs if r.id in selection]
    click.echo(
        f"cleared {count} task instance(s) in {len(selection)} run(s){also}; "
        + _who_reruns(spec, run_ids)
    )


def _who_reruns(spec: DagSpec, run_ids: list[str]) -> str:
    """What runs cleared tasks again: backfill fills scheduled dates, so a manual-only DAG
    (schedule=None) has nothing to backfill and its runs are resumed by key instead."""
    if spec.timetable.schedulable:
        return "the scheduler (or `dagrun backfill`) will run them again"
    command = f"dagrun run {spec.dag_id} --run-id"
    if len(run_ids) == 1:
        return f"the scheduler will run them again (or `{command} {run_ids[0]}`)"
    shown = ", ".join(run_ids[:3]) + (", ..." if len(run_ids) > 3 else "")
    return f"the scheduler will run them again (or `{command} RUN_ID` for each run: {shown})"


def _matching_tasks(spec: DagSpec, pattern: str | None, downstream: bool) -> set[str]:
    if pattern is None:
        return set(spec.task_map)
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"bad --tasks regex {pattern!r}: {exc}") from None
    chosen = {t for t in spec.task_map if regex.search(t)}
    if not chosen:
        raise UsageError(f"--tasks {pattern!r} matches no task of '{spec.dag_id}'")
    return spec.descendants(chosen) if downstream else chosen


COMMANDS = [backfill, run, clear]
