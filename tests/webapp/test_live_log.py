"""A running attempt's log on the page: found in its worker child's segment by dagrun's first
line, read as it grows in whole lines, and carried on across its end from the range the
store then records. Before, the store knew no log of a running attempt and its page was a
404."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dagrun.runtime.dag_sync import sync_dags
from dagrun.states import AttemptOutcome
from dagrun.store import Store, attempts, dag_reads, task_reads
from dagrun.store.attempts import Claim
from dagrun.store.logfiles import LogRange
from dagrun.webapp import WebApp, live_log, log_url
from dagrun.webapp.live_log import AttemptName
from tests.helpers import queue_run, write_dag
from tests.webapp.test_webapp import Elements, call

HOST = socket.gethostname()
OWNER = f"{HOST}:4242:cafe1234"

LIVE_DAG = """
    from dagrun import DAG, task

    with DAG("live", schedule=None):
        @task
        def talk():
            return 1

        @task
        def other():
            return 1

        talk()
        other()
    """


@dataclass
class Running:
    store: Store
    app: WebApp
    logs: Path
    claim: Claim
    segment: Path

    def attempt(self) -> task_reads.AttemptRow:
        with self.store.read() as conn:
            return task_reads.attempts(conn, self.claim.ti_id)[-1]

    def follow(self, since: int, most: int = 1 << 20) -> live_log.LogChunk:
        name = AttemptName("live", self.claim.task_id, -1)
        return live_log.follow(self.attempt(), name, self.logs, since, most)

    def write(self, text: str) -> None:
        with self.segment.open("ab") as handle:
            handle.write(text.encode())

    def page(self) -> str:
        url = log_url("live", self.claim.run_id, self.claim.task_id, self.claim.try_number)
        reply = call(self.app, url)
        assert reply.status == 200, reply.text
        return reply.text


def header(claim: Claim, dag_id: str = "live") -> str:
    """The line a worker child writes first for an attempt (``runner._run_logged``)."""
    return (
        f"2026-03-01 10:00:00,123 INFO dagrun.task: attempt {claim.try_number} of "
        f"{dag_id}.{claim.task_id} for {claim.logical_date.isoformat()} "
        f"(fence {claim.fence_token})\n"
    )


@pytest.fixture
def running(sqlite_store: Store, tmp_path: Path) -> Running:
    """Both tasks of a run claimed by a worker; ``talk``'s child has written its first line
    after another attempt's output, in today's folder."""
    dags = tmp_path / "dags"
    write_dag(dags, "live.py", LIVE_DAG)
    sync_dags(sqlite_store, str(dags))
    queue_run(sqlite_store, dags, "live", run_id="R")
    with sqlite_store.write() as conn:
        claims = attempts.claim(conn, OWNER, 10, 300, sqlite_store.now(conn))
    talk = next(c for c in claims if c.task_id == "talk")
    other = next(c for c in claims if c.task_id == "other")
    logs = tmp_path / "logs"
    segment = logs / time.strftime("%Y-%m-%d", time.gmtime()) / f"{HOST}-4243-1.log"
    segment.parent.mkdir(parents=True)
    segment.write_text(header(other) + "other's output\n")
    # another host's child, and a segment of this host not written since the attempt began
    (segment.parent / "elsewhere-4243-1.log").write_text(header(talk) + "not here\n")
    state = Running(sqlite_store, WebApp(sqlite_store, logs_root=logs), logs, talk, segment)
    state.write(header(talk) + "first line\n")
    return state


def test_a_running_attempts_log_is_found_by_its_first_line_and_read_in_whole_lines(running):
    chunk = running.follow(0)
    assert chunk.running and chunk.found
    assert chunk.text == header(running.claim) + "first line\n"
    assert "other's output" not in chunk.text and "not here" not in chunk.text

    running.write("second line\nhalf a li")
    later = running.follow(chunk.offset)
    assert (later.text, later.skipped) == ("second line\n", 0)
    assert running.follow(later.offset).text == ""  # the half line waits for its end
    running.write("ne\n")
    assert running.follow(later.offset).text == "half a line\n"


def test_what_its_child_writes_after_the_attempt_is_not_its_log(running):
    """The child moves on (a callback, the next attempt) a moment before the store learns
    that the attempt ended: what it writes then is not the attempt's."""
    assert running.follow(0).found
    running.write(
        "last words\n"
        "2026-03-01 10:00:05,000 INFO dagrun.task: task_failure callback of live.talk\n"
        "callback output\n"
    )
    assert running.follow(0).text.endswith("first line\nlast words\n")


def test_a_read_behind_by_more_than_it_carries_skips_to_the_end(running):
    running.write("x" * 5000 + "\nend\n")
    chunk = running.follow(0, most=100)
    assert chunk.skipped > 0 and chunk.text.endswith("end\n") and len(chunk.text) <= 100
    assert chunk.offset == chunk.skipped + len(chunk.text.encode())


def test_once_ended_the_log_carries_on_from_the_recorded_range(running):
    first = running.follow(0)
    running.write("after the page loaded\n")
    segment_bytes = running.segment.read_bytes()
    start = segment_bytes.index(header(running.claim).encode())
    with running.store.write() as conn:
        outcome = attempts.Outcome.of(
            running.claim,
            AttemptOutcome.SUCCESS,
            log=LogRange(str(running.segment), start, len(segment_bytes) - start),
        )
        spec = dag_reads.get_dag(conn, "live").spec
        attempts.complete(conn, OWNER, [outcome], lambda _: spec, running.store.now(conn))
    ended = running.follow(first.offset)
    assert (ended.text, ended.running, ended.found) == ("after the page loaded\n", False, True)


def test_the_log_page_of_a_running_attempt_shows_it_and_follows_it(running):
    page = running.page()
    assert "first line" in page and "other&#39;s output" not in page
    follow = Elements(page).select("pre", "log")[0]
    assert follow["data-offset"] == str(len((header(running.claim) + "first line\n").encode()))
    assert follow["data-follow"].startswith("/api/dags/live/runs/R/tasks/talk/tries/1/log")
    assert "/static/follow_log.js?v=" in page
    assert 'data-refresh="0"' in page  # it follows the log instead of reloading itself
    assert "Following the log as it grows" in page


def test_the_csp_lets_the_page_fetch_from_its_own_site_and_nothing_more(running):
    url = log_url("live", "R", "talk", 1)
    policy = call(running.app, url).headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives == {
        "default-src": "'none'",
        "script-src": "'self'",
        "style-src": "'self'",
        "img-src": "'self'",
        "connect-src": "'self'",
        "base-uri": "'none'",
        "form-action": "'self'",
        "frame-ancestors": "'self'",
    }


def test_a_running_attempt_whose_output_is_not_on_this_host_waits_for_it(running):
    running.segment.unlink()
    chunk = running.follow(0)
    assert (chunk.text, chunk.running, chunk.found) == ("", True, False)
    assert "Waiting for the attempt" in running.page()


def test_an_unknown_map_index_is_a_404_not_a_500(running):
    url = log_url("live", "R", "talk", 1, map_index=7)
    reply = call(running.app, url)
    assert reply.status == 404 and "has no map index 7" in reply.text
