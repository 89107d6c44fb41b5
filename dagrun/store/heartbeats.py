"""Heartbeats: the last sign of life of every scheduler and worker, and whether a scheduler
is alive.

Each long-running process keeps one row (``heartbeat``, keyed by its owner id) and writes
it every few seconds (``Pulse``), never once per task: a worker beats from its lease
keeper's thread, in the transaction that renews its leases when one is due; a scheduler
from its loop, at most every ``BEAT_SECONDS``. A process that stops cleanly deletes its
row; one that died leaves it behind, and any process's beat deletes, once an hour, the
rows of processes silent for a day (``prune``).

A scheduler is alive while its newest beat is younger than ``ALIVE_SECONDS``, as Airflow's
``scheduler_health_check_threshold`` (the age strictly below it), by the store's clock:
the one the beats were stamped with (``Store.now``).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from dagrun.errors import StoreError
from dagrun.store import sql
from dagrun.store.engine import Store

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The statements of this module (``queries/heartbeats.py``).
Q = sql.Catalogue("dagrun.store.queries.heartbeats", "heartbeats.")


class Role(StrEnum):
    """What a beating process is."""

    SCHEDULER = "scheduler"
    WORKER = "worker"


#: Seconds between two beats of one process.
BEAT_SECONDS = 5.0
#: A process whose newest beat is this old (or older) is not alive (``/health``, the
#: page's banner, ``/metrics``).
ALIVE_SECONDS = 60.0
#: Rows of processes silent this long are deleted (``prune``), every ``PRUNE_SECONDS``.
FORGET_AFTER = timedelta(days=1)
PRUNE_SECONDS = 3600.0


@dataclass(frozen=True)
class Beat:
    """One process's last heartbeat. ``clock_offset`` is the database's clock minus its
    host's (seconds), as it last measured; None on SQLite."""

    owner: str
    role: str
    host: str
    pid: int
    started_at: datetime
    beat_at: datetime
    clock_offset: float | None


@dataclass(frozen=True)
class Stall:
    """No scheduler is alive while runs wait: when the last one beat (None: never), and
    how long ago, by the store's clock."""

    last: datetime | None
    seconds: float | None


def beat(
    conn: Connection,
    owner: str,
    role: Role,
    host: str,
    pid: int,
    started_at: datetime,
    now: datetime,
    clock_offset: float | None,
) -> None:
    """Record that ``owner`` is alive at ``now`` (an upsert by owner)."""
    sql.execute(
        conn,
        Q.BEAT,
        {
            "b_owner": owner,
            "b_role": role.value,
            "b_host": host,
            "b_pid": pid,
            "b_started_at": started_at,
            "b_beat_at": now,
            "b_clock_offset": clock_offset,
        },
    )


def forget(conn: Connection, owner: str) -> None:
    """``owner`` stopped cleanly: its row goes (a dead process's stays until ``prune``)."""
    sql.execute(conn, Q.FORGET, {"b_owner": owner})


def prune(conn: Connection, now: datetime) -> int:
    """Delete the rows of processes silent for ``FORGET_AFTER``; how many went."""
    return sql.execute(conn, Q.PRUNE, {"b_before": now - FORGET_AFTER}).rowcount


def newest(conn: Connection, role: Role) -> Beat | None:
    """The newest heartbeat of ``role``, or None if none is recorded."""
    row = sql.first(conn, Q.NEWEST, {"b_role": role.value})
    return None if row is None else Beat(*row)


def alive_since(now: datetime) -> datetime:
    """The oldest beat a live process can have at ``now``."""
    return now - timedelta(seconds=ALIVE_SECONDS)


def live(conn: Connection, now: datetime) -> list[Beat]:
    """The heartbeats of the processes alive at ``now``, newest first."""
    return [Beat(*row) for row in sql.rows(conn, Q.SINCE, {"b_since": alive_since(now)})]


def is_alive(beat_at: datetime | None, now: datetime) -> bool:
    """Whether a process that beat at ``beat_at`` is alive at ``now``."""
    return beat_at is not None and (now - beat_at).total_seconds() < ALIVE_SECONDS


def scheduler_stall(conn: Connection) -> Stall | None:
    """A ``Stall`` when no scheduler is alive while runs are unfinished, else None."""
    beat_at, run_id, server_now = sql.first(conn, Q.STALL, {"b_role": Role.SCHEDULER.value})
    now = server_now.astimezone(UTC) if server_now is not None else datetime.now(UTC)
    if run_id is None or is_alive(beat_at, now):
        return None
    seconds = None if beat_at is None else max(0.0, (now - beat_at).total_seconds())
    return Stall(beat_at, seconds)


class Pulse:
    """A process's heartbeat, paced: ``due`` every ``every`` seconds; ``beat`` writes it
    in the caller's transaction (and, every ``PRUNE_SECONDS``, prunes dead processes'
    rows there). Its owner (``host:pid:nonce`` unless given, as a worker's id), host and
    pid are fixed when it is made; the start is the first beat's time."""

    def __init__(self, role: Role, owner: str | None = None, every: float = BEAT_SECONDS):
        self.role = role
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = owner or f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.every = every
        self.started_at: datetime | None = None
        self._next = -math.inf
        self._next_prune = -math.inf

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def wait(self) -> float:
        """Seconds until the next beat is due (0 when due now)."""
        return max(0.0, self._next - time.monotonic())

    def beat(self, conn: Connection, now: datetime, clock_offset: float | None) -> None:
        if self.started_at is None:
            self.started_at = now
        beat(conn, self.owner, self.role, self.host, self.pid, self.started_at, now, clock_offset)
        self._next = time.monotonic() + self.every
        if time.monotonic() >= self._next_prune:
            prune(conn, now)
            self._next_prune = time.monotonic() + PRUNE_SECONDS

    def forget(self, store: Store) -> None:
        """The process stops cleanly: its row goes. A database away now leaves the row to
        ``prune``, and the stop goes on."""
        with contextlib.suppress(StoreError), store.write() as conn:
            forget(conn, self.owner)
