"""The web grid at size: a page of 50 runs of a DAG with 10,000 runs x 30 tasks, on SQLite.

Builds the store by bulk inserts (SQLAlchemy Core executemany), then times requests through
the WSGI application in-process (no sockets, so the number is the app's own cost): the HTML
grid and the /api grid, on the newest page and on a page deep in the history, next to the
same page of a DAG that has only 50 runs. The floor is one plain SELECT of the same task
instances through the same engine: what reading the rows costs before anything is built.

``python -m bench.web_grid [--tiny] [--out results.json]``; ``main(argv) -> dict``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from sqlalchemy import func, insert, select

from dagrun.parsing.spec import DagSpec, TaskSpec
from dagrun.store import Store, registry, sql
from dagrun.store.schema import dag_run, task_instance
from dagrun.store.task_reads import Cell
from dagrun.timing.instants import iso
from dagrun.webapp import WebApp

START = datetime(2000, 1, 1, tzinfo=UTC)
FULL = {"runs": 10_000, "tasks": 30, "page": 50, "repeat": 30}
TINY = {"runs": 500, "tasks": 30, "page": 50, "repeat": 10}
CHUNK = 20_000
FLOOR = "floor: SELECT the page's task instances"


def make_spec(dag_id: str, tasks: int) -> DagSpec:
    """A chain of ``tasks`` tasks with a daily schedule from 2000-01-01 UTC."""
    ids = [f"task_{i:02d}" for i in range(tasks)]
    return DagSpec(
        dag_id=dag_id,
        fileloc=f"<bench {dag_id}>",
        schedule="@daily",
        timezone="UTC",
        start_date=START.isoformat(),
        end_date=None,
        catchup=True,
        max_active_runs=16,
        tasks=tuple(
            TaskSpec(task_id=t, kind="python", upstream=(ids[i - 1],) if i else ())
            for i, t in enumerate(ids)
        ),
    )


def _state(run: int, task: int, runs: int) -> str:
    """Mostly success; every 97th run fails at task 7 (downstream upstream_failed); the
    newest runs are still going."""
    if run >= runs - 2:
        return "success" if task < 5 else "running" if task == 5 else "none"
    if run % 97 == 0 and task >= 7:
        return "failed" if task == 7 else "upstream_failed"
    return "success"


def fill(store: Store, spec: DagSpec, runs: int) -> None:
    """Insert ``runs`` daily runs of ``spec`` and all their task instances in bulk.

    The DAG row goes through the store; the runs and task instances through the driver's
    own ``executemany`` in one transaction (ids given, no read-back), with every datetime
    rendered by the column type's own bind processor, so the rows are those the store
    writes. 3 M task instances take about a minute this way (several through Core).
    """
    with store.write() as conn:
        registry.save_dag(conn, spec, datetime.now(UTC))
        first_pk = (conn.execute(select(func.max(dag_run.c.id))).scalar() or 0) + 1
        first_ti = (conn.execute(select(func.max(task_instance.c.id))).scalar() or 0) + 1
    dialect = store.engine.dialect
    render = dag_run.c.logical_date.type.dialect_impl(dialect).bind_processor(dialect) or (
        lambda v: v
    )
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if store.engine.dialect.name == "sqlite":
            cursor.execute("PRAGMA synchronous=OFF")
            cursor.execute("PRAGMA cache_size=-262144")
            cursor.execute("BEGIN")  # the store's connections run in autocommit mode
        mark = "?" if store.engine.dialect.paramstyle == "qmark" else "%s"
        run_sql, ti_sql = (
            f"INSERT INTO {table} ({columns}) VALUES ({', '.join([mark] * n)})"
            for table, columns in (("dag_run", RUN_COLUMNS), ("task_instance", TI_COLUMNS))
            for n in [columns.count(",") + 1]
        )
        now = render(datetime.now(UTC))
        for start in range(0, runs, CHUNK_RUNS):
            numbers = range(start, min(runs, start + CHUNK_RUNS))
            cursor.executemany(
                run_sql, [_run_row(spec, n, runs, first_pk, now, render) for n in numbers]
            )
            cursor.executemany(
                ti_sql,
                [
                    row
                    for n in numbers
                    for row in _task_rows(spec, n, runs, first_pk, first_ti, render)
                ],
            )
        raw.commit()
    finally:
        raw.close()


RUN_COLUMNS = (
    "id, dag_id, run_id, logical_date, data_interval_start, data_interval_end, run_type, "
    "state, created_at, start_date, end_date"
)
TI_COLUMNS = (
    "id, run_pk, dag_id, task_id, state, try_number, failures, infra_failures, max_tries, "
    "priority_weight, fence_token, start_date, end_date, duration, capped, map_index"
)
#: Runs per executemany (30 task instances each).
CHUNK_RUNS = 2_000


def _run_row(spec: DagSpec, n: int, runs: int, first_pk: int, now: str, render) -> tuple:
    logical = START + timedelta(days=n)
    state = "running" if n >= runs - 2 else "failed" if n % 97 == 0 else "success"
    end = None if n >= runs - 2 else render(logical + timedelta(days=1, minutes=30))
    return (
        first_pk + n,
        spec.dag_id,
        f"scheduled__{logical.isoformat()}",
        render(logical),
        render(logical),
        render(logical + timedelta(days=1)),
        "scheduled",
        state,
        now,
        render(logical + timedelta(days=1)),
        end,
    )


def _minutes(render, base: datetime, count: int) -> list[str]:
    """``render(base + i minutes)`` for i < count, from one rendering of ``base`` (a
    midnight): the minutes' digits are replaced in place, checked against the processor."""
    text = render(base)
    if not isinstance(text, str):  # a driver that takes datetimes: nothing to save
        return [render(base + timedelta(minutes=i)) for i in range(count)]
    head, tail = text[:14], text[16:]
    found = [f"{head}{i:02d}{tail}" for i in range(count)]
    if found[-1] != render(base + timedelta(minutes=count - 1)):
        raise RuntimeError(f"unexpected datetime rendering {text!r}")
    return found


