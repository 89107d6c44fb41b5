"""The reads that web pages make at every request use an index, on SQLite and PostgreSQL.

W5XL (``python -m bench --only W5XL``) holds the grid and the DAG list to W5's page time
over ten times the history; that holds only while these statements find their rows through
an index. Each read function is called as the pages call it, its statements captured as
they run (so a refactor of how they are built changes nothing here), and each is then
explained with the same parameters: no full scan of ``dag_run`` or ``task_instance``.

PostgreSQL's planner prefers a sequential scan of a small table, so its plans are asked
for with ``enable_seqscan = off``: an index it could use is then used, and a statement no
index serves still shows its ``Seq Scan``.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import event

from bench import web_grid
from dagrun.store import Store, run_reads, sql, task_reads

RUNS = 300
FULL_SCAN = {
    "sqlite": re.compile(r"\bSCAN (dag_run|task_instance)\b"),
    "postgresql": re.compile(r"Seq Scan on (dag_run|task_instance)\b"),
}


@pytest.fixture
def web_store(db_url: str):
    """A store like W5's at a small size: a DAG with RUNS runs x 30 tasks and one of 50."""
    store = Store(db_url)
    web_grid.fill(store, web_grid.make_spec("wide", 30), RUNS)
    web_grid.fill(store, web_grid.make_spec("fresh", 30), 50)
    yield store
    store.dispose()


def captured(store: Store, read) -> list[tuple[str, object]]:
    """The (SQL, parameters) of every statement ``read(conn)`` runs, however it runs them."""
    found: list[tuple[str, object]] = []

    def on_cursor(_conn, _cursor, statement, parameters, _context, _many) -> None:
        found.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", on_cursor)
    try:
        observer = sql.observed(lambda statement, args, _seconds: found.append((statement, args)))
        with observer, store.read() as conn:
            read(conn)
    finally:
        event.remove(store.engine, "before_cursor_execute", on_cursor)
    return [(s, p) for s, p in found if s.lstrip().upper().startswith(("SELECT", "WITH", "("))]


def plan(store: Store, statement: str, parameters) -> str:
    dialect = store.engine.dialect.name
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if dialect == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute("SET enable_seqscan = off")
        cursor.execute(f"EXPLAIN {statement}", parameters)
        return "\n".join(row[0] for row in cursor.fetchall())
    finally:
        raw.rollback()
        raw.close()


def deep(store: Store):
    with store.read() as conn:
        return run_reads.runs(conn, "wide")[RUNS // 2].logical_date


READS = {
    "grid page, newest": lambda conn, before: task_reads.grid_page(conn, "wide", None, 25),
    "grid page, deep": lambda conn, before: task_reads.grid_page(conn, "wide", before, 25),
    "recent runs per DAG (the DAG list)": lambda conn, before: run_reads.recent_runs(
        conn, ["wide", "fresh"], 10
    ),
    "latest runs (the DAG list, the DAG header)": lambda conn, before: run_reads.latest_runs(
        conn, ["wide", "fresh"]
    ),
    "has active runs, any DAG": lambda conn, before: run_reads.has_active_runs(conn),
    "has active runs, one DAG": lambda conn, before: run_reads.has_active_runs(conn, "wide"),
}


@pytest.mark.parametrize("name", list(READS))
def test_page_reads_use_an_index(web_store: Store, name: str) -> None:
    before = deep(web_store) + timedelta(microseconds=1)
    statements = captured(web_store, lambda conn: READS[name](conn, before))
    assert statements, f"{name}: no statement captured"
    scan = FULL_SCAN[web_store.engine.dialect.name]
    for statement, parameters in statements:
        found = plan(web_store, statement, parameters)
        assert not scan.search(found), f"{name}: a full scan\n{statement}\n--- plan\n{found}"
        assert "INDEX" in found.upper() or "PRIMARY KEY" in found.upper(), found


def test_the_bulk_fill_writes_what_the_store_reads(web_store: Store) -> None:
    """The benchmark's bulk insert renders values as the store does: a lookup by date finds
    the run, and its task instances read back as aware datetimes."""
    day = web_grid.START + timedelta(days=5)
    with web_store.read() as conn:
        run = run_reads.run_by_date(conn, "wide", day)
        rows = task_reads.task_instances(conn, [run.id])
    assert run.logical_date == day and run.run_id == f"scheduled__{day.isoformat()}"
    assert len(rows) == 30
    assert rows[0].start_date == day + timedelta(days=1)
    assert rows[1].end_date == day + timedelta(days=1, minutes=2)


def vm_steps(store: Store, read) -> int:
    """SQLite virtual-machine steps (in hundreds) that ``read(conn)`` costs: rows read show
    up here, however the plan is worded."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    with store.read() as conn:
        raw = conn.connection.dbapi_connection
        raw.set_progress_handler(count, 100)
        try:
            read(conn)
        finally:
            raw.set_progress_handler(None, 100)
    return steps[0]


def test_the_latest_run_of_a_dag_costs_the_same_at_any_history(sqlite_store: Store) -> None:
    """The DAG list and every grid page ask for each DAG's latest run: it must read one key
    of the index, not every run (a GROUP BY max() read 100,000 runs per page at W5XL)."""
    web_grid.fill(sqlite_store, web_grid.make_spec("short", 2), 20)
    web_grid.fill(sqlite_store, web_grid.make_spec("long", 2), 4_000)
    short = vm_steps(sqlite_store, lambda conn: run_reads.latest_runs(conn, ["short"]))
    long = vm_steps(sqlite_store, lambda conn: run_reads.latest_runs(conn, ["long"]))
    assert long <= short + 2, (short, long)
    with sqlite_store.read() as conn:
        latest = run_reads.latest_runs(conn, ["short", "long"])
        assert latest == {d: run_reads.runs(conn, d)[-1].logical_date for d in ("short", "long")}
