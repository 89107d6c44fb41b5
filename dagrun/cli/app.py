"""What every command shares: the dags folder, the store (opened lazily), output helpers."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import click

from dagrun.errors import UsageError
from dagrun.timing.instants import parse_cli_instant, parse_cli_range

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from dagrun.parsing.spec import DagSpec
    from dagrun.runtime.dag_sync import SyncReport
    from dagrun.store import Store
    from dagrun.store.run_reads import RunRow


class App:
    """The per-invocation context: opens the store on first use and syncs DAG files once.

    The store and the parser are imported on first use too: ``--help``, ``--version`` and
    commands that fail on their arguments never pay for SQLAlchemy.
    """

    def __init__(self, dags_folder: str, db_url: str | None, verbose: bool):
        self.dags_folder = dags_folder
        self.db_url = db_url
        self.verbose = verbose
        self._store: Store | None = None
        self._synced: SyncReport | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            from dagrun.store import Store

            self._store = Store(self.db_url, only_home_folder=True, direct=True)
        return self._store

    def service_store(self) -> Store:
        """The store of a long-running command (scheduler, worker, web): it waits for a
        database that is away at start, and rides out later outages."""
        if self._store is None:
            from dagrun.store import Store

            self._store = Store.when_available(self.db_url, only_home_folder=True, direct=True)
        else:
            self._store.ride_out_outages()
        return self._store

    @property
    def asked_folder(self) -> str:
        """The dags folder this command was given (``--dags-folder``, env, or ./dags)."""
        from dagrun.runtime.dag_sync import dags_folder

        return dags_folder(self.dags_folder)

    @property
    def folder(self) -> str:
        """The dags folder the store serves, which may not be the one asked for."""
        return self.sync().served or self.asked_folder

    def sync(self) -> SyncReport:
        """Bring the registry up to date with the store's dags folder (changed files only);
        where that is not the folder asked for, say so once."""
        if self._synced is None:
            from dagrun.runtime.dag_sync import sync_dags

            self._synced = sync_dags(self.store, self.asked_folder)
            if self._synced.folder and self._synced.folder.note:
                click.echo(f"note: {self._synced.folder.note}", err=True)
        return self._synced

    def spec(self, dag_id: str) -> DagSpec:
        """The DAG's spec after a sync of the dags folder; ``DagNotFound`` names the folder
        the store serves, where the DAG's file would have to be."""
        from dagrun.errors import DagNotFound
        from dagrun.store import dag_reads

        self.sync()
        with self.store.read() as conn:
            try:
                return dag_reads.get_dag(conn, dag_id).spec
            except DagNotFound as exc:
                raise DagNotFound(dag_id, self.folder) from exc

    def close(self) -> None:
        if self._store is not None:
            self._store.dispose()


pass_app = click.make_pass_decorator(App)
log = logging.getLogger("dagrun.cli")


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, default=str))


def echo_table(headers: list[str], rows: list[list[Any]]) -> None:
    """A plain aligned table: readable in a terminal, stable for grep."""
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    click.echo(line.rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def resolve_date(spec, value: str) -> datetime:
    """A command-line date: a date-only value picks the scheduled logical date on that local
    day (local midnight for an unscheduled DAG); a full timestamp is taken as given."""
    tt = spec.timetable
    day = _date_only(value)
    try:
        if day is None:
            return parse_cli_instant(value, tt.tz)
        found = tt.logical_date_on_day(day) if tt.schedulable else None
        return found or parse_cli_instant(value, tt.tz)
    except OverflowError:
        raise UsageError(out_of_range("date", value, spec)) from None


def pick_run(conn: Connection, spec: DagSpec, run_id: str | None, date: str | None) -> RunRow:
    """The run a command names: by RUN_ID or by ``--date`` (exactly one of them)."""
    from dagrun.store import run_reads

    if bool(run_id) == bool(date):
        raise UsageError("give either RUN_ID or --date")
    if run_id:
        return run_reads.run_by_id(conn, spec.dag_id, run_id)
    assert date is not None  # exactly one of the two, checked above
    return run_reads.run_by_date(conn, spec.dag_id, resolve_date(spec, date))


#: The dates every timezone can turn into UTC instants (and a date-only end into the end of
#: its day) without leaving the years 1-9999 that ``datetime`` holds.
SUPPORTED_DATES = "0001-01-02 to 9999-12-30"


def cli_range(spec, start: str, end: str) -> tuple[datetime, datetime]:
    """``--start``/``--end`` in UTC (``parse_cli_range``); a date that ``datetime`` cannot hold
    once in UTC (0001-01-01 east of Greenwich, the day after 9999-12-31) is bad input, not a
    crash."""
    tz = spec.timetable.tz
    try:
        return parse_cli_range(start, end, tz)
    except OverflowError:
        try:
            parse_cli_instant(start, tz)
        except OverflowError:
            raise UsageError(out_of_range("--start", start, spec)) from None
        raise UsageError(out_of_range("--end", end, spec)) from None


def out_of_range(what: str, value: str, spec) -> str:
    """The message for a date ``datetime`` cannot hold, with what the DAG can use instead."""
    tt = spec.timetable
    starts = (
        f"; DAG '{spec.dag_id}' starts at {fmt_local(tt.start, tt.tz)}"
        if tt.start is not None
        else ""
    )
    return f"{what} {value} is out of range (dates from {SUPPORTED_DATES}){starts}"


def _date_only(value: str) -> date | None:
    try:
        return date.fromisoformat(value) if len(value) == 10 else None
    except ValueError:
        return None


@contextmanager
def stop_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM and SIGINT call ``stop`` (a clean shutdown) instead of killing the process."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    seen: list[int] = []

    def handler(signum, _frame) -> None:
        name = signal.Signals(signum).name
        if seen:
            log.warning("%s again: releasing running attempts now", name)
        else:
            log.warning("%s: stopping cleanly (again to stop at once)...", name)
        seen.append(signum)
        stop()

    for s in previous:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def fmt_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def fmt_local(instant: datetime, tz: ZoneInfo, seconds: bool = False) -> str:
    """An instant as wall-clock time in the DAG's zone, as every table shows logical dates."""
    return instant.astimezone(tz).strftime(f"%Y-%m-%d %H:%M{':%S' if seconds else ''} %Z")


def within_a_minute(instants: Iterable[datetime]) -> bool:
    """Whether two of these are less than a minute apart: then minutes alone could show two
    logical dates as one, so a table shows seconds too."""
    ordered = sorted(instants)
    return any(later - earlier < timedelta(minutes=1) for earlier, later in pairwise(ordered))