def _task_rows(
    spec: DagSpec, n: int, runs: int, first_pk: int, first_ti: int, render
) -> Iterator[tuple]:
    minutes = _minutes(render, START + timedelta(days=n + 1), len(spec.tasks) + 1)
    ti = first_ti + n * len(spec.tasks)
    for i, task in enumerate(spec.tasks):
        state = _state(n, i, runs)
        finished = state not in ("none", "running")
        yield (
            ti + i,
            first_pk + n,
            spec.dag_id,
            task.task_id,
            state,
            0 if state == "none" else 1,
            1 if state == "failed" else 0,
            0,
            2,
            1,
            0,
            None if state == "none" else minutes[i],
            minutes[i + 1] if finished else None,
            60.0 + (n * 7 + i) % 50 if finished else None,
            False,
            -1,
        )


# ---------------------------------------------------------------- measuring


def wsgi_get(app: WebApp, url: str) -> tuple[int, bytes]:
    """One GET through the application, as wsgiref would call it."""
    parts = urlsplit(url)
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": unquote(parts.path),  # as a server passes it: decoded
        "QUERY_STRING": parts.query,
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "wsgi.input": BytesIO(),
        "wsgi.url_scheme": "http",
    }
    status: list[int] = []
    body = b"".join(app(environ, lambda s, _headers: status.append(int(s.split()[0]))))
    return status[0], body


