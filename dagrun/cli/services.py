"""``dagrun scheduler`` and ``dagrun worker``: the long-running processes."""

from __future__ import annotations

import logging
import os
import time

import click

from dagrun.cli.app import App, pass_app, setup_logging, stop_signals
from dagrun.scheduler import Scheduler, sweep
from dagrun.store import registry
from dagrun.worker import Worker, WorkerOptions

log = logging.getLogger("dagrun.cli")


@click.command("scheduler")
@click.option(
    "--workers",
    type=click.IntRange(0),
    default=None,
    help="Embedded worker child processes (default: cores; 0: none).",
)
@click.option(
    "--poll",
    type=click.FloatRange(0.05),
    default=1.0,
    show_default=True,
    help="Seconds between scheduler ticks.",
)
@pass_app
def scheduler(app: App, workers: int | None, poll: float) -> None:
    """The long-running scheduler, with embedded workers sharing the queue."""
    setup_logging(app.verbose)
    sched = Scheduler(app.store, app.folder)
    workers = os.cpu_count() or 2 if workers is None else workers
    log.info(
        "scheduler started on %r, dags folder %s, %d embedded worker(s)",
        app.store,
        app.folder,
        workers,
    )
    if workers == 0:
        _tick_forever(sched, poll)
        return
    options = WorkerOptions(concurrency=workers, poll_interval=poll)
    worker = Worker(
        app.store,
        options,
        tick=lambda: sched.tick().queued_work,
        tick_interval=poll,
        tick_when_runs_end=True,
    )
    with stop_signals(worker.stop):
        stats = worker.run()
    log.info("scheduler stopped: %d task attempt(s) run", stats.claimed)


def _tick_forever(sched: Scheduler, poll: float) -> None:
    stopping = []
    with stop_signals(lambda: stopping.append(True)):
        while not stopping:
            started = time.monotonic()
            sched.tick()
            time.sleep(max(0.0, poll - (time.monotonic() - started)))
    log.info("scheduler stopped")


@click.command("worker")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1),
    default=None,
    help="Child processes running attempts (default: cores).",
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds running attempts get to finish after SIGTERM.",
)
@click.option("--poll", type=click.FloatRange(0.05), default=1.0, show_default=True)
@pass_app
def worker(app: App, concurrency: int | None, grace: float, poll: float) -> None:
    """A worker only: claims and runs tasks (scale out on other hosts)."""
    setup_logging(app.verbose)
    options = WorkerOptions(
        concurrency=concurrency or os.cpu_count() or 2, grace=grace, poll_interval=poll
    )
    specs = registry.SpecCache()
    w = Worker(
        app.store, options, tick=lambda: any(sweep(app.store, specs)), tick_interval=max(poll, 1.0)
    )
    with stop_signals(w.stop):
        stats = w.run()
    log.info(
        "worker stopped: %d claimed, %d succeeded, %d failed, %d stale, %d released",
        stats.claimed,
        stats.succeeded,
        stats.failed,
        stats.stale,
        stats.released,
    )


COMMANDS = [scheduler, worker]
