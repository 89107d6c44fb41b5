"""Retention: finished history older than a cutoff is deleted (``dagrun db clean``).

The cutoff is an instant, or a wall-clock time (a naive ``datetime``: ``db clean --before
2026-01-01``) read in each DAG's own timezone for that DAG's runs, as every command reads a
date, and in UTC for audit rows and asset events (``cutoff_in``).

What goes: runs that ended (success or failed) with a logical date before the cutoff, with
their task instances, attempts, callbacks and partition-write records; audit rows from
before the cutoff; asset events from before it that a newer event of the same asset and
partition key has superseded; and the log segments no remaining attempt or callback points
into. What stays, whatever its age: a run that has not ended (waiting, queued, running), or
that a worker may still touch (a task instance queued, running or waiting to retry or to
poke again, a callback pending or running); and the latest event of every (asset, partition
key), the last record of a produced partition and what asset scheduling reads (``look``
only ever uses the latest event of a key; ``asset_consumed`` keeps its own copy of the
event id and fingerprint a run consumed).

Deleting finished history claims, leases and moves no state, so these statements live here,
named like the rest, and not in ``statements.py``, the catalogue of the concurrency story.
They still keep out of its way: runs are found by a read over the (dag_id, logical_date)
index, then each batch of ``BATCH_RUNS`` is checked again and deleted in one short write
transaction (on PostgreSQL the runs are locked with SKIP LOCKED, so a run someone holds is
passed over, never waited for).
Every statement a batch runs finds its rows through an index, so a batch costs the same on
years of history as on days. The audit log and asset events are walked by primary key.

Log files go after the commit of the rows that pointed at them, never before: a crash in
between leaves an orphan file, never a row naming a missing one. A segment holds the logs of
many attempts (``dagrun.store.logfiles``), so it goes only when no remaining attempt or callback
points into it, its writer has left it (the same process has opened a newer segment, or that
process is gone from this host) and it has not been written for ``QUIET_SECONDS`` (an
attempt's range is recorded a moment after its output: a group commit, an outage ridden out).
A day folder goes when it is empty and older than yesterday (a writer makes today's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dagrun.errors import StoreConflict
from dagrun.store import audit, logfiles, sql
from dagrun.store.engine import Store
from dagrun.timing.instants import get_zone, wall_to_utc

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/retention.py``).
Q = sql.Catalogue("dagrun.store.queries.retention", "retention.")

#: Runs deleted per transaction: short enough that a scheduler waits milliseconds for it.
BATCH_RUNS = 1000
#: A log segment written this recently may still get a recorded range: kept for a later clean.
QUIET_SECONDS = 15 * 60
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


@dataclass
class Tally:
    """What a clean deleted (or, for a dry run, would delete), and the log segments kept."""

    runs: int = 0
    task_instances: int = 0
    attempts: int = 0
    callbacks: int = 0
    partition_writes: int = 0
    asset_events: int = 0
    audit_rows: int = 0
    log_files: int = 0
    log_bytes: int = 0
    #: Segments of deleted attempts that still hold logs of kept ones.
    shared_segments: int = 0
    #: Segments a writer may still append to, or written too recently: a later clean takes them.
    open_segments: int = 0
    #: Log files the rows named that are not on this host.
    absent_files: int = 0

    def add(self, other: Tally) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_json(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# ---------------------------------------------------------------- statements


#: (tally field, count, delete): children first, so no row is left pointing at a deleted one.
_RUN_TABLES = [
    ("callbacks", Q.COUNT_CALLBACKS, Q.DELETE_CALLBACKS),
    ("partition_writes", Q.COUNT_WRITES, Q.DELETE_WRITES),
    ("attempts", Q.COUNT_ATTEMPTS, Q.DELETE_ATTEMPTS),
    ("task_instances", Q.COUNT_TASKS, Q.DELETE_TASKS),
    ("runs", Q.COUNT_RUNS, Q.DELETE_RUNS),
]


#: (tally field, the next ids to delete after ``b_after``, their count, delete by id).
_WALKS = [
    ("asset_events", Q.NEXT_ASSET_EVENTS, Q.COUNT_ASSET_EVENTS, Q.DELETE_ASSET_EVENTS),
    ("audit_rows", Q.NEXT_AUDIT_ROWS, Q.COUNT_AUDIT_ROWS, Q.DELETE_AUDIT_ROWS),
]


# ---------------------------------------------------------------- plan and clean


def plan(
    store: Store, before: datetime, *, batch: int = BATCH_RUNS, quiet: float = QUIET_SECONDS
) -> Tally:
    """What ``clean`` would delete now, deleting nothing (``--dry-run``, the confirmation)."""
    found = Tally()
    deleted_refs: Counter[str] = Counter()
    for pks in _batches(store, before, batch):
        with store.read() as conn:
            for name, count, _ in _RUN_TABLES:
                setattr(found, name, getattr(found, name) + sql.scalar(conn, count, _pks(pks)))
            deleted_refs.update(_log_refs(conn, pks))
    with store.read() as conn:
        for name, _, count, _ in _WALKS:
            setattr(found, name, sql.scalar(conn, count, {"b_before": cutoff_in(before, "UTC")}))
        if deleted_refs:
            remaining = _referenced(conn)
            remaining.subtract(deleted_refs)
    if deleted_refs:
        gone = {p for p in deleted_refs if remaining[p] <= 0}
        _remove_logs(gone, found, quiet=quiet, dry_run=True)
        found.shared_segments = sum(1 for p in deleted_refs if remaining[p] > 0)
    return found


def clean(
    store: Store,
    before: datetime,
    *,
    batch: int = BATCH_RUNS,
    quiet: float = QUIET_SECONDS,
    progress: Callable[[Tally], None] | None = None,
) -> Tally:
    """Delete what ``plan`` counts, a batch of runs per transaction (``progress`` hears of
    each), then the log files no row points into any more, then old audit rows and
    superseded asset events; the clean itself is the last audit row."""
    done = Tally()
    touched: set[str] = set()
    for pks in _batches(store, before, batch):
        freed, paths = _delete_runs(store, pks)
        done.add(freed)
        touched |= paths
        if progress is not None:
            progress(done)
    if touched:
        with store.read() as conn:
            remaining = _referenced(conn)
        _remove_logs({p for p in touched if remaining[p] <= 0}, done, quiet=quiet)
        done.shared_segments = sum(1 for p in touched if remaining[p] > 0)
    for name, next_ids, _, remove in _WALKS:
        setattr(done, name, _walk(store, next_ids, remove, before, batch))
    with store.write() as conn:
        audit.record(store, conn, "db_clean", None, None, before=before, **done.to_json())
    return done


def _batches(store: Store, before: datetime, batch: int) -> Iterator[list[int]]:
    """The candidate runs, ``batch`` at a time, DAG after DAG, oldest first in each; each
    read is a short transaction of its own (the next batch is read after the last one went)."""
    with store.read() as conn:
        dags = sql.tuples(conn, Q.DAGS)
    pending: list[int] = []
    for dag_id, zone in dags:
        after, after_id = _EARLIEST, 0
        while True:
            params = {
                "b_dag_id": dag_id,
                "b_before": cutoff_in(before, zone),
                "b_after": after,
                "b_after_id": after_id,
                "b_limit": batch - len(pending),
            }
            with store.read() as conn:
                found = sql.tuples(conn, Q.OLD_RUNS, params)
            pending.extend(pk for pk, _ in found)
            if len(pending) >= batch:
                yield pending
                pending = []
            if len(found) < params["b_limit"]:
                break
            after_id, after = found[-1]
    if pending:
        yield pending


def _delete_runs(store: Store, pks: list[int], tries: int = 3) -> tuple[Tally, set[str]]:
    """One transaction: lock the runs still finished and idle, note the log files their
    attempts and callbacks point into, delete their rows children first. A transaction that
    lost a race (a deadlock PostgreSQL broke) is tried again."""
    for attempt in range(tries):
        try:
            with store.write() as conn:
                kept = sql.scalars(conn, Q.LOCK_OLD_RUNS, _pks(pks))
                freed = Tally()
                if not kept:
                    return freed, set()
                paths = set(_log_refs(conn, kept))
                for name, _, remove in _RUN_TABLES:
                    setattr(freed, name, sql.execute(conn, remove, _pks(kept)).rowcount)
                return freed, paths
        except StoreConflict:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _walk(store: Store, next_ids: sql.Named, remove: sql.Named, before: datetime, batch: int):
    """Delete the old rows of a table ``batch`` at a time in id order; how many went."""
    before = cutoff_in(before, "UTC")
    after, deleted = 0, 0
    while True:
        params = {"b_after": after, "b_before": before, "b_limit": batch}
        with store.read() as conn:
            ids = sql.scalars(conn, next_ids, params)
        if not ids:
            return deleted
        with store.write() as conn:
            deleted += sql.execute(conn, remove, {"b_ids": ids, "b_before": before}).rowcount
        after = ids[-1]


def cutoff_in(before: datetime, zone: str) -> datetime:
    """The cutoff as an instant: ``before`` as given when it has an offset, else its
    wall-clock time in ``zone`` (a DAG's timezone for that DAG's runs, UTC for audit rows
    and asset events). A wall-clock time that falls outside what ``datetime`` holds in that
    zone is the first or the last instant there is."""
    if before.tzinfo is not None:
        return before.astimezone(UTC)
    try:
        return wall_to_utc(before, get_zone(zone))
    except OverflowError:
        return _EARLIEST if before.year == 1 else _LATEST


def _pks(pks: list[int]) -> dict[str, list[int]]:
    return {"b_run_pks": pks}


def _log_refs(conn: Connection, pks: list[int]) -> Counter[str]:
    refs: Counter[str] = Counter()
    for statement in (Q.ATTEMPT_LOGS, Q.CALLBACK_LOGS):
        refs.update(dict(sql.tuples(conn, statement, _pks(pks))))
    return refs


def _referenced(conn: Connection) -> Counter[str]:
    """How many rows point into each log file (one pass over attempts and callbacks)."""
    refs: Counter[str] = Counter()
    for statement in (Q.ATTEMPT_LOG_REFS, Q.CALLBACK_LOG_REFS):
        refs.update(dict(sql.tuples(conn, statement)))
    return refs


def _remove_logs(
    paths: set[str], tally: Tally, *, quiet: float = QUIET_SECONDS, dry_run: bool = False
) -> None:
    """Remove (on a dry run, count) the log files no row points into any more."""
    removal = logfiles.remove_segments(paths, quiet=quiet, dry_run=dry_run)
    tally.log_files += removal.files
    tally.log_bytes += removal.bytes
    tally.open_segments += removal.open
    tally.absent_files += removal.absent
