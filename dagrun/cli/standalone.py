"""``dagrun standalone``: the scheduler with its workers and the web page, one command.

Airflow's ``airflow standalone`` for a first look: two children (``dagrun scheduler`` and
``dagrun web``) on the configured store, the embedded SQLite one by default, in sessions of
their own, so a Ctrl-C reaches this process alone and each child is stopped once, cleanly,
by a SIGTERM from here; the kernel ends them if this process dies (``own_session``). When
one child ends on its own, the other is stopped and the command fails, naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import click

from dagrun import settings
from dagrun.cli.app import App, pass_app, stop_signals
from dagrun.errors import DagrunError
from dagrun.processes import describe_exit, own_session

#: Seconds each child has to stop after SIGTERM before it is killed.
STOP_GRACE = 30.0
#: Seconds the web page has to answer once started.
START_WITHIN = 60.0


class ChildFailed(DagrunError):
    """A child of ``dagrun standalone`` ended on its own."""


@click.command("standalone")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the web page.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="Its port."
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Embedded worker child processes (default: cores).",
)
@pass_app
def standalone(app: App, host: str, port: int, workers: int | None) -> None:
    """Start the scheduler with its workers and the web page in one process tree, on the
    embedded store unless one is configured; Ctrl-C or SIGTERM stops all of it."""
    report = app.sync()  # parse now: a broken file is shown before anything starts
    env = _child_environment(app)
    scheduler_args = ["scheduler"] + (["--workers", str(workers)] if workers is not None else [])
    children = {
        "scheduler": _start(scheduler_args, env),
        "web page": _start(["web", "--host", host, "--port", str(port)], env),
    }
    stopping = threading.Event()
    with stop_signals(stopping.set):
        try:
            address = f"http://{host}:{port}"
            _wait_for_page(address, children, stopping)
            if not stopping.is_set():
                _say_started(address, report.served or app.asked_folder)
            ended = _watch(children, stopping)
        finally:
            _stop(children)
    if ended is not None:
        name, code = ended
        raise ChildFailed(f"the {name} ended ({describe_exit(code)}): all of it stopped")


def _child_environment(app: App) -> dict[str, str]:
    """The children read the settings this command resolved: the same file, folder and
    store whatever directory they start in."""
    env = dict(os.environ)
    config = settings.config()
    if config.path is not None:
        env[settings.CONFIG_ENV] = str(config.path)
    env["DAGRUN_DAGS_FOLDER"] = app.asked_folder
    if url := settings.get("core.db_url"):
        env["DAGRUN_DB_URL"] = url
    return env


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "dagrun", *args]
    return subprocess.Popen(command, env=env, preexec_fn=own_session)


def _wait_for_page(
    address: str, children: dict[str, subprocess.Popen], stopping: threading.Event
) -> None:
    """Until the page answers, a child ends, a stop is asked or ``START_WITHIN`` passes."""
    deadline = time.monotonic() + START_WITHIN
    while time.monotonic() < deadline and not stopping.is_set():
        if any(child.poll() is not None for child in children.values()):
            return
        try:
            with urllib.request.urlopen(address, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answered (a login page, an error page): it is up
        except OSError:
            stopping.wait(0.2)


def _say_started(address: str, folder: str) -> None:
    click.echo(f"dagrun is running: the web page is at {address}")
    click.echo(f"  DAG files are read from {folder}")
    click.echo(
        "  next: `dagrun dags list`, then `dagrun trigger DAG`, and watch its run on the page"
    )
    click.echo("  Ctrl-C stops the scheduler, its workers and the page")


def _watch(
    children: dict[str, subprocess.Popen], stopping: threading.Event
) -> tuple[str, int] | None:
    """Wait for a stop or for a child to end; the child that ended, if one did."""
    while not stopping.wait(0.5):
        for name, child in children.items():
            code = child.poll()
            if code is not None:
                return name, code
    return None


def _stop(children: dict[str, subprocess.Popen]) -> None:
    """SIGTERM each child once, wait for it, kill what is left after ``STOP_GRACE``."""
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_GRACE
    for child in children.values():
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


COMMANDS = [standalone]
