"""``dagrun scheduler`` and ``dagrun worker``: the long-running processes.

Each role runs in a loop of its own: ``dagrun scheduler`` ticks the scheduler on a thread
beside its embedded worker (whose commit hook admits the next runs when runs end), and the
worker keeps its leases on a thread of its own. Each process also starts its one upkeep
loop (retries due, expired leases: ``runtime.upkeep``), whatever roles run in it. All of
them ride out database outages up to ``DAGRUN_DB_OUTAGE_SECONDS``.
"""

from __future__ import annotations

import logging
import os

import click

from dagrun.cli.app import App, pass_app, stop_signals
from dagrun.cli.log_setup import setup_logging
from dagrun.runtime.scheduler import Scheduler, SchedulerLoop
from dagrun.runtime.upkeep import SWEEP_SECONDS, UpkeepLoop
from dagrun.runtime.worker import Worker, WorkerOptions

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
    app.service_store()
    workers = os.cpu_count() or 2 if workers is None else workers
    sched = Scheduler(app.store, app.asked_folder)
    log.info("scheduler started on %r, %d embedded worker(s)", app.store, workers)
    if workers == 0:
        loop = SchedulerLoop(sched, poll)
        upkeep = UpkeepLoop(app.store, loop.fail, interval=_sweep_every(poll))
        with upkeep, stop_signals(loop.stop):
            loop.run()
        log.info("scheduler stopped")
        return
    options = WorkerOptions(concurrency=workers, poll_interval=poll)
    worker = Worker(app.store, options, on_commit=sched.admit_after)
    loop = SchedulerLoop(sched, poll, on_queued_work=worker.wake, on_fatal=worker.fail)
    loop.start()

    def stop() -> None:
        """Tick no more (no run is created while the workers finish what they run), then
        stop the workers."""
        loop.stop()
        worker.stop()

    try:
        with UpkeepLoop.beside(worker, _sweep_every(poll)), stop_signals(stop):
            stats = worker.run()
    finally:
        loop.stop()
        loop.join(5)  # a tick stuck in a parse ends with the process (its child too)
    log.info("scheduler stopped: %d task attempt(s) run", stats.claimed)


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
@click.option("--once", is_flag=True, help="Run what is ready (and what it readies), then exit.")
@click.option("--max-tasks", type=click.IntRange(1), metavar="N", help="Exit after N attempts.")
@click.option(
    "--max-idle", type=click.FloatRange(0), metavar="SECONDS", help="Exit after SECONDS idle."
)
@pass_app
def worker(
    app: App,
    concurrency: int | None,
    grace: float,
    poll: float,
    once: bool,
    max_tasks: int | None,
    max_idle: float | None,
) -> None:
    """A worker only: claims and runs tasks (scale out on other hosts)."""
    setup_logging(app.verbose)
    app.service_store()
    every = _sweep_every(poll)
    options = WorkerOptions(
        concurrency=concurrency or os.cpu_count() or 2,
        grace=grace,
        poll_interval=poll,
        look_interval=every,
        once=once,
        max_tasks=max_tasks,
        max_idle=max_idle,
    )
    w = Worker(app.store, options)
    with UpkeepLoop.beside(w, every), stop_signals(w.stop):
        stats = w.run()
    log.info(
        "worker stopped: %d claimed, %d succeeded, %d failed, %d stale, %d released",
        stats.claimed,
        stats.succeeded,
        stats.failed,
        stats.stale,
        stats.released,
    )


def _sweep_every(poll: float) -> float:
    """``--poll`` paces the upkeep's sweeps too, but never more often than each second."""
    return max(poll, SWEEP_SECONDS)


COMMANDS = [scheduler, worker]
