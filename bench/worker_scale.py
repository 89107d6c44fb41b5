"""W4: 1, 2 and 4 ``dagrun worker`` processes draining ready no-op tasks on PostgreSQL.

The queue is filled in-process through the store's own transitions (create, admit, start)
so every root is queued before the first worker starts and the measurement is claim and run
only. Each task appends its idempotency key to a file opened with ``O_APPEND``; afterwards
the task instances, the attempt history and that file must all say every task ran exactly
once. Each worker count gets its own PostgreSQL schema, created and dropped here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from bench import graphs
from bench.measure import Measurement, TreeSampler, machine_busy, reap, spread
from bench.workloads import Context, cli_env, dagrun_command, graph_floor

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
WIDTH = 10
START = date(2020, 1, 1)


def pg_base_url() -> str:
    return os.environ.get("BENCH_PG_URL") or os.environ.get("DAGRUN_TEST_PG_URL") or DEFAULT_PG_URL


def pg_unavailable(base: str) -> str | None:
    """Why PostgreSQL cannot be measured at ``base`` (one line), or None when it can."""
    try:
        with pg_schema(base):
            return None
    except Exception as exc:
        return f"not available: {str(exc).splitlines()[0]}"


@contextmanager
def pg_schema(base: str):
    """A schema of its own for one measurement; its URL, and the schema dropped after."""
    from sqlalchemy import create_engine, text

    from dagrun.store.location import normalise_url

    name = f"bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(normalise_url(base), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{name}"'))
        sep = "&" if "?" in base else "?"
        yield f"{base}{sep}options=-csearch_path%3D{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()


def fill_queue(url: str, dags: Path, dag_id: str, run_count: int) -> int:
    """Register the DAG and queue every root of ``run_count`` runs; the queued tasks."""
    from sqlalchemy import func, select

    from dagrun.runtime.dag_sync import sync_dags
    from dagrun.states import RunType
    from dagrun.store import Store, dag_reads, runs
    from dagrun.store.schema import task_instance

    store = Store(url)
    try:
        sync_dags(store, str(dags))
        with store.write() as conn:
            now = store.now(conn)
            spec = dag_reads.get_dag(conn, dag_id).spec
            first = datetime(START.year, START.month, START.day, tzinfo=UTC)
            last = first + timedelta(days=run_count - 1)
            runs.create_runs(
                conn, spec, spec.timetable.intervals(first, last), RunType.BACKFILL, now
            )
            runs.admit_runs(conn, spec, run_count, now)
            runs.start_runs(conn, spec, now)
        with store.read() as conn:
            return conn.execute(
                select(func.count()).where(task_instance.c.state == "queued")
            ).scalar_one()
    finally:
        store.dispose()


def worker_command(url: str, dags: Path) -> list[str]:
    """``dagrun worker`` with two children against ``url``."""
    return [
        *dagrun_command(),
        "--db",
        url,
        "--dags-folder",
        str(dags),
        "worker",
        "--concurrency",
        "2",
    ]


def start_workers(url: str, folder: Path, count: int) -> list[subprocess.Popen]:
    procs = []
    for i in range(count):
        home = folder / f"home-{i}"
        home.mkdir()
        cmd = worker_command(url, folder / "dags")
        with open(home / "stderr", "wb") as err:
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=cli_env(home, folder / "dags"),
                    cwd=folder,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            )
    return procs


def wait_drained(url: str, procs: list[subprocess.Popen], deadline: float) -> float:
    """Poll until no task instance is left unfinished; the monotonic time it happened."""
    unfinished = (
        "SELECT count(*) FROM task_instance WHERE state NOT IN "
        "('success', 'failed', 'upstream_failed', 'skipped')"
    )
    return wait_for_none(url, unfinished, procs, deadline, "W4: the queue", 0.05)


def wait_for_none(
    url: str, count: str, procs: list[subprocess.Popen], deadline: float, what: str, every: float
) -> float:
    """Poll the SQL ``count`` until it is 0 (the monotonic time it happened), failing when
    one of ``procs`` exits first or past ``deadline``."""
    from sqlalchemy import create_engine, text

    from dagrun.store.location import normalise_url

    engine = create_engine(normalise_url(url))
    query = text(count)
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if conn.execute(query).scalar_one() == 0:
                    return time.monotonic()
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{what}: a process exited before the end")
            time.sleep(every)
        raise TimeoutError(f"{what} did not reach its end before the deadline")
    finally:
        engine.dispose()


def stop_workers(procs: list[subprocess.Popen], grace: float = 60.0) -> tuple[list[int], float]:
    """SIGTERM every worker, wait for a clean exit, SIGKILL any that overstays; exit codes
    and the CPU seconds of all workers and their children."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes, cpu = [], 0.0
    for p in procs:
        found = reap(p.pid, time.monotonic() + grace)
        if found is None:
            p.kill()
            found = reap(p.pid)
        p.returncode = found[0]
        codes.append(found[0])
        cpu += found[1]
    return codes, cpu


