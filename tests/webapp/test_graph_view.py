"""The Graph view: the layout alone (layers, edges, group frames, the cache), then the page
called in-process through WSGI on a store filled by the real transitions."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from pathlib import Path

import pytest

from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.runtime.dag_sync import sync_dags
from dagrun.states import RunType
from dagrun.store import Store, dag_reads, registry, runs
from dagrun.webapp import WebApp, graph_view, run_url
from dagrun.webapp.graph_view import BOX_HEIGHT, BOX_WIDTH, Layout, compute_layout, layout_of
from dagrun.webapp.urls import graph_url
from tests.helpers import bare_spec, write_dag
from tests.webapp.test_webapp import Elements, call, make_runs, work_off

PIPES_DAG = """
    from dagrun import DAG, TaskGroup, task

    with DAG("pipes", schedule="@daily", start_date="2026-01-01"):
        @task
        def extract():
            return 1

        @task
        def dedupe(x):
            return x

        @task
        def validate(x):
            return x

        @task
        def check(x):
            return x

        @task
        def score(x):
            return x

        @task
        def a_task_whose_name_is_far_too_long_for_its_box(*values):
            return 1

        e = extract()
        with TaskGroup("clean"):
            d = dedupe(e)
            with TaskGroup("inner"):
                v = validate(d)
                c = check(d)
        s = score.expand(x=[1, 2, 3])
        e >> s
        a_task_whose_name_is_far_too_long_for_its_box(v, c, s)
    """
PIPES_TASKS = 6
PIPES_EDGES = 7
LONG_ID = "a_task_whose_name_is_far_too_long_for_its_box"


def task(task_id: str, *upstream: str, group: str | None = None) -> TaskSpec:
    return TaskSpec(task_id=task_id, kind="python", upstream=upstream, group=group)


def wide_spec(dag_id: str = "wide", layers: int = 20, width: int = 10) -> DagSpec:
    """``layers`` x ``width`` tasks, each fed by two of the layer before; every five layers a
    group, split in two nested groups: 200 tasks by default."""
    tasks = []
    for i, j in itertools.product(range(layers), range(width)):
        ups = (f"l{i - 1:02d}_t{j}", f"l{i - 1:02d}_t{(j + 1) % width}") if i else ()
        group = f"stage{i // 5}.part{j * 2 // width}"
        tasks.append(task(f"l{i:02d}_t{j}", *ups, group=group))
    spec = bare_spec(*tasks, dag_id=dag_id)
    return replace(spec, schedule="@daily", start_date="2026-01-01T00:00:00+00:00")


def boxes_meet(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether two (x, y, width, height) rectangles overlap."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def node_boxes(layout: Layout) -> dict[str, tuple[int, int, int, int]]:
    return {n.task_id: (n.x, n.y, BOX_WIDTH, BOX_HEIGHT) for n in layout.nodes}


def frame_boxes(layout: Layout) -> dict[str, tuple[int, int, int, int]]:
    return {f.path: (f.x, f.y, f.width, f.height) for f in layout.frames}


def inside(inner: tuple[int, int, int, int], outer: tuple[int, int, int, int]) -> bool:
    return (
        outer[0] < inner[0]
        and inner[0] + inner[2] < outer[0] + outer[2]
        and outer[1] < inner[1]
        and inner[1] + inner[3] < outer[1] + outer[3]
    )


# ---------------------------------------------------------------- the layout


def test_layers_go_left_to_right_and_every_edge_goes_to_a_later_layer():
    spec = bare_spec(
        task("a"), task("b", "a"), task("c", "a"), task("d", "b", "c"), task("e", "a", "d")
    )
    layout = compute_layout(spec)
    nodes = {n.task_id: n for n in layout.nodes}
    assert {t: n.layer for t, n in nodes.items()} == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}
    assert nodes["a"].x < nodes["b"].x == nodes["c"].x < nodes["d"].x < nodes["e"].x
    assert len(layout.edges) == 6
    for edge in layout.edges:
        up, down = nodes[edge.upstream], nodes[edge.downstream]
        assert up.layer < down.layer
        start, end = edge.d.split(" ")[0], edge.d.split(" ")[-1]
        assert start == f"M{up.x + BOX_WIDTH},{up.y + BOX_HEIGHT // 2}"  # right side
        assert end == f"{down.x},{down.y + BOX_HEIGHT // 2}"  # left side
    assert layout.width >= nodes["e"].x + BOX_WIDTH
    assert layout.height >= max(n.y for n in layout.nodes) + BOX_HEIGHT


def test_ordering_within_a_layer_removes_a_crossing():
    # In definition order c (fed by b) would sit above d (fed by a): their edges would cross.
    spec = bare_spec(task("a"), task("b"), task("c", "b"), task("d", "a"))
    nodes = {n.task_id: n for n in compute_layout(spec).nodes}
    assert nodes["a"].y < nodes["b"].y
    assert nodes["d"].y < nodes["c"].y
    assert nodes["d"].y == nodes["a"].y  # a chain runs straight


def test_a_join_sits_between_its_upstreams():
    spec = bare_spec(task("a"), task("b1", "a"), task("b2", "a"), task("b3", "a"))
    spec = replace(spec, tasks=(*spec.tasks, task("j", "b1", "b2", "b3")))
    nodes = {n.task_id: n for n in compute_layout(spec).nodes}
    assert nodes["j"].y == nodes["b2"].y


def test_group_frames_enclose_their_tasks_and_nested_frames_and_nothing_else():
    layout = compute_layout(wide_spec(layers=10, width=6))
    nodes, frames = node_boxes(layout), frame_boxes(layout)
    assert set(frames) == {f"stage{s}" for s in (0, 1)} | {
        f"stage{s}.part{p}" for s in (0, 1) for p in (0, 1)
    }
    for path, frame in frames.items():
        members = {t for t in nodes if t in _members(path, layers=10, width=6)}
        for task_id, box in nodes.items():
            if task_id in members:
                assert inside(box, frame), (task_id, path)
            else:
                assert not boxes_meet(box, frame), (task_id, path)
        for other, box in frames.items():
            if other.startswith(path + "."):
                assert inside(box, frame), (other, path)
            elif not path.startswith(other + ".") and other != path:
                assert not boxes_meet(box, frame), (other, path)


def _members(path: str, layers: int, width: int) -> set[str]:
    return {
        f"l{i:02d}_t{j}"
        for i, j in itertools.product(range(layers), range(width))
        if f"stage{i // 5}.part{j * 2 // width}".startswith(path)
    }


def test_no_two_boxes_overlap():
    boxes = list(node_boxes(compute_layout(wide_spec())).values())
    assert len(boxes) == 200
    assert not any(boxes_meet(a, b) for a, b in itertools.combinations(boxes, 2))


def test_a_dag_without_tasks_lays_out_empty():
    layout = compute_layout(bare_spec())
    assert layout.nodes == () and layout.edges == () and layout.frames == ()


def test_the_layout_is_computed_once_per_spec(monkeypatch):
    spec = wide_spec()
    computed = []
    real = graph_view.compute_layout
    monkeypatch.setattr(graph_view, "compute_layout", lambda s: computed.append(s) or real(s))
    first = layout_of(spec)
    assert layout_of(spec) is first
    assert computed == [spec]
    other = wide_spec()  # equal, but another object: laid out on its own
    assert layout_of(other) is not first and computed == [spec, other]


def test_long_ids_are_cut_and_whole_in_the_title():
    spec = bare_spec(task(LONG_ID))
    (box,) = graph_view.picture(spec, None, []).boxes
    assert box.caption.endswith("…") and len(box.caption) == graph_view.LABEL_CHARS
    assert LONG_ID.startswith(box.caption[:-1])
    assert box.title == LONG_ID


# ---------------------------------------------------------------- the page


@pytest.fixture
def pipes(sqlite_store: Store, tmp_path: Path) -> tuple[WebApp, str]:
    """The pipes DAG, one run: check fails (its join upstream_failed), the rest succeed."""
    write_dag(tmp_path / "dags", "pipes.py", PIPES_DAG)
    sync_dags(sqlite_store, str(tmp_path / "dags"))
    with sqlite_store.read() as conn:
        spec = dag_reads.get_dag(conn, "pipes").spec
    (run_id,) = make_runs(sqlite_store, spec, 1)
    logs = tmp_path / "logs"
    work_off(
        sqlite_store, spec, logs, lambda c: "bad" if c.task_id == "clean.inner.check" else None
    )
    return WebApp(sqlite_store, logs_root=logs), run_id


def task_links(page: Elements) -> list[str]:
    return [a["href"] for t, a in page.found if t == "a" and "#task-" in a.get("href", "")]


def graph_of(reply) -> Elements:
    assert reply.status == 200, reply.text
    return Elements(reply.text)


def test_the_graph_draws_a_box_per_task_an_arrow_per_edge_and_the_groups(pipes):
    app, _ = pipes
    page = graph_of(call(app, "/dags/pipes/graph"))
    (svg,) = page.select("svg", "graph")
    assert (svg["data-tasks"], svg["data-edges"]) == (str(PIPES_TASKS), str(PIPES_EDGES))
    assert len(page.select("rect", "task")) == PIPES_TASKS
    assert len(page.select("path", "edge")) == PIPES_EDGES
    assert [g["data-group"] for g in page.select("g", "group")] == ["clean", "clean.inner"]
    assert {r["class"] for r in page.select("rect", "task")} == {"task s-none"}
    assert not task_links(page)  # no run: no task instance to link to
    text = call(app, "/dags/pipes/graph").text
    assert "score [ ]</text>" in text
    cut = LONG_ID[: graph_view.LABEL_CHARS - 1] + "…"
    assert f"{cut}</text>" in text and f"<title>{LONG_ID}</title>" in text


def test_with_a_run_boxes_take_its_states_and_link_to_its_task_instances(pipes):
    app, run_id = pipes
    reply = call(app, graph_url("pipes", run_id))
    page = graph_of(reply)
    states = {g["data-task"]: g["data-state"] for g in page.select("g", "task")}
    assert states == {
        "extract": "success",
        "clean.dedupe": "success",
        "clean.inner.validate": "success",
        "clean.inner.check": "failed",
        "score": "success",
        LONG_ID: "upstream_failed",
    }
    classes = [r["class"] for r in page.select("rect", "task")]
    assert sorted(classes) == sorted(f"task s-{s}" for s in states.values())
    links = task_links(page)
    base = run_url("pipes", run_id)
    assert f"{base}#task-clean.inner.check" in links
    assert f"{base}#task-score-0" in links  # a mapped task: its first index's line
    assert len(links) == PIPES_TASKS
    assert "score \N{MULTIPLICATION SIGN} 3</text>" in reply.text
    assert "3 mapped: 3 success · at most try 1 of 1" in reply.text
    assert "clean.inner.check\nfailed · try 1 of 1</title>" in reply.text
    assert "legend" in reply.text


def test_the_run_picker_header_and_run_page_link_to_the_graph(pipes):
    app, run_id = pipes
    page = call(app, "/dags/pipes/graph").text
    assert f'href="{graph_url("pipes", run_id)}"'.replace("&", "&amp;") in page
    for url in ("/dags/pipes/grid", run_url("pipes", run_id)):
        assert 'href="/dags/pipes/graph"' in call(app, url).text
    assert f'href="{graph_url("pipes", run_id)}"' in call(app, run_url("pipes", run_id)).text


def test_the_api_mirrors_the_page(pipes):
    app, run_id = pipes
    document = call(app, "/api" + graph_url("pipes", run_id)).json()
    page = graph_of(call(app, graph_url("pipes", run_id)))
    assert document["run_id"] == run_id
    nodes = {n["task_id"]: n for n in document["nodes"]}
    for g, rect in zip(page.select("g", "task"), page.select("rect", "task"), strict=True):
        node = nodes[g["data-task"]]
        assert (node["state"], str(node["x"]), str(node["y"])) == (
            g["data-state"],
            rect["x"],
            rect["y"],
        )
    assert nodes["score"]["mapped"] and nodes["clean.inner.check"]["layer"] == 2
    assert len(document["edges"]) == PIPES_EDGES
    assert ["clean.dedupe", "clean.inner.check"] in document["edges"]
    assert [g["group"] for g in document["groups"]] == ["clean", "clean.inner"]
    plain = call(app, "/api/dags/pipes/graph").json()
    assert plain["run_id"] is None and {n["state"] for n in plain["nodes"]} == {"none"}
    assert call(app, "/api/dags/pipes/graph?run=nope").json()["status"] == 404


@pytest.mark.parametrize(
    "url", ["/dags/pipes/graph?run=no-such-run", "/dags/nope/graph", "/dags/nope/graph?run=x"]
)
def test_an_unknown_dag_or_run_is_a_404(pipes, url):
    reply = call(pipes[0], url)
    assert reply.status == 404 and "404 Not Found" in reply.text and "Traceback" not in reply.text


def test_the_page_is_read_only_and_keeps_the_csp(pipes):
    app, run_id = pipes
    assert call(app, "/dags/pipes/graph", "POST").status == 405
    head = call(app, graph_url("pipes", run_id), "HEAD")
    assert head.status == 200 and head.body == b""
    reply = call(app, graph_url("pipes", run_id))
    assert "default-src 'none'" in reply.headers["Content-Security-Policy"]
    assert "style=" not in reply.text
    scripts = [a for t, a in Elements(reply.text).found if t == "script"]
    assert all(a.get("src") for a in scripts)  # none inline


def test_ids_groups_and_run_ids_are_escaped(sqlite_store: Store, tmp_path: Path):
    """Ids are validated when a DAG file is parsed; a stored spec is escaped all the same."""
    spec = bare_spec(
        task("x<b>bold</b>"),
        task('q"><script>alert(1)</script>', "x<b>bold</b>", group="<i>g</i>"),
        dag_id="esc",
    )
    spec = replace(spec, schedule="@daily", start_date="2026-01-01T00:00:00+00:00")
    run_id = "manual <img src=x onerror=alert(2)>"
    now = sqlite_store.now()
    first = spec.timetable.next_interval(None).start
    (interval,) = spec.timetable.intervals(first, first)
    with sqlite_store.write() as conn:
        registry.save_dag(conn, spec, now)
        runs.create_manual_run(conn, spec, interval, run_id, now)
    app = WebApp(sqlite_store, logs_root=tmp_path / "logs")
    for url in ("/dags/esc/graph", graph_url("esc", run_id)):
        text = call(app, url).text
        for raw in ("<b>", "<script>alert", "<i>g", "<img"):
            assert raw not in text, (url, raw)
    text = call(app, graph_url("esc", run_id)).text
    assert "x&lt;b&gt;bold&lt;/b&gt;" in text and "&lt;i&gt;g&lt;/i&gt;" in text
    assert "manual &lt;img src=x onerror=alert(2)&gt;" in text


def test_a_200_task_dag_with_a_run_renders(sqlite_store: Store, tmp_path: Path):
    spec = wide_spec()
    now = sqlite_store.now()
    first = spec.timetable.next_interval(None).start
    with sqlite_store.write() as conn:
        registry.save_dag(conn, spec, now)
        runs.create_runs(conn, spec, spec.timetable.intervals(first, first), RunType.BACKFILL, now)
        runs.admit_runs(conn, spec, 1, now)
        runs.start_runs(conn, spec, now)
    work_off(
        sqlite_store, spec, tmp_path / "logs", lambda c: "bad" if c.task_id == "l10_t3" else None
    )
    app = WebApp(sqlite_store, logs_root=tmp_path / "logs")
    run_id = runs.run_id_for(RunType.BACKFILL, first)
    page = graph_of(call(app, graph_url("wide", run_id)))
    assert len(page.select("rect", "task")) == 200
    assert len(page.select("path", "edge")) == 2 * 190
    assert len(page.select("g", "group")) == 12
    states = [g["data-state"] for g in page.select("g", "task")]
    assert states.count("failed") == 1 and states.count("success") > 100


KINDS_DAG = """
    from dagrun import DAG, BashTask, task

    with DAG("kinds", schedule=None):
        @task
        def shops():
            return ["berlin", "paris"]

        @task
        def extract(shop):
            return shop

        @task.sensor(poke_interval=1, timeout=5)
        def ready():
            return True

        ready() >> extract.expand(shop=shops()) >> BashTask("load", command="echo")
    """
AIRFLOW_DAG = """
    from airflow import DAG
    from airflow.decorators import task
    from airflow.operators.bash import BashOperator

    with DAG("af", schedule=None):
        @task
        def hello():
            return 1

        hello() >> BashOperator(task_id="say", bash_command="echo hi")
    """


def test_each_box_says_what_its_task_is(sqlite_store: Store, tmp_path: Path):
    write_dag(tmp_path / "dags", "kinds.py", KINDS_DAG)
    write_dag(tmp_path / "dags", "af.py", AIRFLOW_DAG)
    sync_dags(sqlite_store, str(tmp_path / "dags"))
    app = WebApp(sqlite_store)
    kinds = {}
    for dag_id in ("kinds", "af"):
        reply = call(app, f"/dags/{dag_id}/graph")
        found = kinds_on(reply.text)
        assert len(found) == len(graph_of(reply).select("rect", "task"))
        kinds.update(found)
    assert kinds == {
        "shops": "python",
        "extract": "python \N{MIDDLE DOT} mapped",
        "ready": "sensor",
        "load": "bash",
        "hello": "@task",
        "say": "BashOperator",
    }


def kinds_on(html: str) -> dict[str, str]:
    """Each box's task id and the kind written on it."""
    box = r'<g class="task" data-task="([^"]+)".*?<text class="task-kind"[^>]*>([^<]*)</text>'
    return dict(re.findall(box, html, re.S))


