"""Durations over time: the last N runs of a DAG and their tasks' durations, one line per
task and a point per run, the task that got slower flagged; the store read behind it.

Runs are inserted with exact timestamps (tests.webapp.test_gantt.insert_run), one a day."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dagrun.store import Store, sql
from dagrun.store.history import recent_durations
from dagrun.webapp import WebApp
from dagrun.webapp.durations import MAX_RUNS, SLOWER_FLOOR, SLOWER_RATIO, Line, Point
from tests.webapp.test_gantt import T0, Ti, insert_run, save_spec, spec_of
from tests.webapp.test_webapp import Elements, call

DAYS = 6
#: Seconds each task takes on each day: ``slow`` is steady, then twice as slow on the last.
SECONDS = {"extract": [10] * DAYS, "slow": [20, 21, 19, 20, 22, 44], "report": [5] * DAYS}


def day_run(store: Store, spec, day: int) -> None:
    """Day ``day``'s run, an hour after its logical date: the tasks one after another,
    each taking SECONDS[task][day]."""
    instances, clock = [], day * 86400 + 3600.0
    for task_id, seconds in SECONDS.items():
        instances.append(Ti(task_id, clock, clock, clock + seconds[day]))
        clock += seconds[day]
    date = T0 + timedelta(days=day)
    insert_run(
        store, spec, f"day-{day}", instances, logical_date=date, start=date + timedelta(hours=1)
    )


@pytest.fixture
def history(sqlite_store: Store):
    spec = spec_of({"extract": [], "slow": ["extract"], "report": ["slow"]}, tz="UTC")
    save_spec(sqlite_store, spec)
    for day in range(DAYS):
        day_run(sqlite_store, spec, day)
    return sqlite_store, WebApp(sqlite_store)


def series(html: str) -> dict[str, dict[str, str]]:
    return {g["data-name"]: g for g in Elements(html).select("g", "series")}


def test_one_line_per_task_and_the_run_with_a_point_per_run(history):
    _, app = history
    reply = call(app, "/dags/d/durations")
    assert reply.status == 200
    found = Elements(reply.text)
    lines = found.select("polyline", "line")
    assert len(lines) == len(SECONDS) + 1
    assert len(found.select("circle", "pt")) == (len(SECONDS) + 1) * DAYS
    for line in lines:
        assert len(line["points"].split()) == DAYS
    assert set(series(reply.text)) == {"run", *SECONDS}
    assert "style=" not in reply.text


def test_runs_n_charts_the_latest_n_oldest_left(history):
    _, app = history
    reply = call(app, "/dags/d/durations?runs=4")
    lines = Elements(reply.text).select("polyline", "line")
    xs = [float(p.split(",")[0]) for p in lines[0]["points"].split()]
    assert len(xs) == 4 and xs == sorted(xs)
    labels = [t for t in reply.text.split('<text class="x"')[1:]]
    assert "2026-03-03" in labels[0] and "2026-03-06" in labels[-1]


def test_the_task_that_got_slower_is_flagged(history):
    _, app = history
    reply = call(app, "/dags/d/durations")
    flagged = [g["data-name"] for g in series(reply.text).values() if "slower" in g["class"]]
    assert flagged == ["run", "slow"]  # the run is as much slower as its slow task made it
    rows = Elements(reply.text).select("tr", "slower")
    assert [r["data-name"] for r in rows] == ["run", "slow"]
    assert "2.1\N{MULTIPLICATION SIGN} the median" in reply.text  # 44 s against a median of 20.5 s
    assert 22 < SLOWER_RATIO * 20.5 < 44  # the day before was not flagged


def test_a_steady_dag_flags_nothing(sqlite_store):
    spec = spec_of({"extract": [], "slow": ["extract"], "report": ["slow"]}, tz="UTC")
    save_spec(sqlite_store, spec)
    for day in range(DAYS - 1):
        day_run(sqlite_store, spec, day)
    reply = call(WebApp(sqlite_store), "/dags/d/durations")
    assert not Elements(reply.text).select("tr", "slower")


@pytest.mark.parametrize(
    ("median", "latest", "flagged"),
    [
        (0.002, 0.004, False),  # twice the median, both 0.00s: noise
        (0.05, 0.12, False),  # more than twice, by less than the floor
        (0.05, 0.2, True),  # four times, by more than the floor
        (0.2, 0.45, True),
    ],
)
def test_a_slower_task_is_slower_by_more_than_a_blink(median, latest, flagged):
    points = [Point(0, 0, "")] * 5
    line = Line("t", "task dc0", points, median, latest)
    assert line.slower is flagged
    assert SLOWER_FLOOR == 0.1


def test_a_dag_of_quick_tasks_flags_nothing(sqlite_store):
    """Tasks of a few milliseconds, the last twice as long: not flagged 2.0 times slower."""
    spec = spec_of({"quick": []}, tz="UTC")
    save_spec(sqlite_store, spec)
    for day, seconds in enumerate([0.002, 0.002, 0.002, 0.002, 0.004]):
        date = T0 + timedelta(days=day)
        at = day * 86400 + 3600.0
        instances = [Ti("quick", at, at, at + seconds)]
        insert_run(sqlite_store, spec, f"d{day}", instances, logical_date=date, start=date)
    reply = call(WebApp(sqlite_store), "/dags/d/durations")
    assert reply.status == 200 and "slower-mark" not in reply.text
    assert not Elements(reply.text).select("tr", "slower")


def test_points_are_titled_with_task_date_and_duration(history):
    _, app = history
    reply = call(app, "/dags/d/durations")
    assert "<title>slow · 2026-03-06 06:00 (day-5) · 44.0s</title>" in reply.text


@pytest.mark.parametrize(
    "query, status, points",
    [
        ("runs=2", 200, 2),
        ("runs=0", 200, 1),
        (f"runs={MAX_RUNS + 5}", 200, DAYS),
        ("runs=x", 400, 0),
        ("runs=-1", 400, 0),
    ],
)
def test_the_runs_parameter_is_validated_and_capped(history, query, status, points):
    _, app = history
    reply = call(app, f"/dags/d/durations?{query}")
    assert reply.status == status
    if status == 200:
        line = Elements(reply.text).select("polyline", "run")[0]
        assert len(line["points"].split()) == points


def test_unknown_dag_is_404_and_a_dag_without_runs_says_so(sqlite_store):
    save_spec(sqlite_store, spec_of({"a": []}))
    app = WebApp(sqlite_store)
    assert call(app, "/dags/nodag/durations").status == 404
    reply = call(app, "/dags/d/durations")
    assert reply.status == 200 and "No run of this DAG has recorded a duration" in reply.text


def test_the_dag_header_links_to_durations(history):
    _, app = history
    assert 'href="/dags/d/durations"' in call(app, "/dags/d/grid").text


def test_task_ids_are_escaped(sqlite_store):
    spec = spec_of({"<b>x</b>": []})
    save_spec(sqlite_store, spec)
    insert_run(sqlite_store, spec, "r", [Ti("<b>x</b>", 0, 1, 2)])
    reply = call(WebApp(sqlite_store), "/dags/d/durations")
    assert "<b>x</b>" not in reply.text and "&lt;b&gt;x&lt;/b&gt;" in reply.text


def test_recent_durations_reads_two_statements_whatever_n(history):
    """The runs by the (dag_id, logical_date) index, then their instances grouped: a mapped
    task is its slowest index."""
    store, _ = history
    spec = spec_of({"extract": [], "slow": ["extract"], "report": ["slow"]}, tz="UTC")
    mapped = [Ti("extract", 0, 0, 3, map_index=i) for i in range(3)]
    mapped.append(Ti("extract", 0, 0, 7, map_index=3))
    insert_run(store, spec, "mapped", mapped, logical_date=T0 + timedelta(days=DAYS))
    statements: list[str] = []
    with store.read() as conn, sql.observed(lambda s, *_: statements.append(s)):
        found = recent_durations(conn, "d", 3)
    assert len(statements) == 2
    assert [r.run_id for r in found] == ["day-4", "day-5", "mapped"]
    assert found[-1].tasks == {"extract": 7.0}
    assert found[1].tasks["slow"] == 44.0
    assert found[1].duration == 59.0
