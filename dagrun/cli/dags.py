"""``dagrun dags ...``: list, show, next, errors, check-airflow, pause, unpause."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dagrun.cli.app import App, echo_json, echo_table, fmt_local, out_of_range, pass_app
from dagrun.errors import UsageError
from dagrun.parsing.graph_export import RENDERERS
from dagrun.store import dag_reads, run_reads
from dagrun.timing.instants import TICK, iso, parse_cli_instant

if TYPE_CHECKING:
    from dagrun.airflow import checks
    from dagrun.parsing.spec import DagSpec, TaskSpec
    from dagrun.timing.timetable import Occurrence


@click.group()
def dags() -> None:
    """Inspect and control the DAGs found in the dags folder."""


@dags.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def list_dags(app: App, as_json: bool) -> None:
    """DAGs found, with schedule, timezone, paused flag, next run, and import errors."""
    app.sync()
    with app.store.read() as conn:
        rows = dag_reads.active_dags(conn)
        errors = dag_reads.import_errors(conn)
        latest = run_reads.latest_runs(conn, [r.dag_id for r in rows])
    next_dates = {r.dag_id: _next_logical_date(r, latest.get(r.dag_id)) for r in rows}
    if as_json:
        echo_json([_dag_json(r, next_dates[r.dag_id]) for r in rows])
        return
    if rows:
        headers = ["dag_id", "schedule", "timezone", "paused", "next run (local)", "file"]
        broken = any(r.error for r in rows)
        echo_table(
            headers + (["import error"] if broken else []),
            [
                _dag_line(r, app.folder, next_dates[r.dag_id])
                + ([_import_error(r)] if broken else [])
                for r in rows
            ],
        )
    else:
        click.echo(f"no DAGs found in {app.folder}")
    if errors:
        click.echo(f"{len(errors)} DAG file(s) failed to load; see `dagrun dags errors`", err=True)


def _dag_line(r: dag_reads.DagRow, folder: str, next_date: datetime | None) -> list[str]:
    return [
        r.dag_id,
        r.spec.schedule_text,
        r.spec.timezone,
        _yes(r.is_paused),
        "-" if next_date is None else fmt_local(next_date, r.spec.timetable.tz),
        _short(r.fileloc, folder),
    ]


def _import_error(r: dag_reads.DagRow) -> str:
    """A DAG whose file fails now runs as last parsed: say so beside it."""
    return f"file fails, runs as last parsed: {r.error}" if r.error else ""


def _dag_json(r: dag_reads.DagRow, next_date: datetime | None) -> dict:
    return {
        "dag_id": r.dag_id,
        "schedule": r.spec.schedule_text,
        "timezone": r.spec.timezone,
        "paused": r.is_paused,
        "fileloc": r.fileloc,
        "next_logical_date": iso(next_date),
        "tags": list(r.spec.tags),
        "tasks": len(r.spec.tasks),
        "import_error": r.error,
    }


def _next_logical_date(r: dag_reads.DagRow, latest_run: datetime | None) -> datetime | None:
    """The next logical date the scheduler will really create (see ``next_interval``), as
    Airflow's "next dagrun": ``dags list`` shows it and ``dags next`` starts from it."""
    upcoming = r.spec.next_interval(r.cursor, datetime.now(UTC), latest_run)
    return upcoming.start if upcoming else None


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _short(path: str, folder: str) -> str:
    return path[len(folder) + 1 :] if path.startswith(folder + "/") else path


@dags.command("show")
@click.argument("dag_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", *RENDERERS]),
    default="text",
    show_default=True,
    help="A table, or the graph as JSON, Graphviz DOT or a Mermaid flowchart.",
)
@pass_app
def show_dag(app: App, dag_id: str, fmt: str) -> None:
    """Tasks in topological order with their upstreams (and groups), or the graph drawn."""
    app.sync()
    with app.store.read() as conn:
        row = dag_reads.get_dag(conn, dag_id)
    if fmt == "text":
        _show_table(row)
    else:
        click.echo(RENDERERS[fmt](row.spec))


def _show_table(row: dag_reads.DagRow) -> None:
    spec = row.spec
    click.echo(f"DAG {spec.dag_id}  schedule {spec.schedule_text}  timezone {spec.timezone}")
    click.echo(f"file {row.fileloc}")
    headers = ["#", "task_id", "group", "kind", "upstream", "trigger_rule", "retries"]
    rows = [
        [i, _marked(t), t.group or "-", t.kind, _upstream(spec, t), t.trigger_rule, t.retries]
        for i, t in enumerate(spec.tasks, 1)
    ]
    if not any(t.group for t in spec.tasks):  # a DAG without groups keeps its old table
        headers.remove("group")
        for line in rows:
            del line[2]
    echo_table(headers, rows)


