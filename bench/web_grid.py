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
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import insert, select

from dagrun.instants import iso
from dagrun.spec import DagSpec, TaskSpec
from dagrun.store import Store, registry, sql
from dagrun.store.reads import Cell
from dagrun.store.schema import dag_run, task_instance
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
    """Insert ``runs`` daily runs of ``spec`` and all their task instances in bulk."""
    now = datetime.now(UTC)
    with store.write() as conn:
        registry.save_dag(conn, spec, now)
        conn.execute(insert(dag_run), list(_run_rows(spec, runs, now)))
        pks = dict(
            conn.execute(
                select(dag_run.c.logical_date, dag_run.c.id).where(dag_run.c.dag_id == spec.dag_id)
            ).all()
        )
        rows = list(_task_rows(spec, runs, pks, now))
        for start in range(0, len(rows), CHUNK):
            conn.execute(insert(task_instance), rows[start : start + CHUNK])


def _run_rows(spec: DagSpec, runs: int, now: datetime) -> Iterator[dict[str, Any]]:
    for n in range(runs):
        logical = START + timedelta(days=n)
        yield {
            "dag_id": spec.dag_id,
            "run_id": f"scheduled__{logical.isoformat()}",
            "logical_date": logical,
            "data_interval_start": logical,
            "data_interval_end": logical + timedelta(days=1),
            "run_type": "scheduled",
            "state": "running" if n >= runs - 2 else "failed" if n % 97 == 0 else "success",
            "created_at": now,
            "start_date": logical + timedelta(days=1),
            "end_date": None if n >= runs - 2 else logical + timedelta(days=1, minutes=30),
        }


def _task_rows(
    spec: DagSpec, runs: int, pks: dict[datetime, int], now: datetime
) -> Iterator[dict[str, Any]]:
    for n in range(runs):
        logical = START + timedelta(days=n)
        for i, task in enumerate(spec.tasks):
            state = _state(n, i, runs)
            finished = state not in ("none", "running")
            yield {
                "run_pk": pks[logical],
                "dag_id": spec.dag_id,
                "task_id": task.task_id,
                "state": state,
                "try_number": 0 if state == "none" else 1,
                "max_tries": 2,
                "start_date": None if state == "none" else logical + timedelta(days=1, minutes=i),
                "end_date": logical + timedelta(days=1, minutes=i + 1) if finished else None,
                "duration": 60.0 + (n * 7 + i) % 50 if finished else None,
            }


# ---------------------------------------------------------------- measuring


def wsgi_get(app: WebApp, url: str) -> tuple[int, bytes]:
    """One GET through the application, as wsgiref would call it."""
    parts = urlsplit(url)
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": parts.path,
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


def measure(store: Store, sizes: dict[str, int]) -> dict[str, Any]:
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
    results = timed(actions, repeat)
    for found in results.values():
        found["x_floor"] = round(found["median_ms"] / results[FLOOR]["median_ms"], 1)
        found["cpu_x_floor"] = round(found["cpu_median_ms"] / results[FLOOR]["cpu_median_ms"], 1)
    selects = count_selects(store, checked_get(app, requests["html grid, deep page"], cells))
    return {"results": results, "selects_per_grid_request": selects, "cells_per_page": cells}


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
    lines.append(f"(store built in {document['build_seconds']:.1f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Build the store, measure, print the table; returns (and optionally writes) the JSON."""
    args = parse_args(argv)
    sizes = dict(TINY if args.tiny else FULL)
    sizes.update({k: v for k, v in (("runs", args.runs), ("repeat", args.repeat)) if v})
    with tempfile.TemporaryDirectory(prefix="dagrun-web-bench-") as scratch:
        store = Store(f"sqlite:///{Path(scratch) / 'web.db'}")
        try:
            started = time.perf_counter()
            fill(store, make_spec("wide", sizes["tasks"]), sizes["runs"])
            fill(store, make_spec("fresh", sizes["tasks"]), sizes["page"])
            build = time.perf_counter() - started
            document = {"sizes": sizes, "build_seconds": round(build, 2), **measure(store, sizes)}
        finally:
            store.dispose()
    print(render(document))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=2))
        print(f"results written to {args.out}", file=sys.stderr)
    return document


if __name__ == "__main__":
    main()
