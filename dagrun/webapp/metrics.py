"""``/metrics``: the store's gauges and counters in the Prometheus text format."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from dagrun.store import clock, heartbeats
from dagrun.store import metrics as store_metrics
from dagrun.store.heartbeats import Beat, Role
from dagrun.webapp.http import Request, Response

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from dagrun.webapp.app import Site


def metrics(site: Site, request: Request) -> Response:
    with site.store.read() as conn:
        now = site.store.now(conn)
        found = store_metrics.metrics(conn, now)
        beats = Beats.read(conn, now)
    skew = clock.measure(site.store)
    text = metrics_text(found, skew.seconds if skew else 0.0, beats)
    return Response(text.encode(), "text/plain; version=0.0.4; charset=utf-8")


@dataclass(frozen=True)
class Beats:
    """What ``/metrics`` says of heartbeats: the age of the newest of each role (none when
    that role never beat), and the clock offset of each live process's host."""

    ages: dict[str, float] = field(default_factory=dict)
    offsets: dict[tuple[str, str], float] = field(default_factory=dict)

    @classmethod
    def read(cls, conn: Connection, now: datetime) -> Beats:
        ages = {}
        for role in Role:
            newest = heartbeats.newest(conn, role)
            if newest is not None:
                ages[role.value] = max(0.0, (now - newest.beat_at).total_seconds())
        return cls(ages, _offsets(heartbeats.live(conn, now)))


def _offsets(live: list[Beat]) -> dict[tuple[str, str], float]:
    """(role, host) -> clock offset of its newest beat: processes of one role on one host
    share a clock, and one sample per label set is what the format allows."""
    found: dict[tuple[str, str], float] = {}
    for beat in live:  # newest first
        if beat.clock_offset is not None:
            found.setdefault((beat.role, beat.host), beat.clock_offset)
    return found


def metrics_text(
    m: store_metrics.Metrics, clock_offset: float = 0.0, beats: Beats | None = None
) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    beats = beats or Beats()
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}"])
        lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

    family("dagrun_runs", "gauge", "DAG runs by state.", labelled(m.runs, "state"))
    family(
        "dagrun_task_instances",
        "gauge",
        "Task instances by state.",
        labelled(m.task_instances, "state"),
    )
    family("dagrun_queued_tasks", "gauge", "Task instances waiting for a worker.", [("", m.queued)])
    family(
        "dagrun_oldest_queued_task_age_seconds",
        "gauge",
        "Seconds the oldest queued task instance has waited (0 when none).",
        [("", m.oldest_queued_age)],
    )
    family(
        "dagrun_expired_leases",
        "gauge",
        "Running task instances whose lease has expired and awaits the reaper.",
        [("", m.expired_leases)],
    )
    family(
        "dagrun_stale_completions_total",
        "counter",
        "Completions rejected because the attempt had lost its lease.",
        [("", m.stale_completions)],
    )
    family(
        "dagrun_dag_runs",
        "gauge",
        "DAG runs by DAG and state.",
        labelled(m.dag_runs, "dag_id", "state"),
    )
    family(
        "dagrun_dag_task_instances",
        "gauge",
        "Task instances by DAG and state.",
        labelled(m.dag_task_instances, "dag_id", "state"),
    )
    family(
        "dagrun_scheduler_lag_seconds",
        "gauge",
        "Seconds between the due time of a DAG's latest scheduled run and its creation.",
        labelled(m.scheduler_lag, "dag_id"),
    )
    family(
        "dagrun_pool_oldest_queued_age_seconds",
        "gauge",
        'Seconds the oldest queued task instance of each pool has waited (pool="" for none).',
        labelled(m.pool_oldest_queued_age, "pool"),
    )
    family(
        "dagrun_pool_waiting_tasks",
        "gauge",
        "Queued task instances held back by a full (or missing) pool.",
        labelled(m.pool_waiting, "pool"),
    )
    family(
        "dagrun_max_active_tasks_waiting_tasks",
        "gauge",
        "Queued task instances held back by their DAG's max_active_tasks.",
        labelled(m.cap_waiting, "dag_id"),
    )
    family(
        "dagrun_depends_on_past_blocked_runs",
        "gauge",
        "Waiting runs held back because a previous run did not succeed (depends_on_past).",
        labelled(m.blocked_on_past, "dag_id"),
    )
    family(
        "dagrun_callbacks_total",
        "counter",
        "Callbacks and notifiers by DAG and state (pending, running, sent, failed).",
        labelled(m.callbacks, "dag_id", "state"),
    )
    family(
        "dagrun_clock_offset_seconds",
        "gauge",
        "The database's clock minus this web server host's (0 on SQLite, where the host's "
        "clock is the only one): the database's decides what is due.",
        [("", clock_offset)],
    )
    for role in Role:
        family(
            f"dagrun_{role.value}_heartbeat_age_seconds",
            "gauge",
            f"Seconds since the newest {role.value} heartbeat, by the store's clock (none "
            f"when no {role.value} ever beat; past {heartbeats.ALIVE_SECONDS:g} s it is not "
            "alive).",
            [("", beats.ages[role.value])] if role.value in beats.ages else [],
        )
    family(
        "dagrun_heartbeat_clock_offset_seconds",
        "gauge",
        "The database's clock minus the host's, as each live scheduler and worker last "
        "measured it (PostgreSQL only), by role and host.",
        labelled(beats.offsets, "role", "host"),
    )
    return "\n".join(lines) + "\n"


def labelled(values: dict, *names: str) -> list[tuple[str, float]]:
    """Samples with labels: a key per sample (a tuple for several labels), values escaped
    as the text format asks."""
    samples = []
    for key, value in sorted(values.items()):
        parts = key if isinstance(key, tuple) else (key,)
        text = ",".join(f'{n}="{_escape(str(v))}"' for n, v in zip(names, parts, strict=True))
        samples.append((f"{{{text}}}", value))
    return samples


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
