"""``/metrics``: the store's gauges and counters in the Prometheus text format."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagrun.store import reads
from dagrun.webapp.http import Request, Response

if TYPE_CHECKING:
    from dagrun.webapp.app import Site


def metrics(site: Site, request: Request) -> Response:
    with site.store.read() as conn:
        found = reads.metrics(conn, site.store.now(conn))
    return Response(metrics_text(found).encode(), "text/plain; version=0.0.4; charset=utf-8")


def metrics_text(m: reads.Metrics) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}"])
        lines.extend(f"{name}{labels} {value:g}" for labels, value in samples)

    def by_state(counts: dict[str, int]) -> list[tuple[str, float]]:
        return [(f'{{state="{state}"}}', n) for state, n in sorted(counts.items())]

    family("dagrun_runs", "gauge", "DAG runs by state.", by_state(m.runs))
    family("dagrun_task_instances", "gauge", "Task instances by state.", by_state(m.task_instances))
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
    return "\n".join(lines) + "\n"
