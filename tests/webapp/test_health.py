"""``/health`` in Airflow's shape, the banner every page shows when no scheduler is alive
while runs wait, and the heartbeats ``/metrics`` exports, called in-process through WSGI."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from dagrun.errors import StoreUnavailable
from dagrun.runtime.dag_sync import sync_dags
from dagrun.store import dag_reads, heartbeats, run_reads
from dagrun.store.heartbeats import ALIVE_SECONDS, Role
from dagrun.webapp import WebApp
from dagrun.webapp.metrics import Beats, metrics_text
from tests.helpers import write_dag
from tests.store.test_metrics import read as read_metrics
from tests.webapp.test_webapp import IDLE_DAG, SHOP_DAG, call, make_runs

BANNER = 'data-banner="scheduler"'


@pytest.fixture
def app(store, tmp_path) -> WebApp:
    """The shop DAG synced, with no run yet, and no process ever beating."""
    write_dag(tmp_path / "dags", "shop.py", SHOP_DAG)
    write_dag(tmp_path / "dags", "idle.py", IDLE_DAG)
    sync_dags(store, str(tmp_path / "dags"))
    return WebApp(store, logs_root=tmp_path / "logs")


def beat(store, owner: str, role: Role, age: float = 0.0, offset=None, host="h1") -> datetime:
    """A beat ``age`` seconds ago by the store's clock."""
    with store.write() as conn:
        at = store.now(conn) - timedelta(seconds=age)
        heartbeats.beat(conn, owner, role, host, 7, at, at, offset)
    return at


def unfinished_runs(store, start: bool = True) -> None:
    with store.read() as conn:
        spec = dag_reads.get_dag(conn, "shop").spec
    make_runs(store, spec, 2, start_runs=start)


def health(app: WebApp) -> dict:
    reply = call(app, "/health")
    assert reply.status == 200
    return reply.json()


# ---------------------------------------------------------------- /health


def test_health_says_what_airflow_says_before_any_scheduler(app):
    assert health(app) == {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": None},
    }


def test_health_follows_the_newest_scheduler_beat_and_its_threshold(app, store):
    beat(store, "w", Role.WORKER)  # a worker is no scheduler
    assert health(app)["scheduler"]["status"] == "unhealthy"
    last = beat(store, "s1", Role.SCHEDULER, age=ALIVE_SECONDS - 5)
    assert health(app)["scheduler"] == {
        "status": "healthy",
        "latest_scheduler_heartbeat": last.isoformat(),
    }
    stale = beat(store, "s1", Role.SCHEDULER, age=ALIVE_SECONDS + 1)
    assert health(app)["scheduler"] == {
        "status": "unhealthy",
        "latest_scheduler_heartbeat": stale.isoformat(),
    }
    assert datetime.fromisoformat(stale.isoformat()) == stale


def test_health_answers_200_when_the_database_does_not(app, store, monkeypatch):
    """As Airflow's: the status code says the call worked; the body says what did not."""

    def away():
        raise StoreUnavailable("connection refused")

    monkeypatch.setattr(store, "read", away)
    assert health(app) == {
        "metadatabase": {"status": "unhealthy"},
        "scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": None},
    }


def test_health_is_read_only_json(app):
    reply = call(app, "/health", "POST")
    assert reply.status == 405 and reply.json()["status"] == 405


# ---------------------------------------------------------------- the banner


@pytest.mark.parametrize("started", [True, False])
def test_every_page_shows_the_banner_while_runs_wait_for_no_scheduler(app, store, started):
    unfinished_runs(store, start=started)
    run_id = make_run_id(store)
    for url in ("/", "/dags/shop/grid", "/dags/shop/graph", f"/dags/shop/runs/{run_id}", "/audit"):
        page = call(app, url)
        assert page.status == 200 and BANNER in page.text, url
        assert "No scheduler has sent a heartbeat yet" in page.text
    assert BANNER not in call(app, "/dags/nowhere/grid").text  # an error page asks nothing


def make_run_id(store) -> str:
    with store.read() as conn:
        return run_reads.runs(conn, "shop")[0].run_id


def test_the_banner_says_how_long_the_scheduler_has_been_silent(app, store):
    unfinished_runs(store)
    beat(store, "s1", Role.SCHEDULER, age=125)
    text = call(app, "/").text
    assert BANNER in text and "No scheduler has sent a heartbeat for 2m 0" in text


def test_no_banner_while_a_scheduler_beats_or_no_run_waits(app, store):
    assert BANNER not in call(app, "/").text  # no run at all
    unfinished_runs(store)
    beat(store, "s1", Role.SCHEDULER, age=ALIVE_SECONDS - 5)
    assert BANNER not in call(app, "/").text
    assert BANNER not in call(app, "/dags/shop/grid").text


# ---------------------------------------------------------------- /metrics


def test_metrics_export_the_age_of_the_newest_beat_of_each_role(app, store):
    text = call(app, "/metrics").text
    assert "# TYPE dagrun_scheduler_heartbeat_age_seconds gauge" in text
    assert "\ndagrun_scheduler_heartbeat_age_seconds " not in text  # none ever beat
    beat(store, "s-old", Role.SCHEDULER, age=300)
    beat(store, "s-new", Role.SCHEDULER, age=100)
    beat(store, "w", Role.WORKER, age=7)
    samples = dict(
        line.rsplit(" ", 1) for line in call(app, "/metrics").text.splitlines() if line[0] != "#"
    )
    assert 100 <= float(samples["dagrun_scheduler_heartbeat_age_seconds"]) < 130
    assert 7 <= float(samples["dagrun_worker_heartbeat_age_seconds"]) < 37


def test_metrics_export_the_clock_offset_of_each_live_host_and_role(app, store):
    beat(store, "w1", Role.WORKER, age=20, offset=-0.5, host="h1")
    beat(store, "w2", Role.WORKER, age=10, offset=-0.75, host="h1")  # newer, same host
    beat(store, "s", Role.SCHEDULER, age=1, offset=2.5, host="h2")
    beat(store, "dead", Role.WORKER, age=ALIVE_SECONDS + 1, offset=9.0, host="h3")
    beat(store, "sqlite", Role.WORKER, age=1, offset=None, host="h4")
    with store.read() as conn:
        beats = Beats.read(conn, store.now(conn))
    text = metrics_text(read_metrics(store), 0.0, beats)
    offsets = [line for line in text.splitlines() if line.startswith("dagrun_heartbeat_clock")]
    assert offsets == [
        'dagrun_heartbeat_clock_offset_seconds{role="scheduler",host="h2"} 2.5',
        'dagrun_heartbeat_clock_offset_seconds{role="worker",host="h1"} -0.75',
    ]

    assert 'role="worker",host="h1"} -0.75' in call(app, "/metrics").text
