"""The floor: the same work done by plain Python and sqlite3, with nothing of dagrun.

``run`` executes a graph for N dates in topological order, calling the same callable source
as the DAG file, and records each task's state row in its own committed transaction (WAL,
``synchronous=FULL``, as dagrun's store), so the floor pays for durability exactly as dagrun
does. ``parse`` is the floor of ``dags list``: read, hash and execute each plain-Python graph
file, sort it, and store one row per DAG. Run as a subprocess (``python -m bench.floor``) so
that it pays for an interpreter start as the CLI does.
"""

from __future__ import annotations

import graphlib
import hashlib
import json
import sqlite3
import sys
import time
from datetime import date, timedelta
from pathlib import Path

from bench.graphs import NOOP_SOURCE, RECORD_SOURCE

TASK_TABLE = """CREATE TABLE IF NOT EXISTS task_instance (
    run_id TEXT NOT NULL, task_id TEXT NOT NULL, state TEXT NOT NULL, try_number INTEGER,
    start_date TEXT, end_date TEXT, PRIMARY KEY (run_id, task_id))"""
DAG_TABLE = """CREATE TABLE IF NOT EXISTS dag (
    dag_id TEXT PRIMARY KEY, path TEXT, content_hash TEXT, tasks TEXT)"""


def connect(db: str) -> sqlite3.Connection:
    """Autocommit mode with explicit BEGIN/COMMIT, and dagrun's durability settings."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def callables(spec: dict) -> dict:
    """The task callables, from the same source text the DAG file embeds."""
    namespace: dict = {}
    effect = spec.get("effect_file")
    exec(RECORD_SOURCE.format(path=effect) if effect else NOOP_SOURCE, namespace)
    return namespace


def run_graph(spec: dict, runs: int, db: str) -> float:
    """Execute ``runs`` dates of the graph, one commit per task; seconds of work."""
    started = time.perf_counter()
    conn = connect(db)
    conn.execute(TASK_TABLE)
    namespace = callables(spec)
    noop, append_key = namespace.get("noop"), namespace.get("append_key")
    first = date.fromisoformat(spec["start"])
    for day in range(runs):
        logical = (first + timedelta(days=day)).isoformat()
        run_id = f"floor__{logical}"
        for task_id in graphlib.TopologicalSorter(spec["upstream"]).static_order():
            begun = time.time()
            if append_key is not None:
                append_key(f"{spec['dag_id']}/{task_id}/{logical}")
            else:
                noop()
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO task_instance VALUES (?, ?, 'success', 1, ?, ?)",
                (run_id, task_id, begun, time.time()),
            )
            conn.execute("COMMIT")
    conn.close()
    return time.perf_counter() - started


def parse_folder(folder: str, db: str) -> float:
    """Import every plain graph file, sort its graph, store one row per DAG in one commit."""
    started = time.perf_counter()
    rows = []
    for path in sorted(Path(folder).glob("*.py")):
        source = path.read_bytes()
        namespace: dict = {}
        exec(compile(source, str(path), "exec"), namespace)
        order = list(graphlib.TopologicalSorter(namespace["UPSTREAM"]).static_order())
        rows.append((path.stem, str(path), hashlib.sha1(source).hexdigest(), json.dumps(order)))
    conn = connect(db)
    conn.execute(DAG_TABLE)
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO dag VALUES (?, ?, ?, ?)", rows)
    conn.execute("COMMIT")
    conn.close()
    return time.perf_counter() - started


def write_plain_file(folder: Path, dag_id: str, upstream: dict[str, list[str]]) -> Path:
    """The floor's version of a DAG file: the same graph and callable, no framework."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dag_id}.py"
    path.write_text(f"UPSTREAM = {json.dumps(upstream)}\n{NOOP_SOURCE}")
    return path


def main(argv: list[str]) -> int:
    """``run SPEC.json RUNS DB`` or ``parse FOLDER DB``; prints the in-process seconds."""
    if argv[0] == "run":
        spec = json.loads(Path(argv[1]).read_text())
        seconds = run_graph(spec, int(argv[2]), argv[3])
    elif argv[0] == "parse":
        seconds = parse_folder(argv[1], argv[2])
    else:
        print(f"unknown floor mode {argv[0]!r}", file=sys.stderr)
        return 2
    print(json.dumps({"seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