def _upstream(spec: DagSpec, task: TaskSpec) -> str:
    """A task's upstream ids, each with its edge's label in parentheses where it has one."""
    labels = spec.labels
    shown = [
        f"{up} ({labels[up, task.task_id]})" if (up, task.task_id) in labels else up
        for up in task.upstream
    ]
    return _names(tuple(shown))


def _marked(task: TaskSpec) -> str:
    """A task's id, with ``(setup)`` or ``(teardown)`` after it for those."""
    role = " (setup)" if task.is_setup else " (teardown)" if task.is_teardown else ""
    return task.task_id + role


def _names(task_ids: tuple[str, ...]) -> str:
    return ", ".join(task_ids) or "-"


@dags.command("next")
@click.argument("dag_id")
@click.option("-n", "count", default=5, show_default=True, type=click.IntRange(1, 10000))
@click.option(
    "--after",
    default=None,
    help="Instant to start after (default: from the next run the scheduler will create, "
    "as `dags list` shows it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@pass_app
def next_runs(app: App, dag_id: str, count: int, after: str | None, as_json: bool) -> None:
    """The next N runs, with due times, DST changes marked: from the next run the
    scheduler will create (given catchup and the runs made), or strictly after --after."""
    app.sync()
    with app.store.read() as conn:
        row = dag_reads.get_dag(conn, dag_id)
        latest = run_reads.latest_runs(conn, [dag_id]).get(dag_id)
    spec = row.spec
    tt = spec.timetable
    if not after:
        upcoming = _next_logical_date(row, latest)
        occurrences = [] if upcoming is None else tt.occurrences(upcoming - TICK, count)
    else:
        occurrences = _occurrences_after(spec, after, count)
    if as_json:
        echo_json(
            [
                {
                    "logical_date": iso(o.interval.start),
                    "data_interval_end": iso(o.interval.end),
                    "local_logical_date": o.interval.start.astimezone(tt.tz).isoformat(),
                    "local_data_interval_end": o.interval.end.astimezone(tt.tz).isoformat(),
                    "dst_note": o.dst_note,
                }
                for o in occurrences
            ]
        )
        return
    if not occurrences:
        click.echo(f"DAG {dag_id} has no upcoming runs ({spec.schedule_text})")
        return
    echo_table(
        ["logical date (local)", "logical date (UTC)", "due (local)", "due (UTC)", "note"],
        [
            [
                fmt_local(o.interval.start, tt.tz),
                _utc(o.interval.start),
                fmt_local(o.interval.end, tt.tz),
                _utc(o.interval.end),
                o.dst_note or "",
            ]
            for o in occurrences
        ],
    )


def _occurrences_after(spec: DagSpec, after: str, count: int) -> list[Occurrence]:
    """The next ``count`` runs with logical dates strictly after the instant ``--after``."""
    tt = spec.timetable
    try:
        start = parse_cli_instant(after, tt.tz)
    except OverflowError:
        raise UsageError(out_of_range("--after", after, spec)) from None
    try:
        return tt.occurrences(start, count)
    except OverflowError:  # only an --after within days of 9999-12-31 gets here
        raise UsageError(
            f"--after {after}: the runs that follow fall past 9999-12-31, the last date "
            "dagrun can handle"
        ) from None


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ")


@dags.command("errors")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option(
    "--warnings",
    "with_warnings",
    is_flag=True,
    help="Also list each file's warnings (arguments accepted but not acted on), with their "
    'lines; with --json the document becomes {"errors": [...], "warnings": [{"file", "line", '
    '"message"}]}. Warnings never change the exit code.',
)
@pass_app
def dag_errors(app: App, as_json: bool, with_warnings: bool) -> None:
    """Every DAG file that failed to load, with the reason; exits 1 when there is one."""
    app.sync()
    with app.store.read() as conn:
        errors = dag_reads.import_errors(conn)
        warned = dag_reads.file_warnings(conn) if with_warnings else []
    listed = [{"file": e.path, "error": e.error, "line": e.error_line} for e in errors]
    if as_json and with_warnings:
        echo_json({"errors": listed, "warnings": _warnings_json(warned)})
    elif as_json:
        echo_json(listed)
    else:
        for e in errors:
            where = f"{e.path}:{e.error_line}" if e.error_line else e.path
            click.echo(f"{where}: {e.error}")
        if not errors:
            click.echo("no import errors")
        if with_warnings:
            _echo_warnings(warned)
    if errors:
        raise click.exceptions.Exit(1)


def _warnings_json(warned: list[dag_reads.FileWarnings]) -> list[dict]:
    return [
        {"file": f.path, "line": w.line, "message": w.message} for f in warned for w in f.warnings
    ]


def _echo_warnings(warned: list[dag_reads.FileWarnings]) -> None:
    """A line per warning, as errors are printed: ``path:line: warning: message``."""
    for f in warned:
        for w in f.warnings:
            where = f"{f.path}:{w.line}" if w.line else f.path
            click.echo(f"{where}: warning: {w.message}")
    if not warned:
        click.echo("no warnings")


@dags.command("check-airflow")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON document: [{"file", "ok", "unsupported": [{"name", "line", '
    '"reason"}], "warnings": [{"name", "line", "reason"}]}], a warning shaped as an '
    "unsupported entry.",
)
def check_airflow(paths: tuple[str, ...], as_json: bool) -> None:
    """Read Airflow DAG files without running them and say, per file, whether dagrun runs
    it unchanged, and where not, each unsupported name or argument with its line (PATH: a
    .py file, or a folder of them). Warnings name what dagrun accepts without acting on
    (owner, sla, queue ...; an email without DAGRUN_SMTP_HOST). Exits 1 when a file is not
    ok, 2 when a PATH does not exist."""
    from dagrun.airflow import checks, mail
    from dagrun.errors import NotifyError

    files = _python_files(paths)
    try:
        server = mail.server_configured()
    except NotifyError as exc:
        raise UsageError(str(exc)) from None
    reports = [checks.check_source(Path(f).read_bytes(), f, mail_server=server) for f in files]
    if as_json:
        echo_json([r.to_json() for r in reports])
    else:
        for report in reports:
            _echo_report(report)
        if len(reports) != 1:
            bad = sum(not r.ok for r in reports)
            click.echo(f"{len(reports)} files: {len(reports) - bad} ok, {bad} not ok")
    if any(not r.ok for r in reports):
        raise click.exceptions.Exit(1)


def _python_files(paths: tuple[str, ...]) -> list[str]:
    """The files named, and the ``.py`` files below each folder named (hidden folders and
    caches left out), in order; a path that does not exist is bad input."""
    found: list[str] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found += sorted(
                str(p)
                for p in path.rglob("*.py")
                if not any(part.startswith((".", "__")) for part in p.relative_to(path).parts)
            )
        elif path.exists():
            found.append(given)
        else:
            raise UsageError(f"{given}: no such file or folder")
    return found


def _echo_report(report: checks.FileReport) -> None:
    """``file: ok`` or ``file: not ok (...)``, then a line per finding as compilers print
    them: ``file:line: unsupported: name: reason``."""
    counts = []
    if report.unsupported:
        counts.append(f"{len(report.unsupported)} unsupported")
    if report.warnings:
        counts.append(f"{len(report.warnings)} warning{'s' if len(report.warnings) != 1 else ''}")
    status = "ok" if report.ok else "not ok"
    click.echo(f"{report.file}: {status}" + (f" ({', '.join(counts)})" if counts else ""))
    for kind, findings in (("unsupported", report.unsupported), ("warning", report.warnings)):
        for f in findings:
            click.echo(f"{report.file}:{f.line}: {kind}: {f.name}: {f.reason}")


def _set_paused(app: App, dag_id: str, paused: bool) -> None:
    from dagrun.store import audit, registry  # the writes only these two commands make

    app.sync()
    with app.store.write() as conn:
        registry.set_paused(conn, dag_id, paused)
        audit.record(app.store, conn, "pause" if paused else "unpause", dag_id)
    click.echo(f"DAG {dag_id} {'paused' if paused else 'unpaused'}")


@dags.command("pause")
@click.argument("dag_id")
@pass_app
def pause(app: App, dag_id: str) -> None:
    """Stop the scheduler from creating and starting runs of DAG."""
    _set_paused(app, dag_id, True)


@dags.command("unpause")
@click.argument("dag_id")
@pass_app
def unpause(app: App, dag_id: str) -> None:
    """Let the scheduler create and start runs of DAG again."""
    _set_paused(app, dag_id, False)


COMMANDS = [dags]
