"""``/health``, the scheduler banner and the heartbeats in ``/metrics``, over real HTTP
against ``dagrun web``, while a real ``dagrun scheduler`` starts, beats and stops."""

from __future__ import annotations

import json
import socket
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from dagrun.store import Store, run_reads
from tests.helpers import HELLO, run_cli, start_cli, stop_process, wait_until, write_dag
from tests.integration import test_web_server
from tests.integration.test_web_server import Served

pytestmark = pytest.mark.slow
#: A fixture: starts ``dagrun web --port 0`` as test_web_server does, with ``cli_env``.
web_server = test_web_server.serve

BANNER = 'data-banner="scheduler"'


@pytest.fixture
def cli_env(cli_env, db_url):
    """The CLI's environment on each engine (``web_server`` starts ``dagrun web`` with it)."""
    return {**cli_env, "DAGRUN_DB_URL": db_url}


def get(served: Served, path: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(served.base + path, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def health(served: Served) -> dict:
    status, kind, body = get(served, "/health")
    assert status == 200 and kind.startswith("application/json")
    return json.loads(body)


def samples(served: Served) -> dict[str, float]:
    _, _, text = get(served, "/metrics")
    return {
        name: float(value)
        for name, value in (line.rsplit(" ", 1) for line in text.splitlines() if line[0] != "#")
    }


def run_state(db_url: str) -> str:
    store = Store(db_url)
    try:
        with store.read() as conn:
            return run_reads.runs(conn, "hello")[0].state
    finally:
        store.dispose()


def test_health_and_the_banner_follow_a_real_scheduler(
    web_server, cli_env, dags_dir, db_url, tmp_path
):
    write_dag(dags_dir, "hello.py", HELLO)
    served = web_server()
    unhealthy = {"status": "unhealthy", "latest_scheduler_heartbeat": None}
    assert health(served) == {"metadatabase": {"status": "healthy"}, "scheduler": unhealthy}
    assert BANNER not in get(served, "/")[2]  # nothing waits yet

    assert run_cli("trigger", "hello", env=cli_env).returncode == 0
    for path in ("/", "/dags/hello/grid", "/audit"):
        assert BANNER in get(served, path)[2], path

    log = tmp_path / "scheduler.log"
    scheduler = start_cli("scheduler", "--workers", "1", "--poll", "0.2", env=cli_env, log=log)
    try:
        found = wait_until(
            lambda: (h := health(served))["scheduler"]["status"] == "healthy" and h,
            timeout=60,
            what=f"a healthy scheduler ({log.read_text()[-500:] if log.exists() else ''})",
        )
        latest = datetime.fromisoformat(found["scheduler"]["latest_scheduler_heartbeat"])
        assert abs(datetime.now(UTC) - latest) < timedelta(seconds=30)
        assert BANNER not in get(served, "/")[2]
        wait_until(lambda: run_state(db_url) == "success", 60, what="the triggered run")
        wait_until(lambda: "dagrun_worker_heartbeat_age_seconds" in samples(served), 30)
        found_samples = samples(served)
        assert 0 <= found_samples["dagrun_scheduler_heartbeat_age_seconds"] < 60
        assert 0 <= found_samples["dagrun_worker_heartbeat_age_seconds"] < 60
        offsets = [k for k in found_samples if k.startswith("dagrun_heartbeat_clock_offset")]
        host = socket.gethostname()
        if db_url.startswith("postgresql"):  # measured against the server's clock
            assert f'dagrun_heartbeat_clock_offset_seconds{{role="scheduler",host="{host}"}}' in (
                offsets
            )
        else:
            assert offsets == []
    finally:
        assert stop_process(scheduler) == 0
    # A clean stop deletes the scheduler's row (and its worker's): none is left to be alive.
    assert health(served)["scheduler"] == unhealthy
    assert "dagrun_scheduler_heartbeat_age_seconds" not in samples(served)
    assert "dagrun_worker_heartbeat_age_seconds" not in samples(served)