def timed(actions: dict[str, Callable[[], object]], repeat: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU milliseconds per action, taken round-robin.

    Interleaving the actions spreads any noise from other processes over all of them
    alike, so their ratios hold even on a busy machine; CPU time is the steadier number.
    """
    for action in actions.values():
        action()  # warm caches (specs, statement compilation, SQLite pages)
    wall: dict[str, list[float]] = {name: [] for name in actions}
    cpu: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            action()
            cpu[name].append((time.process_time() - started_cpu) * 1000)
            wall[name].append((time.perf_counter() - started) * 1000)
    return {
        name: {
            "median_ms": round(statistics.median(wall[name]), 3),
            "p95_ms": round(sorted(wall[name])[int(0.95 * (len(wall[name]) - 1))], 3),
            "cpu_median_ms": round(statistics.median(cpu[name]), 3),
        }
        for name in actions
    }


def checked_get(app: WebApp, url: str, cells: int) -> Callable[[], object]:
    """A request that fails the benchmark unless it renders the whole page (no error pages)."""

    def run() -> None:
        status, body = wsgi_get(app, url)
        found = body.count(b'class="cell ') if "/api/" not in url else body.count(b'"run_id"')
        if status != 200 or found < cells:
            raise RuntimeError(f"GET {url}: status {status}, {found} cells (want {cells})")

    return run


def floor_query(store: Store, dag_id: str, before: datetime | None, page: int) -> Callable:
    """The floor: one plain SELECT of the page's task instances, their pks known up front."""
    with store.read() as conn:
        stmt = select(dag_run.c.id).where(dag_run.c.dag_id == dag_id)
        if before is not None:
            stmt = stmt.where(dag_run.c.logical_date < before)
        pks = conn.execute(stmt.order_by(dag_run.c.logical_date.desc()).limit(page)).scalars().all()
    cols = [task_instance.c[name] for name in Cell.__dataclass_fields__]  # the grid's columns
    query = select(*cols).where(task_instance.c.run_pk.in_(pks))

    def run() -> None:
        with store.engine.connect() as conn:
            conn.execute(query).all()

    return run


def count_selects(store: Store, action: Callable[[], object]) -> int:
    statements: list[str] = []

    with sql.observed(lambda statement, *_: statements.append(statement)):
        action()
    return sum(1 for s in statements if s.lstrip().upper().startswith("SELECT"))


def page_get(app: WebApp, url: str, expect: bytes) -> Callable[[], object]:
    """A request that fails the benchmark unless it answers 200 with ``expect`` in it."""

    def run() -> None:
        status, body = wsgi_get(app, url)
        if status != 200 or expect not in body:
            raise RuntimeError(f"GET {url}: status {status}, {expect!r} in body: {expect in body}")

    return run


def picture_requests(app: WebApp, run_id: str) -> tuple[dict[str, Callable], dict[str, str]]:
    """The graph and the Gantt of the 200-task run, if the app has those pages yet: the
    timed actions, and the pages left out with why (a 404 means not built yet)."""
    run = quote(run_id, safe="")
    urls = {
        GRAPH: f"/dags/{LAYERED}/graph?run={run}",
        GANTT: f"/dags/{LAYERED}/runs/{run}/gantt",
    }
    actions, missing = {}, {}
    for name, url in urls.items():
        status, _ = wsgi_get(app, url)
        if status == 200:
            actions[name] = page_get(app, url, LAST_TASK.encode())
        else:
            missing[name] = "not available (404)" if status == 404 else f"error: status {status}"
    return actions, missing


def measure(store: Store, sizes: dict[str, int], run_id: str | None = None) -> dict[str, Any]:
    app = WebApp(store, logs_root=Path(tempfile.gettempdir()))
    page, runs, repeat = sizes["page"], sizes["runs"], sizes["repeat"]
    cells = page * sizes["tasks"]
    deep = iso(START + timedelta(days=runs // 2))
    requests = {
        "html grid, newest page": f"/dags/wide/grid?runs={page}&refresh=0",
        "html grid, deep page": f"/dags/wide/grid?runs={page}&before={deep}",
        "api grid, newest page": f"/api/dags/wide/grid?runs={page}",
        "api grid, deep page": f"/api/dags/wide/grid?runs={page}&before={deep}",
        f"html grid, DAG with {page} runs": f"/dags/fresh/grid?runs={page}",
    }
    actions = {FLOOR: floor_query(store, "wide", None, page)}
    for name, url in requests.items():
        actions[name] = checked_get(app, url, cells if "/api/" not in url else page)
    actions[DAG_LIST] = page_get(app, "/", b"fresh")
    missing: dict[str, str] = {}
    if run_id is not None:
        pictures, missing = picture_requests(app, run_id)
        actions.update(pictures)
    results = timed(actions, repeat)
    for found in results.values():
        found["x_floor"] = round(found["median_ms"] / results[FLOOR]["median_ms"], 1)
        found["cpu_x_floor"] = round(found["cpu_median_ms"] / results[FLOOR]["cpu_median_ms"], 1)
    selects = count_selects(store, checked_get(app, requests["html grid, deep page"], cells))
    targets = [
        {
            "target": f"{name} of {LAYERED_TASKS} tasks, server side (ms)",
            "value": results[name]["median_ms"] if name in results else None,
            "limit": PICTURE_MS,
            "met": name in results and results[name]["median_ms"] < PICTURE_MS,
        }
        for name in (GRAPH, GANTT)
        if run_id is not None
    ]
    return {
        "results": results,
        "unavailable": missing,
        "selects_per_grid_request": selects,
        "cells_per_page": cells,
        "targets": targets,
    }


# ---------------------------------------------------------------- a 200-task DAG and its run

LAYERED = "layered"
LAYERED_TASKS = 200
#: Tasks per layer: four roots, fanning out, then in to a last layer of twelve.
LAYER_WIDTHS = (4, 20, 24, 24, 24, 24, 24, 24, 20, 12)
LAST_TASK = f"l{len(LAYER_WIDTHS) - 1}_t{LAYER_WIDTHS[-1] - 1:02d}"
GRAPH, GANTT, DAG_LIST = "graph, 200-task run", "gantt, 200-task run", "dag list"
PICTURE_MS = 50.0


def layered_spec() -> DagSpec:
    """200 tasks in ten layers; each task waits for two or three of the layer before."""
    layers = [[f"l{k}_t{j:02d}" for j in range(w)] for k, w in enumerate(LAYER_WIDTHS)]
    tasks = []
    for k, layer in enumerate(layers):
        prev = layers[k - 1] if k else []
        for j, task_id in enumerate(layer):
            picks = (0, 3, 5) if j % 3 == 0 else (0, 3)
            ups = {prev[(j * 7 + d) % len(prev)] for d in picks} if prev else set()
            tasks.append(TaskSpec(task_id=task_id, kind="python", upstream=tuple(sorted(ups))))
    assert len(tasks) == LAYERED_TASKS
    return replace(make_spec(LAYERED, 1), tasks=tuple(tasks))


def fill_layered(store: Store) -> str:
    """The 200-task DAG and one finished run of it, its instances queued, started and ended
    layer by layer a few seconds apart; the run's id."""
    spec = layered_spec()
    logical = START
    run_start = logical + timedelta(days=1)
    now = datetime.now(UTC)
    run_id = f"scheduled__{logical.isoformat()}"
    layer_of = {t.task_id: int(t.task_id[1 : t.task_id.index("_")]) for t in spec.tasks}
    with store.write() as conn:
        registry.save_dag(conn, spec, now)
        conn.execute(
            insert(dag_run),
            [
                {
                    "dag_id": LAYERED,
                    "run_id": run_id,
                    "logical_date": logical,
                    "data_interval_start": logical,
                    "data_interval_end": run_start,
                    "run_type": "scheduled",
                    "state": "success",
                    "created_at": now,
                    "start_date": run_start,
                    "end_date": run_start + timedelta(minutes=20),
                }
            ],
        )
        pk = conn.execute(select(dag_run.c.id).where(dag_run.c.dag_id == LAYERED)).scalar_one()
        rows = []
        for i, task in enumerate(spec.tasks):
            queued = run_start + timedelta(seconds=90 * layer_of[task.task_id] + (i % 5) * 2)
            started = queued + timedelta(seconds=1 + i % 3)
            duration = 20.0 + (i * 13) % 60
            rows.append(
                {
                    "run_pk": pk,
                    "dag_id": LAYERED,
                    "task_id": task.task_id,
                    "state": "success",
                    "try_number": 1,
                    "max_tries": 1,
                    "queued_at": queued,
                    "start_date": started,
                    "end_date": started + timedelta(seconds=duration),
                    "duration": duration,
                }
            )
        conn.execute(insert(task_instance), rows)
    return run_id


def build(path: Path, sizes: dict[str, int]) -> tuple[Store, float, str]:
    """The W5 store at ``sizes``: the big DAG, the 50-run one, the 200-task run; the store,
    the seconds it took to build and the 200-task run's id."""
    store = Store(f"sqlite:///{path}")
    started = time.perf_counter()
    fill(store, make_spec("wide", sizes["tasks"]), sizes["runs"])
    fill(store, make_spec("fresh", sizes["tasks"]), sizes["page"])
    run_id = fill_layered(store)
    return store, time.perf_counter() - started, run_id


# ---------------------------------------------------------------- entry point


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.web_grid", description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="500 runs: seconds, for CI.")
    parser.add_argument("--runs", type=int, default=None, help="Runs of the big DAG.")
    parser.add_argument("--repeat", type=int, default=None, help="Requests per measurement.")
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON.")
    return parser.parse_args(argv)


def render(document: dict[str, Any]) -> str:
    sizes = document["sizes"]
    lines = [
        f"web grid: {sizes['runs']:,} runs x {sizes['tasks']} tasks on SQLite; a page of "
        f"{sizes['page']} runs ({document['cells_per_page']} cells); median of "
        f"{sizes['repeat']} requests; {document['selects_per_grid_request']} SELECTs per grid page",
        f"{'request':<44}{'median ms':>10}{'p95 ms':>9}{'x floor':>9}{'cpu ms':>9}{'x floor':>9}",
    ]
    for name, r in document["results"].items():
        lines.append(
            f"{name:<44}{r['median_ms']:>10.2f}{r['p95_ms']:>9.2f}{r['x_floor']:>9.1f}"
            f"{r['cpu_median_ms']:>9.2f}{r['cpu_x_floor']:>9.1f}"
        )
    for name, why in document.get("unavailable", {}).items():
        lines.append(f"{name:<44}{why}")
    lines.append(f"(store built in {document['build_seconds']:.1f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Build the store, measure, print the table; returns (and optionally writes) the JSON."""
    args = parse_args(argv)
    sizes = dict(TINY if args.tiny else FULL)
    sizes.update({k: v for k, v in (("runs", args.runs), ("repeat", args.repeat)) if v})
    with tempfile.TemporaryDirectory(prefix="dagrun-web-bench-") as scratch:
        store, seconds, run_id = build(Path(scratch) / "web.db", sizes)
        try:
            document = {
                "sizes": sizes,
                "build_seconds": round(seconds, 2),
                **measure(store, sizes, run_id),
            }
        finally:
            store.dispose()
    print(render(document))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=2))
        print(f"results written to {args.out}", file=sys.stderr)
    return document


# ---------------------------------------------------------------- W5XL

#: W5XL's sizes: ten times W5's runs (3 M task instances); a shorter series of requests.
XL = {"runs": 100_000, "tasks": 30, "page": 50, "repeat": 15}
TINY_XL = {"runs": 5_000, "tasks": 30, "page": 50, "repeat": 5}
#: The pages whose time must not grow with the history (target: within 1.5x of W5's).
SCALED = (
    "html grid, newest page",
    "html grid, deep page",
    "api grid, newest page",
    "api grid, deep page",
    DAG_LIST,
)


def w5xl(ctx) -> dict[str, Any]:
    """The grid, the DAG list and the pictures over 100,000 runs x 30 tasks, beside W5's
    10,000 (W5 of this invocation when it ran, else measured here): page time growth."""
    small_sizes, sizes = (TINY, TINY_XL) if ctx.tiny else (FULL, XL)
    known = ctx.results.get("W5", {})
    if known.get("status") == "ok" and known.get("sizes", {}).get("runs") == small_sizes["runs"]:
        small = {**known, "from": "W5 in this invocation"}
    else:
        small = {
            **measured(ctx.folder("W5XL-small") / "web.db", small_sizes),
            "from": "measured here",
        }
    large = measured(ctx.folder("W5XL") / "web.db", sizes)
    targets = []
    for name in SCALED:
        if name in small["results"] and name in large["results"]:
            targets.append(scale_target(name, small["results"][name], large["results"][name], 1.5))
    return {
        "title": f"web pages over {sizes['runs']:,} runs x {sizes['tasks']} tasks vs "
        f"{small_sizes['runs']:,}",
        "kind": "scale",
        "small": small,
        "large": large,
        "targets": targets + large["targets"],
    }


def scale_target(name: str, small: dict, large: dict, limit: float) -> dict:
    ratio = large["median_ms"] / small["median_ms"]
    return {
        "target": f"{name}: large / small ms per page",
        "small": small["median_ms"],
        "large": large["median_ms"],
        "value": ratio,
        "limit": limit,
        "met": ratio <= limit,
    }


def measured(path: Path, sizes: dict[str, int]) -> dict[str, Any]:
    """Build the store at ``path`` and measure it; its file size too."""
    store, seconds, run_id = build(path, sizes)
    try:
        found = measure(store, sizes, run_id)
    finally:
        store.dispose()
    size = sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))
    return {"sizes": sizes, "build_seconds": round(seconds, 2), "db_mb": size / 1e6, **found}


if __name__ == "__main__":
    main()
