"""``dagrun trigger``, ``runs list|show|cancel|mark`` and ``audit``: operating runs.

Runs are made and changed like jobs in a job service: triggered (now, or delayed to an
instant) and left to the scheduler, looked at, cancelled, marked by hand. Every change is
audited in the transaction that makes it (``store.audit``); the state changes themselves are
``store.manual``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import click

from dagrun.cli.app import (
    App,
    echo_json,
    echo_table,
    fmt_local,
    fmt_seconds,
    pass_app,
    pick_run,
    within_a_minute,
)
from dagrun.cli.backfill import ManualRun, print_run
from dagrun.cli.options import conf_option
from dagrun.errors import UsageError
from dagrun.parsing.spec import DagSpec
from dagrun.states import RunState
from dagrun.store import audit, dag_reads, operator_actions, run_reads, task_reads
from dagrun.timing.instants import iso, parse_cli_instant, parse_duration

if TYPE_CHECKING:
    from sqlalchemy import Connection

TRIGGER_EXAMPLES = """\b
Examples:
  dagrun trigger nightly_sales
  dagrun trigger nightly_sales --conf '{"region": "EU"}' --run-id eu-rerun-42
  dagrun trigger nightly_sales --date 2026-01-05 --at 2026-01-06T02:00
  dagrun trigger nightly_sales --conf @conf.json
  dagrun trigger nightly_sales --at +15m --json
