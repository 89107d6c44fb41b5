"""W1XL and W3XL: the backfill and the parse at ten to thirty times W1L's and W3's size.

Each reports its per-unit cost at the small size and at the large one and the growth
ratio between them, against the targets of issue 18: a cost that grows with the store or
the folder (a scan, a list kept per run) shows as a ratio above 1. The small size is W1L
(or W3) measured earlier in the same invocation when it ran, else measured once here. The
large size runs once: at this size one run is long enough to be steady.

- W1XL: ``dagrun backfill`` of 9,091 days x 11 tasks (100,001 no-op tasks) with W1L's
  options, on SQLite and on PostgreSQL (a W1L-sized backfill on PostgreSQL measured here is
  its small size). Per-task cost within 1.25x of the small one's, peak RSS of the process
  tree within 1.25x (nothing kept per run or per task beyond what is running), and the
  database's size on disk.
- W3XL: ``dags list`` over 1,000 DAG files x 10 tasks, cold (per file within 1.5x of W3's)
  and again with nothing changed (under 1 s end to end).
"""

from __future__ import annotations

import os
from pathlib import Path

from bench import graphs, workloads
from bench.floor import write_plain_file
from bench.measure import Measurement, run_command
from bench.workloads import W1L_OPTIONS, Context, backfill_args, cli_env, dagrun_command

#: W1XL's size: 9,091 daily runs of the 11-task fan graph, 100,001 task instances.
W1XL_DAYS = 9_091
W1L_DAYS = 365
W3XL_FILES = 1_000
W3_FILES = 100


def growth(
    name: str, small: float, large: float, limit: float, *, unit: str = "ms per unit"
) -> dict:
    """A per-unit cost at both sizes, their ratio and whether it stays within ``limit``."""
    ratio = large / small if small else None
    return {
        "target": f"{name}: large / small {unit}",
        "small": small,
        "large": large,
        "value": ratio,
        "limit": limit,
        "met": ratio is not None and ratio <= limit,
    }


def file_mb(*paths: Path) -> float:
    """Size on disk of a SQLite database and its WAL and shared-memory files."""
    total = 0
    for path in paths:
        for suffix in ("", "-wal", "-shm"):
            found = Path(f"{path}{suffix}")
            if found.exists():
                total += found.stat().st_size
    return total / 1e6