def audit(url: str, effect_file: Path, expected: int) -> dict:
    """Did every task run exactly once? Task states, attempt rows and side effects agree."""
    from sqlalchemy import create_engine, text

    from dagrun.store.location import normalise_url

    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            states = dict(
                conn.execute(text("SELECT state, count(*) FROM task_instance GROUP BY state")).all()
            )
            per_ti = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE n = 1 AND ok = 1), count(*) FROM ("
                    " SELECT ti_id, count(*) AS n,"
                    " count(*) FILTER (WHERE outcome = 'success') AS ok"
                    " FROM task_attempt GROUP BY ti_id) AS a"
                )
            ).one()
            timing = conn.execute(
                text(
                    "SELECT count(*), count(DISTINCT (worker, started_at)), min(started_at),"
                    " max(started_at), max(ended_at) FROM task_attempt"
                )
            ).one()
            by_worker = [
                n
                for (n,) in conn.execute(
                    text("SELECT count(*) FROM task_attempt GROUP BY worker ORDER BY 1 DESC")
                )
            ]
    finally:
        engine.dispose()
    lines = effect_file.read_text().splitlines() if effect_file.exists() else []
    duplicates = sum(n - 1 for n in Counter(lines).values() if n > 1)
    attempts, batches, first, last_claim, last_end = timing
    ok = (
        states.get("success", 0) == expected
        and sum(states.values()) == expected
        and per_ti[0] == expected
        and per_ti[1] == expected
        and len(set(lines)) == expected
        and duplicates == 0
    )
    return {
        "exactly_once": ok,
        "task_states": states,
        "task_instances_with_one_successful_attempt": per_ti[0],
        "attempts": attempts,
        "effect_lines": len(lines),
        "distinct_keys": len(set(lines)),
        "duplicate_keys": duplicates,
        "claim_transactions": batches,
        "mean_claim_batch": attempts / batches if batches else None,
        "attempts_per_worker_process": by_worker,
        "db_claim_span_s": (last_claim - first).total_seconds() if attempts else None,
        "db_drain_span_s": (last_end - first).total_seconds() if attempts else None,
    }


def drain_once(ctx: Context, base: str, workers: int, runs: int, rep: int) -> dict:
    """One measurement: fill a fresh schema, start the workers, time the drain, audit."""
    folder = ctx.folder(f"W4-{workers}w-{rep}")
    effect_file = folder / "effects.log"
    graph = graphs.independent(
        "wide", WIDTH, start=START, max_active_runs=runs, effect_file=str(effect_file)
    )
    graph.write_dag_file(folder / "dags")
    expected = runs * WIDTH
    with pg_schema(base) as url:
        queued = fill_queue(url, folder / "dags", graph.dag_id, runs)
        if queued != expected:
            raise RuntimeError(f"W4: {queued} queued after setup, expected {expected}")
        busy_before = machine_busy()
        started = time.monotonic()
        procs = start_workers(url, folder, workers)
        with TreeSampler([p.pid for p in procs]) as sampler:
            try:
                drained = wait_drained(url, procs, started + max(120.0, expected / 20))
                busy_after = machine_busy()
            finally:
                codes, cpu = stop_workers(procs)
        found = audit(url, effect_file, expected)
    wall = drained - started
    busy = (busy_after[0] - busy_before[0]) / max(1, busy_after[1] - busy_before[1])
    return {
        "wall_s": wall,
        "claims_per_s": found["attempts"] / wall,
        "executions_per_s": found["task_states"].get("success", 0) / wall,
        "exit_codes": codes,
        "workers_cpu_ms_per_task": 1000 * cpu / expected,
        "machine_cpu_busy": busy,
        "peak_rss_mb": sampler.peak_rss_kb / 1024,
        "peak_pss_mb": sampler.peak_pss_kb / 1024,
        **found,
    }