"""


@click.command("trigger", epilog=TRIGGER_EXAMPLES)
@click.argument("dag_id")
@conf_option
@click.option("--date", "date_", default=None, help="Logical date (default: now).")
@click.option(
    "--at",
    "at",
    default=None,
    help="Start no earlier than this instant (in the DAG's timezone unless it has an "
    "offset), or +DURATION from now: a one-time delayed job.",
)
@click.option("--run-id", default=None, help="Idempotency key: an existing key makes nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@pass_app
def trigger(
    app: App,
    dag_id: str,
    conf: dict,
    date_: str | None,
    at: str | None,
    run_id: str | None,
    as_json: bool,
) -> None:
    """Record a manual run of DAG and return at once: the scheduler (or `dagrun worker`
    beside one) runs it. Nothing of it starts before --at."""
    spec = app.spec(dag_id)
    start_at = _start_at(spec, at, app.store.now())
    row, created = ManualRun.of(spec, conf, date_, run_id, start_at).record(app)
    if as_json:
        echo_json(
            {
                "run_id": row.run_id,
                "logical_date": iso(row.logical_date),
                "state": row.state,
                "created": created,
            }
        )
    elif created:
        when = f"; starts at {iso(start_at)}" if start_at else ""
        click.echo(f"triggered run {row.run_id} of {dag_id} at {iso(row.logical_date)}{when}")
    else:
        click.echo(f"run {row.run_id} of {dag_id} exists ({row.state}); nothing triggered")
    _warn_if_paused(app, dag_id)


def _start_at(spec: DagSpec, value: str | None, now: datetime) -> datetime | None:
    """``--at`` in UTC: an instant, or ``+DURATION`` from ``now`` (the store's clock, which
    decides when the run starts); one already past starts the run now (and says so)."""
    if value is None:
        return None
    if value.startswith("+"):
        try:
            return now + parse_duration(value[1:])
        except Exception as exc:
            raise UsageError(f"--at {value}: {exc}") from None
    instant = parse_cli_instant(value, spec.timetable.tz, what="--at")
    if instant <= now:
        click.echo(f"--at {value} is in the past: the run starts now", err=True)
        return None
    return instant


def _warn_if_paused(app: App, dag_id: str) -> None:
    with app.store.read() as conn:
        paused = dag_reads.get_dag(conn, dag_id).is_paused
    if paused:
        click.echo(
            f"DAG '{dag_id}' is paused: its runs wait until `dagrun dags unpause {dag_id}`",
            err=True,
        )


@click.group("runs")
def runs_group() -> None:
    """List, inspect, cancel and mark DAG runs."""


@runs_group.command("list")
@click.argument("dag_id")
@click.option("--state", type=click.Choice([s.value for s in RunState]), default=None)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def runs_list(app: App, dag_id: str, state: str | None, as_json: bool) -> None:
    """Runs of DAG, oldest first, with states and durations."""
    spec = app.spec(dag_id)
    with app.store.read() as conn:
        rows = run_reads.runs(conn, dag_id, state=state)
    if as_json:
        echo_json([run_json(r) for r in rows])
        return
    tz = spec.timetable.tz
    seconds = within_a_minute(r.logical_date for r in rows)
    echo_table(
        ["run_id", "logical date (local)", "type", "state", "duration"],
        [
            [
                r.run_id,
                fmt_local(r.logical_date, tz, seconds),
                r.run_type,
                r.state,
                fmt_seconds(r.duration),
            ]
            for r in rows
        ],
    )


def run_json(r: run_reads.RunRow) -> dict:
    """A run as ``runs list --json`` and ``runs show --json`` print it."""
    return {
        "run_id": r.run_id,
        "logical_date": iso(r.logical_date),
        "data_interval_start": iso(r.data_interval_start),
        "data_interval_end": iso(r.data_interval_end),
        "state": r.state,
        "run_type": r.run_type,
        "start_date": iso(r.start_date),
        "end_date": iso(r.end_date),
        "duration": r.duration,
        "conf": r.conf,
    }


@runs_group.command("state")
@click.argument("dag_id")
@click.argument("run_id", required=False)
@click.option("--date", "date_", default=None, help="Pick the run by logical date instead.")
@pass_app
def runs_state(app: App, dag_id: str, run_id: str | None, date_: str | None) -> None:
    """Print one run's state (Airflow's ``dags state DAG DATE``)."""
    spec = app.spec(dag_id)
    with app.store.read() as conn:
        click.echo(pick_run(conn, spec, run_id, date_).state)


@runs_group.command("show")
@click.argument("dag_id")
@click.argument("run_id", required=False)
@click.option("--date", "date_", default=None, help="Pick the run by logical date instead.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def runs_show(app: App, dag_id: str, run_id: str | None, date_: str | None, as_json: bool) -> None:
    """One run, its conf and its task instances."""
    spec = app.spec(dag_id)
    with app.store.read() as conn:
        row = pick_run(conn, spec, run_id, date_)
        tasks = task_reads.task_instances(conn, [row.id], [t.task_id for t in spec.tasks])
    if as_json:
        echo_json(
            {
                **run_json(row),
                "tasks": [
                    {
                        "task_id": t.task_id,
                        "map_index": t.map_index,
                        "state": t.state,
                        "try_number": t.try_number,
                        "duration": t.duration,
                        "error": t.last_error,
                    }
                    for t in tasks
                ],
            }
        )
        return
    print_run(app, row)


@runs_group.command("cancel")
@click.argument("dag_id")
@click.argument("run_id", required=False)
@click.option("--date", "date_", default=None, help="Pick the run by logical date instead.")
@pass_app
def runs_cancel(app: App, dag_id: str, run_id: str | None, date_: str | None) -> None:
    """Cancel a run: it becomes failed, its running attempts are stopped (their processes
    terminated) and recorded failed with the error `cancelled`, its unstarted tasks are
    skipped."""
    row, change = _change_run(app, dag_id, run_id, date_, "cancel", operator_actions.cancel_run)
    if not change.changed:
        click.echo(f"run {row.run_id} already ended ({change.before}); nothing to cancel")
        return
    click.echo(
        f"cancelled run {row.run_id} of {dag_id}: {change.stopped} running attempt(s) "
        f"stopped, {change.tasks - change.stopped} unstarted task(s) skipped"
    )


@runs_group.command("mark")
@click.argument("dag_id")
@click.argument("run_id", required=False)
@click.option("--date", "date_", default=None, help="Pick the run by logical date instead.")
@click.option(
    "--state", required=True, type=click.Choice([RunState.SUCCESS.value, RunState.FAILED.value])
)
@pass_app
def runs_mark(app: App, dag_id: str, run_id: str | None, date_: str | None, state: str) -> None:
    """Set a run's state by hand, as Airflow's mark success / mark failed: success makes
    every unfinished or failed task succeed; failed fails the running tasks and the sensors
    between pokes and skips the tasks not started. Running attempts are stopped."""
    wanted, reason = RunState(state), f"run marked {state} by hand"

    def mark(
        conn: Connection, spec: DagSpec, run_pk: int, now: datetime
    ) -> operator_actions.Change:
        return operator_actions.mark_run(conn, spec, run_pk, wanted, reason, now)

    row, change = _change_run(app, dag_id, run_id, date_, "mark_run", mark, state=state)
    if not change.changed:
        click.echo(f"run {row.run_id} is {state} already; nothing changed")
        return
    click.echo(
        f"marked run {row.run_id} of {dag_id} {state} (was {change.before}); "
        f"{change.tasks} task instance(s) set, {change.stopped} running attempt(s) stopped"
    )


def _change_run(
    app: App,
    dag_id: str,
    run_id: str | None,
    date_: str | None,
    action: str,
    apply: Callable[[Connection, DagSpec, int, datetime], operator_actions.Change],
    **detail: object,
) -> tuple[run_reads.RunRow, operator_actions.Change]:
    """Pick the run, ``apply`` a hand change to it and audit what changed, in one
    transaction; (the run as it was, the change)."""
    spec = app.spec(dag_id)
    with app.store.write() as conn:
        row = pick_run(conn, spec, run_id, date_)
        change = apply(conn, spec, row.id, app.store.now(conn))
        if change.changed:
            audit.record(app.store, conn, action, dag_id, row.run_id, **detail, **change.detail())
    return row, change


@click.command("audit")
@click.argument("dag_id", required=False)
@click.option("--limit", type=click.IntRange(1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def audit_log(app: App, dag_id: str | None, limit: int, as_json: bool) -> None:
    """Operator actions (trigger, cancel, mark, clear, backfill, pause...), newest first."""
    if dag_id is not None:
        app.spec(dag_id)
    with app.store.read() as conn:
        entries = audit.entries(conn, dag_id, limit)
    if as_json:
        echo_json([e.to_json() for e in entries])
        return
    if not entries:
        click.echo("no audited actions" + (f" for {dag_id}" if dag_id else ""))
        return
    echo_table(
        ["at (UTC)", "actor", "action", "dag_id", "run_id", "detail"],
        [
            [
                e.at.strftime("%Y-%m-%d %H:%M:%SZ"),
                e.actor or "",
                e.action,
                e.dag_id or "",
                e.run_id or "",
                _detail(e.detail),
            ]
            for e in entries
        ],
    )


def _detail(detail: dict) -> str:
    """An entry's detail on one line: ``key=value`` for each value that says something."""
    shown = {k: v for k, v in detail.items() if v not in (None, {}, [], False)}
    return ", ".join(
        f"{k}={json.dumps(v) if isinstance(v, dict | list) else v}" for k, v in shown.items()
    )


COMMANDS = [trigger, runs_group, audit_log]