def pg_schema_mb(url: str) -> float:
    """Tables, indexes and TOAST of the schema in ``url``'s search_path, in MB."""
    from sqlalchemy import create_engine, text

    from dagrun.store.location import normalise_url

    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            size = conn.execute(
                text(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    return float(size) / 1e6


def pg_successes(url: str) -> int:
    from sqlalchemy import create_engine, text

    from dagrun.store.location import normalise_url

    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            return conn.execute(
                text("SELECT count(*) FROM task_instance WHERE state = 'success'")
            ).scalar_one()
    finally:
        engine.dispose()


# ---------------------------------------------------------------- W1XL


def backfill_measured(folder: Path, days: int, db_url: str | None = None) -> Measurement:
    """W1L's backfill of ``days`` days of the fan graph in ``folder`` (on ``db_url`` if
    given, else the home's SQLite file); every task must succeed."""
    graph = graphs.fan()
    graph.write_dag_file(folder / "dags")
    args = backfill_args(days, W1L_OPTIONS)
    if db_url is None:
        m = workloads.run_cli(folder, *args)
        done = workloads.count_successes(folder)
    else:
        cmd = [*dagrun_command(), "--db", db_url, *args]
        env = cli_env(folder / "home", folder / "dags")
        m = run_command(cmd, env=env, cwd=folder).check("dagrun " + " ".join(args))
        done = pg_successes(db_url)
    if done != graph.size * days:
        raise RuntimeError(f"W1XL: {done} of {graph.size * days} task instances succeeded")
    return m


def size_entry(days: int, m: Measurement, db_mb: float) -> dict:
    tasks = graphs.fan().size * days
    return {
        "days": days,
        "tasks": tasks,
        "wall_s": m.seconds,
        "ms_per_task": 1000 * m.seconds / tasks,
        "cpu_ms_per_task": 1000 * m.cpu_s / tasks,
        "peak_rss_mb": m.peak_rss_mb,
        "peak_pss_mb": m.peak_pss_mb,
        "db_mb": db_mb,
    }


def compare(small: dict, large: dict, task_limit: float, rss_limit: float) -> list[dict]:
    return [
        growth("ms per task", small["ms_per_task"], large["ms_per_task"], task_limit),
        growth(
            "peak RSS of the tree", small["peak_rss_mb"], large["peak_rss_mb"], rss_limit, unit="MB"
        ),
    ]


def w1xl_sqlite(ctx: Context, small_days: int, days: int) -> dict:
    known = ctx.results.get("W1L", {})
    if known.get("status") == "ok" and known.get("units") == graphs.fan().size * small_days:
        small = {
            "days": small_days,
            "tasks": known["units"],
            "wall_s": known["wall_s"]["median"],
            "ms_per_task": 1000 * known["wall_s"]["median"] / known["units"],
            "cpu_ms_per_task": known["cpu_ms_per_unit"],
            "peak_rss_mb": known["peak_rss_mb"],
            "peak_pss_mb": known["peak_pss_mb"],
            "db_mb": None,
            "from": "W1L in this invocation (median)",
        }
    else:
        folder = ctx.folder("W1XL-small")
        m = backfill_measured(folder, small_days)
        small = size_entry(small_days, m, file_mb(folder / "home" / "dagrun.db"))
        small["from"] = "measured here, once"
    folder = ctx.folder("W1XL-sqlite")
    m = backfill_measured(folder, days)
    large = size_entry(days, m, file_mb(folder / "home" / "dagrun.db"))
    return {"small": small, "large": large, "targets": compare(small, large, 1.25, 1.25)}


def w1xl_postgres(ctx: Context, small_days: int, days: int) -> dict:
    from bench.worker_scale import pg_base_url, pg_schema, pg_unavailable

    base = pg_base_url()
    if problem := pg_unavailable(base):
        return {"status": problem}
    sizes = {}
    for label, n in (("small", small_days), ("large", days)):
        folder = ctx.folder(f"W1XL-pg-{label}")
        with pg_schema(base) as url:
            m = backfill_measured(folder, n, url)
            sizes[label] = size_entry(n, m, pg_schema_mb(url))
        sizes[label]["from"] = "measured here, once"
    small, large = sizes["small"], sizes["large"]
    return {"status": "ok", **sizes, "targets": compare(small, large, 1.25, 1.25)}


def w1xl(ctx: Context) -> dict:
    """W1L's backfill at 100,001 tasks on SQLite and PostgreSQL, beside W1L's size."""
    small_days, days = (20, 200) if ctx.tiny else (W1L_DAYS, W1XL_DAYS)
    engines = {"sqlite": w1xl_sqlite(ctx, small_days, days)}
    engines["postgres"] = w1xl_postgres(ctx, small_days, days)
    targets = []
    for engine, found in engines.items():
        for t in found.get("targets", []):
            targets.append({**t, "target": f"{engine}: {t['target']}"})
    return {
        "title": f"backfill {days} days x 11 tasks ({days * 11} tasks) vs {small_days} days",
        "kind": "scale",
        "engines": engines,
        "targets": targets,
    }


# ---------------------------------------------------------------- W3XL


def parse_folder(ctx: Context, name: str, files: int) -> dict:
    """``dags list`` cold, then with nothing changed, over ``files`` fan DAG files."""
    folder = ctx.folder(name)
    for i in range(files):
        graph = graphs.fan(f"dag_{i:04d}", width=8)
        graph.write_dag_file(folder / "dags")
        write_plain_file(folder / "plain", graph.dag_id, graph.upstream)
    cold = workloads.run_cli(folder, "dags", "list")
    listed = sum(1 for line in cold.stdout.splitlines() if line.lstrip().startswith("dag_"))
    if listed < files:
        raise RuntimeError(f"{name}: dags list showed {listed} of {files} DAGs")
    warm = workloads.run_cli(folder, "dags", "list")
    return {
        "files": files,
        "cold_s": cold.seconds,
        "ms_per_file": 1000 * cold.seconds / files,
        "unchanged_s": warm.seconds,
        "unchanged_sync_s": workloads.time_unchanged_sync(folder),
        "peak_rss_mb": cold.peak_rss_mb,
        "peak_pss_mb": cold.peak_pss_mb,
        "db_mb": file_mb(folder / "home" / "dagrun.db"),
    }


def w3xl(ctx: Context) -> dict:
    """``dags list`` over 1,000 files beside W3's 100: per file cold, and unchanged."""
    small_files, files = (10, 100) if ctx.tiny else (W3_FILES, W3XL_FILES)
    known = ctx.results.get("W3", {})
    if known.get("status") == "ok" and known.get("units") == small_files:
        small = {
            "files": small_files,
            "cold_s": known["cold_s"]["median"],
            "ms_per_file": 1000 * known["cold_s"]["median"] / small_files,
            "unchanged_s": known["unchanged_s"]["median"],
            "unchanged_sync_s": known["unchanged_sync_s"]["median"],
            "peak_rss_mb": known["peak_rss_mb"],
            "peak_pss_mb": known["peak_pss_mb"],
            "from": "W3 in this invocation (median)",
        }
    else:
        small = {**parse_folder(ctx, "W3XL-small", small_files), "from": "measured here, once"}
    large = parse_folder(ctx, "W3XL", files)
    # The command's fixed cost (interpreter, imports, the store) weighs on the small size's
    # per-file figure; the marginal cost of a file past the small size is the steeper test.
    marginal = 1000 * (large["cold_s"] - small["cold_s"]) / (files - small_files)
    return {
        "title": f"dags list, {files} files x 10 tasks vs {small_files}",
        "kind": "scale",
        "small": small,
        "large": large,
        "marginal_ms_per_file": marginal,
        "targets": [
            growth("cold dags list, ms per file", small["ms_per_file"], large["ms_per_file"], 1.5),
            {
                "target": f"dags list of {files} files, nothing changed, end to end (s)",
                "value": large["unchanged_s"],
                "limit": 1.0,
                "met": large["unchanged_s"] < 1.0,
            },
        ],
        "cpus": os.cpu_count(),
    }