def summarise(samples: list[dict], tasks: int) -> dict:
    """Median over repetitions; every repetition must have been exactly-once."""
    walls = [s["wall_s"] for s in samples]
    median = sorted(samples, key=lambda s: s["wall_s"])[len(samples) // 2]
    spans = [s["db_drain_span_s"] for s in samples if s["db_drain_span_s"]]
    return {
        "wall_s": spread(walls),
        "claims_per_s": median["claims_per_s"],
        "executions_per_s": tasks / median["wall_s"],
        "executions_per_s_in_db_span": tasks / spread(spans)["median"] if spans else None,
        "exactly_once": all(s["exactly_once"] for s in samples),
        "peak_rss_mb": max(s["peak_rss_mb"] for s in samples),
        "peak_pss_mb": max(s["peak_pss_mb"] for s in samples),
        "median_run": median,
    }


def w4(ctx: Context) -> dict:
    runs = 50 if ctx.tiny else 1000
    counts = (1, 2) if ctx.tiny else (1, 2, 4)
    tasks = runs * WIDTH
    base = pg_base_url()
    if problem := pg_unavailable(base):
        return {"title": "PostgreSQL workers", "status": problem}
    by_count: dict[str, dict] = {}
    samples: dict[int, list[dict]] = {n: [] for n in counts}
    floors, inner, floor_cpu = [], [], []
    for rep in range(ctx.repeat):
        for n in counts:
            samples[n].append(drain_once(ctx, base, n, runs, rep))
        floors_m, seconds = floor_for(ctx, runs, rep)
        floors.append(floors_m.seconds)
        floor_cpu.append(floors_m.cpu_s)
        inner.append(seconds)
    floor_rate = tasks / spread(floors)["median"]
    floor_best = tasks / spread(floors)["min"]
    for n in counts:
        entry = by_count[str(n)] = summarise(samples[n], tasks)
        entry["ratio"] = entry["executions_per_s"] / floor_rate
        entry["ratio_best"] = tasks / entry["wall_s"]["min"] / floor_best
    one = by_count[str(counts[0])]["executions_per_s"]
    for entry in by_count.values():
        entry["speedup_vs_1"] = entry["executions_per_s"] / one
    best = max(by_count.values(), key=lambda e: e["executions_per_s"])
    return {
        "title": f"PostgreSQL: {tasks} ready tasks, workers x concurrency 2",
        "unit": "task",
        "units": tasks,
        "workers": by_count,
        "rate": best["executions_per_s"],
        "ratio": best["ratio"],
        "ratio_best": best["ratio_best"],
        "wall_s": best["wall_s"],
        "peak_rss_mb": best["peak_rss_mb"],
        "floor_cpu_ms_per_unit": 1000 * sorted(floor_cpu)[len(floor_cpu) // 2] / tasks,
        "floor": {
            "wall_s": spread(floors),
            "rate": floor_rate,
            "inner_s": spread(inner),
            "note": "SQLite floor, same graph and callable, one commit per task",
        },
        "targets": [
            {
                "target": "no task executed twice",
                "value": None,
                "limit": None,
                "met": all(e["exactly_once"] for e in by_count.values()),
            }
        ],
    }


def floor_for(ctx: Context, runs: int, rep: int) -> tuple[Measurement, float]:
    """The SQLite floor of the same graph and callable (PostgreSQL has no floor of its own)."""
    folder = ctx.folder(f"W4-floor-{rep}")
    graph = graphs.independent("wide", WIDTH, start=START, effect_file=str(folder / "fx.log"))
    return graph_floor(folder, graph, runs)