def test_a_long_kind_is_cut_and_the_kind_sits_above_the_caption():
    long = TaskSpec(task_id="t", kind="AVeryLongProviderOperatorClassName", upstream=())
    assert graph_view.kind_of(long) == "AVeryLongProviderOperator…"
    assert len(graph_view.kind_of(long)) == graph_view.KIND_CHARS
    (node,) = compute_layout(bare_spec(long)).nodes
    assert node.kind == "AVeryLongProviderOperator…"
    assert node.kind_at[1] + 3 < node.label_at[1] - 9  # a 10px line above a 12px one
    assert node.kind_at[0] <= node.x + BOX_WIDTH and node.label_at[1] < node.y + BOX_HEIGHT


def test_an_edge_label_sits_at_the_middle_of_its_edge():
    spec = replace(
        bare_spec(task("check"), task("load", "check"), task("alert", "check")),
        edge_labels=(("check", "load", "rows > 0"),),
    )
    edges = {(e.upstream, e.downstream): e for e in compute_layout(spec).edges}
    labelled, plain = edges["check", "load"], edges["check", "alert"]
    assert (labelled.label, plain.label) == ("rows > 0", None)
    nodes = {n.task_id: n for n in compute_layout(spec).nodes}
    left, right = nodes["check"].x + BOX_WIDTH, nodes["load"].x
    assert left < labelled.label_at[0] < right
