"""The Gantt of a run: bars per instance and per earlier try, positions that follow the
times, the critical path on examples whose times are known, escaping, 404s, and its cost.

Runs are inserted with exact timestamps (rows, not a scheduler), so every expected x, bar
and path is known in advance."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert

from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.store import Store, registry
from dagrun.store.schema import dag_run, task_attempt, task_instance
from dagrun.webapp import WebApp, run_url
from dagrun.webapp.gantt import CHART_WIDTH, LABEL_WIDTH, critical_path, read_gantt
from tests.helpers import bare_spec
from tests.webapp.test_webapp import Elements, call

T0 = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Ti:
    """One task instance as a test states it: seconds after T0, earlier tries as
    ``(start, end, outcome)``."""

    task_id: str
    queued: float | None
    start: float | None
    end: float | None
    state: str = "success"
    tries: tuple[tuple[float, float, str], ...] = ()
    map_index: int = -1


def spec_of(edges: dict[str, Sequence[str]], dag_id: str = "d", tz: str = "Asia/Dhaka"):
    """A DAG whose tasks (in the order given) have these upstream task ids."""
    tasks = [TaskSpec(task_id=t, kind="python", upstream=tuple(up)) for t, up in edges.items()]
    return dataclasses.replace(bare_spec(*tasks, dag_id=dag_id), timezone=tz)


def save_spec(store: Store, spec: DagSpec) -> None:
    with store.write() as conn:
        registry.save_dag(conn, spec, T0)


def insert_run(
    store: Store,
    spec: DagSpec,
    run_id: str,
    instances: Sequence[Ti],
    *,
    logical_date: datetime = T0,
    state: str = "success",
    start: datetime | None = T0,
    end: datetime | None = None,
) -> int:
    """A run of ``spec`` with these instances and attempts, at exactly these times."""
    ends = [i.end for i in instances if i.end is not None]
    end = end if end is not None or state == "running" else at(max(ends, default=0))
    with store.write() as conn:
        run_pk = conn.execute(
            insert(dag_run).values(
                dag_id=spec.dag_id,
                run_id=run_id,
                logical_date=logical_date,
                data_interval_start=logical_date,
                data_interval_end=logical_date + timedelta(days=1),
                run_type="manual",
                state=state,
                created_at=T0,
                start_date=start,
                end_date=end,
            )
        ).inserted_primary_key[0]
        for ti in instances:
            _insert_instance(conn, spec.dag_id, run_pk, ti)
    return run_pk


def _insert_instance(conn, dag_id: str, run_pk: int, ti: Ti) -> None:
    started = ti.start is not None
    tries = len(ti.tries) + (1 if started else 0)
    ti_pk = conn.execute(
        insert(task_instance).values(
            run_pk=run_pk,
            dag_id=dag_id,
            task_id=ti.task_id,
            state=ti.state,
            try_number=tries,
            max_tries=3,
            queued_at=None if ti.queued is None else at(ti.queued),
            start_date=at(ti.start) if started else None,
            end_date=None if ti.end is None else at(ti.end),
            duration=ti.end - ti.start if started and ti.end is not None else None,
            fence_token=tries,
            map_index=ti.map_index,
        )
    ).inserted_primary_key[0]
    attempts = [*ti.tries]
    if started:
        attempts.append((ti.start, ti.end, ti.state if ti.end is not None else None))
    for number, (start, end, outcome) in enumerate(attempts, 1):
        conn.execute(
            insert(task_attempt).values(
                ti_id=ti_pk,
                run_pk=run_pk,
                dag_id=dag_id,
                task_id=ti.task_id,
                try_number=number,
                fence_token=number,
                worker="w",
                started_at=at(start),
                ended_at=None if end is None else at(end),
                outcome=outcome,
            )
        )


def rects(html: str, cls: str) -> list[dict[str, str]]:
    return Elements(html).select("rect", cls)


def rows(html: str) -> list[dict[str, str]]:
    return Elements(html).select("g", "row")


# ---------------------------------------------------------------- the example

#: extract feeds clean, load_ref and a mapped fan; transform waits for clean and load_ref;
#: report for transform and fan; audit stands alone. clean failed once before it succeeded.
EDGES = {
    "extract": [],
    "clean": ["extract"],
    "load_ref": ["extract"],
    "fan": ["extract"],
    "transform": ["clean", "load_ref"],
    "report": ["transform", "fan"],
    "audit": [],
}
EXAMPLE = [
    Ti("extract", 0, 2, 10),
    Ti("clean", 16, 18, 30, tries=((11, 15, "failed"),)),
    Ti("load_ref", 10, 12, 20),
    Ti("fan", 10, 12, 14, map_index=0),
    Ti("fan", 10, 13, 25, map_index=1),
    Ti("fan", 10, 12, 18, map_index=2),
    Ti("transform", 30, 31, 50),
    Ti("report", 50, 51, 60),
    Ti("audit", 0, 1, 5),
]


@pytest.fixture
def example(sqlite_store: Store):
    spec = spec_of(EDGES)
    save_spec(sqlite_store, spec)
    insert_run(sqlite_store, spec, "r1", EXAMPLE)
    return sqlite_store, WebApp(sqlite_store)


def gantt_path(run_id: str, dag_id: str = "d") -> str:
    return f"{run_url(dag_id, run_id)}/gantt"


def test_one_bar_per_instance_and_per_earlier_try_in_task_order(example):
    store, app = example
    reply = call(app, gantt_path("r1"))
    assert reply.status == 200
    bars = rects(reply.text, "bar")
    assert len(bars) == len(EXAMPLE) + 1  # clean's failed first try
    assert len(rects(reply.text, "try")) == 1
    assert rects(reply.text, "try")[0]["opacity"] == "0.45"
    labels = [r["data-state"] for r in rows(reply.text)]
    assert len(labels) == len(EXAMPLE)
    view = read_gantt(store, "d", "r1")
    assert [r.label for r in view.rows] == [
        "extract",
        "clean",
        "load_ref",
        "fan[0]",
        "fan[1]",
        "fan[2]",
        "transform",
        "report",
        "audit",
    ]


def test_bar_positions_follow_the_times(example):
    store, _ = example
    view = read_gantt(store, "d", "r1")
    scale = CHART_WIDTH / 60  # the run spans 0..60 s
    current = {r.label: r.bars[-1] for r in view.rows}
    for ti in EXAMPLE:
        name = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        bar = current[name]
        assert bar.x == pytest.approx(LABEL_WIDTH + ti.start * scale, abs=0.1)
        assert bar.x + bar.width == pytest.approx(LABEL_WIDTH + ti.end * scale, abs=0.2)
    starts = sorted(
        (ti.start, current[r.label].x) for ti, r in zip(EXAMPLE, view.rows, strict=True)
    )
    assert [x for _, x in starts] == sorted(x for _, x in starts)
    clean = next(r for r in view.rows if r.label == "clean")
    earlier, latest = clean.bars
    assert earlier.earlier and earlier.state == "failed" and earlier.x < latest.x
    assert clean.wait.x == pytest.approx(LABEL_WIDTH + 16 * scale, abs=0.1)
    assert clean.wait.x + clean.wait.width == pytest.approx(latest.x, abs=0.2)


def test_the_critical_path_is_the_chain_that_released_the_last_task(example):
    store, app = example
    view = read_gantt(store, "d", "r1")
    assert view.critical == ["extract", "clean", "transform", "report"]
    reply = call(app, gantt_path("r1"))
    marked = [r for r in rects(reply.text, "bar") if "crit" in r["class"].split()]
    assert len(marked) == 4
    assert "Critical path" in reply.text


def test_a_slow_mapped_index_takes_the_critical_path(sqlite_store):
    spec = spec_of(EDGES)
    save_spec(sqlite_store, spec)
    late = [ti if ti.map_index != 1 else dataclasses.replace(ti, end=55) for ti in EXAMPLE]
    insert_run(sqlite_store, spec, "r2", late)
    assert read_gantt(sqlite_store, "d", "r2").critical == ["extract", "fan[1]", "report"]


def test_critical_path_of_nothing_finished_is_empty():
    assert critical_path([], {}, T0) == []


def test_a_running_instance_reaches_to_now_and_a_skipped_one_has_no_bar(sqlite_store):
    spec = spec_of({"a": [], "b": ["a"], "c": ["a"]}, tz="UTC")
    save_spec(sqlite_store, spec)
    begin = datetime.now(UTC) - timedelta(minutes=10)
    pk = insert_run(sqlite_store, spec, "live", [], state="running", start=begin)
    rows = [
        dict(task_id="a", state="skipped", end_date=begin),
        dict(task_id="b", state="queued", queued_at=begin),
        dict(
            task_id="c", state="running", queued_at=begin, start_date=begin + timedelta(minutes=5)
        ),
    ]
    with sqlite_store.write() as conn:
        for row in rows:
            conn.execute(insert(task_instance).values(run_pk=pk, dag_id="d", **row))
    view = read_gantt(sqlite_store, "d", "live")
    assert [len(r.bars) for r in view.rows] == [0, 0, 1]
    running = view.rows[2].bars[0]
    assert running.x + running.width == pytest.approx(LABEL_WIDTH + CHART_WIDTH, abs=1)
    queued = view.rows[1].wait
    assert queued.x == pytest.approx(LABEL_WIDTH, abs=0.1)
    assert queued.x + queued.width == pytest.approx(LABEL_WIDTH + CHART_WIDTH, abs=1)
    assert view.critical == ["a", "c"]  # c still runs, so it ends last for now


def test_axis_ticks_are_round_local_times(example):
    store, _ = example
    view = read_gantt(store, "d", "r1")
    # 06:00 UTC is 12:00 in Dhaka; 60 s in at most 8 parts: every 10 s from 12:00:00
    expected = [f"12:00:{s:02d}" for s in range(0, 60, 10)] + ["12:01:00"]
    assert [t.label for t in view.ticks] == expected
    assert [t.at for t in view.ticks] == sorted(t.at for t in view.ticks)


def test_a_run_of_quick_tasks_fills_the_axis(sqlite_store):
    """A run of 0.2 s was drawn on an axis of a whole second: its bars took the left fifth."""
    spec = spec_of({"a": [], "b": ["a"]}, tz="UTC")
    save_spec(sqlite_store, spec)
    insert_run(sqlite_store, spec, "quick", [Ti("a", 0, 0.01, 0.08), Ti("b", 0.08, 0.09, 0.2)])
    view = read_gantt(sqlite_store, "d", "quick")
    last = view.rows[-1].bars[-1]
    assert last.x + last.width == pytest.approx(LABEL_WIDTH + CHART_WIDTH, abs=0.2)
    first = view.rows[0].wait
    assert first.x == pytest.approx(LABEL_WIDTH, abs=0.1)
    # 0.2 s in at most 8 parts: every 0.05 s, labelled to the hundredth
    assert [t.label for t in view.ticks] == [
        "06:00:00.00",
        "06:00:00.05",
        "06:00:00.10",
        "06:00:00.15",
        "06:00:00.20",
    ]
    assert view.ticks[-1].at == pytest.approx(LABEL_WIDTH + CHART_WIDTH, abs=0.1)


def test_a_run_of_one_instant_still_has_a_scale(sqlite_store):
    spec = spec_of({"a": []}, tz="UTC")
    save_spec(sqlite_store, spec)
    insert_run(sqlite_store, spec, "instant", [Ti("a", 0, 0, 0)])
    view = read_gantt(sqlite_store, "d", "instant")
    bar = view.rows[0].bars[0]
    assert bar.x == pytest.approx(LABEL_WIDTH) and bar.width == 1.0
    assert view.ticks[0].label == "06:00:00.000"


def test_ids_and_run_ids_are_escaped(sqlite_store):
    spec = spec_of({"<i>t</i>": []})
    save_spec(sqlite_store, spec)
    run_id = "<script>alert('r')</script>"
    insert_run(sqlite_store, spec, run_id, [Ti("<i>t</i>", 0, 1, 2)])
    reply = call(WebApp(sqlite_store), gantt_path(run_id))
    assert reply.status == 200
    assert "<script>alert" not in reply.text and "<i>t</i>" not in reply.text
    assert "&lt;script&gt;alert(&#39;r&#39;)&lt;/script&gt;" in reply.text
    assert "&lt;i&gt;t&lt;/i&gt;" in reply.text
    assert "style=" not in reply.text


@pytest.mark.parametrize(
    "url", [gantt_path("nope"), gantt_path("r1", dag_id="nodag"), "/dags/d/runs//gantt"]
)
def test_unknown_runs_and_dags_are_404(example, url):
    _, app = example
    assert call(app, url).status == 404


def test_the_run_page_links_to_its_gantt_which_is_read_only(example):
    _, app = example
    assert f'href="{gantt_path("r1")}"' in call(app, run_url("d", "r1")).text
    assert call(app, gantt_path("r1"), method="POST").status == 405
    assert call(app, gantt_path("r1"), method="HEAD").status == 200


def test_a_run_without_instances_says_so(sqlite_store):
    spec = spec_of({"a": []})
    save_spec(sqlite_store, spec)
    insert_run(sqlite_store, spec, "empty", [], state="queued", start=None)
    reply = call(WebApp(sqlite_store), gantt_path("empty"))
    assert reply.status == 200 and "no task instances yet" in reply.text


def big_run(store: Store, tasks: int = 200) -> None:
    """A 200-task DAG: four parallel chains that join, every tenth task retried once."""
    ids = [f"task_{i:03d}" for i in range(tasks)]
    edges = {t: [ids[i - 4]] if i >= 4 else [] for i, t in enumerate(ids)}
    spec = spec_of(edges, dag_id="big")
    save_spec(store, spec)
    instances = [
        Ti(
            t,
            i * 3,
            i * 3 + 1,
            i * 3 + 5,
            tries=((i * 3 - 2, i * 3 - 1, "failed"),) * (i % 10 == 0),
        )
        for i, t in enumerate(ids)
    ]
    insert_run(store, spec, "big-run", instances, start=at(-2))


def test_the_gantt_of_a_200_task_run_has_a_bar_per_instance_and_try(sqlite_store):
    """The size bench W5 times (its speed is measured there, not here)."""
    big_run(sqlite_store)
    app = WebApp(sqlite_store)
    reply = call(app, gantt_path("big-run", dag_id="big"))
    assert reply.status == 200
    assert len(rects(reply.text, "bar")) == 200 + 20
