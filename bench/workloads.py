"""W1 to W3 and W5: the SQLite workloads, each through the real ``dagrun`` CLI, and the web grid.

Every repetition gets a fresh folder: its own DAG files, its own ``DAGRUN_HOME`` and so its
own SQLite database, exactly as a user who just installed dagrun. The floor runs in the same
repetition, right after dagrun, so a machine that slows down mid-run slows both. A run whose
CLI fails or leaves a task unfinished raises instead of producing a number.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import graphs
from bench.floor import write_plain_file
from bench.measure import Measurement, run_command, spread

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Context:
    """What every workload needs: size, repetitions, a scratch root, how to call the CLI."""

    tiny: bool
    repeat: int
    scratch: Path
    #: The results of the workloads already run in this invocation, by name: a scale
    #: workload reuses its small counterpart's numbers when it ran (else measures one).
    results: dict[str, dict] = field(default_factory=dict)

    def folder(self, name: str) -> Path:
        """A fresh folder per repetition: nothing cached from the previous one."""
        path = self.scratch / name
        path.mkdir(parents=True, exist_ok=False)
        return path


def dagrun_command() -> list[str]:
    """The console script a user runs, from the interpreter's own environment."""
    script = Path(sys.executable).parent / "dagrun"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dagrun"]


def user_environ() -> dict[str, str]:
    """This environment as a user's would be: bytecode caching on. Some sandboxes set
    PYTHONDONTWRITEBYTECODE, which makes every command recompile its modules; a ``pip
    install`` compiles them once. Dagrun and the floor both run with it unset."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cli_env(home: Path, dags: Path) -> dict[str, str]:
    env = {k: v for k, v in user_environ().items() if not k.startswith("DAGRUN_")}
    env.update(DAGRUN_HOME=str(home), DAGRUN_DAGS_FOLDER=str(dags))
    return env


def floor_env() -> dict[str, str]:
    return {**user_environ(), "PYTHONPATH": str(REPO)}


def run_cli(folder: Path, *args: str) -> Measurement:
    """``dagrun ARGS`` in ``folder`` with its dags/ and home/; fails loudly on a bad exit."""
    cmd = [*dagrun_command(), *args]
    env = cli_env(folder / "home", folder / "dags")
    return run_command(cmd, env=env, cwd=folder).check("dagrun " + " ".join(args))


def run_floor(folder: Path, *args: str) -> tuple[Measurement, float]:
    """The floor as a subprocess: end-to-end measurement and its own in-process seconds."""
    cmd = [sys.executable, "-m", "bench.floor", *args]
    m = run_command(cmd, env=floor_env(), cwd=folder).check("floor " + " ".join(args))
    return m, json.loads(m.stdout.strip().splitlines()[-1])["seconds"]


def count_successes(folder: Path) -> int:
    with sqlite3.connect(folder / "home" / "dagrun.db") as conn:
        return conn.execute(
            "SELECT count(*) FROM task_instance WHERE state = 'success'"
        ).fetchone()[0]


def target(name: str, value: float | None, limit: float, *, at_most: bool) -> dict:
    """One target (of issue 7, 18 or 29) and whether this run met it."""
    met = value is not None and (value <= limit if at_most else value >= limit)
    return {"target": name, "value": value, "limit": limit, "met": met}


def memory(ms: list[Measurement]) -> dict:
    """The worst repetition's process-tree memory."""
    return {
        "peak_rss_mb": max(m.peak_rss_mb for m in ms),
        "peak_pss_mb": max(m.peak_pss_mb for m in ms),
        "maxrss_mb": max(m.maxrss_mb for m in ms),
        "processes": max(m.processes for m in ms),
    }


def throughput(
    units: int, runs: list[Measurement], floors: list[Measurement], inner: list[float]
) -> dict:
    """Wall spread, rate and ratio to the floor (both rates from their median wall)."""
    wall = spread([m.seconds for m in runs])
    floor_wall = spread([m.seconds for m in floors])
    rate = units / wall["median"]
    floor_rate = units / floor_wall["median"]
    return {
        "units": units,
        "wall_s": wall,
        "rate": rate,
        "ratio": rate / floor_rate,
        "cpu_s": spread([m.cpu_s for m in runs]),
        "cpu_ms_per_unit": 1000 * statistics.median(m.cpu_s for m in runs) / units,
        "floor_cpu_ms_per_unit": 1000 * statistics.median(m.cpu_s for m in floors) / units,
        # Best against best: on a shared machine fsync latency swings the floor (one commit
        # per task) far more than dagrun (group commits), so the medians' ratio is noisy.
        "ratio_best": floor_wall["min"] / wall["min"],
        "floor": {
            "wall_s": floor_wall,
            "rate": floor_rate,
            "inner_s": spread(inner),
            "inner_rate": units / statistics.median(inner),
        },
        **memory(runs),
    }


# ---------------------------------------------------------------- W1, W1L: backfill


def backfill(ctx: Context, wid: str, days: int, extra: list[str]) -> dict:
    """``dagrun backfill`` of ``days`` daily runs of the fan graph, against the floor."""
    runs, floors, inner = [], [], []
    for rep in range(ctx.repeat):
        m, floor, seconds = backfill_once(ctx.folder(f"{wid}-{rep}"), wid, days, extra)
        runs.append(m)
        floors.append(floor)
        inner.append(seconds)
    result = throughput(graphs.fan().size * days, runs, floors, inner)
    result.update(unit="task", command="dagrun " + " ".join(backfill_args(days, extra)))
    return result


def backfill_args(days: int, extra: list[str]) -> list[str]:
    graph = graphs.fan()
    first, last = graph.dates(days)[0], graph.dates(days)[-1]
    return ["backfill", graph.dag_id, "--start", str(first), "--end", str(last), *extra]


def backfill_once(
    folder: Path, wid: str, days: int, extra: list[str]
) -> tuple[Measurement, Measurement, float]:
    """One backfill of the fan graph in ``folder``, then the floor there: both measurements
    and the floor's own seconds."""
    m = backfill_run(folder, wid, days, extra)
    floor, seconds = graph_floor(folder, graphs.fan(), days)
    return m, floor, seconds


def backfill_run(folder: Path, wid: str, days: int, extra: list[str]) -> Measurement:
    """One backfill of the fan graph in ``folder``; every task must succeed."""
    graph = graphs.fan()
    graph.write_dag_file(folder / "dags")
    m = run_cli(folder, *backfill_args(days, extra))
    done, tasks = count_successes(folder), graph.size * days
    if done != tasks:
        raise RuntimeError(f"{wid}: {done} of {tasks} task instances succeeded")
    return m


def w1(ctx: Context) -> dict:
    days = 5 if ctx.tiny else 30
    result = backfill(ctx, "W1", days, [])
    result["title"] = f"backfill {days} days x 11 tasks (defaults)"
    return result


#: W1L's backfill options: 16 runs at once, 2 workers.
W1L_OPTIONS = ["--max-active-runs", "16", "--workers", "2"]


def w1l(ctx: Context) -> dict:
    days = 20 if ctx.tiny else 365
    result = backfill(ctx, "W1L", days, W1L_OPTIONS)
    result["title"] = f"backfill {days} days x 11 tasks, 16 runs at once, 2 workers"
    result["targets"] = [
        target("tasks/s >= 1/3 of floor", result["ratio"], 1 / 3, at_most=False),
        target("tasks/s >= 1/2 of floor (issue 18's bar)", result["ratio"], 1 / 2, at_most=False),
        target("tasks/s >= 0.6 of floor (issue 29)", result["ratio"], 0.6, at_most=False),
        target("peak RSS of process tree (MB)", result["peak_rss_mb"], 250, at_most=True),
    ]
    return result


# ---------------------------------------------------------------- W2: latency of a chain


def one_run(ctx: Context, name: str, graph: graphs.Graph) -> Measurement:
    """``dagrun run`` of one date of ``graph`` in a fresh home; every task must succeed."""
    folder = ctx.folder(name)
    graph.write_dag_file(folder / "dags")
    m = run_cli(folder, "run", graph.dag_id, "--date", str(graph.start))
    done = count_successes(folder)
    if done != graph.size:
        raise RuntimeError(f"{name}: {done} of {graph.size} task instances succeeded")
    return m


def task_span(folder: Path) -> float:
    """Seconds from the first task's start to the last task's end, by the store's own
    timestamps: the run itself, without the command's start-up and exit."""
    with sqlite3.connect(folder / "home" / "dagrun.db") as conn:
        first, last = conn.execute(
            "SELECT (julianday(min(start_date))), (julianday(max(end_date))) FROM task_instance"
        ).fetchone()
    return (last - first) * 86400


def graph_floor(folder: Path, graph: graphs.Graph, runs: int) -> tuple[Measurement, float]:
    """The floor for ``runs`` dates of ``graph``, in ``folder``."""
    spec = folder / "floor.json"
    spec.write_text(json.dumps(graph.to_json()))
    return run_floor(folder, "run", str(spec), str(runs), str(folder / "floor.db"))


def w2(ctx: Context) -> dict:
    """A chain run's seconds per task, next to a 1-task run (the fixed cost, parse included)."""
    length = 20 if ctx.tiny else 100
    chain, single = graphs.chain(length=length), graphs.chain("single", length=1)
    runs, floors, inner, singles, versions, spans = [], [], [], [], [], []
    for rep in range(ctx.repeat):
        runs.append(one_run(ctx, f"W2-{rep}", chain))
        spans.append(task_span(ctx.scratch / f"W2-{rep}"))
        floor, seconds = graph_floor(ctx.folder(f"W2-floor-{rep}"), chain, 1)
        floors.append(floor)
        inner.append(seconds)
        singles.append(one_run(ctx, f"W2-single-{rep}", single))
        versions.append(run_cli(ctx.folder(f"W2-version-{rep}"), "--version"))
    result = throughput(length, runs, floors, inner)
    per_task = 1000 * result["wall_s"]["median"] / length
    single_s = spread([m.seconds for m in singles])
    marginal = 1000 * (result["wall_s"]["median"] - single_s["median"]) / max(1, length - 1)
    in_run = 1000 * statistics.median(spans) / length
    result.update(
        title=f"run of a chain of {length} tasks",
        unit="task",
        command=f"dagrun run {chain.dag_id} --date {chain.start}",
        per_task_ms=per_task,
        floor_per_task_ms=1000 * result["floor"]["wall_s"]["median"] / length,
        single_task_run_s=single_s,
        cli_version_s=spread([m.seconds for m in versions]),
        marginal_per_task_ms=marginal,
        in_run_per_task_ms=in_run,
        # The scheduling latency path: from the first task's start to the last one's end,
        # per task (each one's run, recording, and the claim and start of the next). The
        # command's fixed cost, interpreter and imports included, is reported next to it;
        # the difference of two whole commands is too noisy here to stand for it.
        targets=[
            target("ms per chained task (in the run)", in_run, 3.0, at_most=True),
            target("ms per chained task (in the run), issue 18's bar", in_run, 1.2, at_most=True),
            target("1-task run (s), issue 18's bar", single_s["median"], 0.35, at_most=True),
        ],
    )
    return result


# ---------------------------------------------------------------- W3: parsing DAG files


def w3(ctx: Context) -> dict:
    """``dags list`` over N files cold and unchanged, and sync_dags' own time when unchanged."""
    files = 10 if ctx.tiny else 100
    cold, warm, floors, inner, sync_s = [], [], [], [], []
    for rep in range(ctx.repeat):
        folder = ctx.folder(f"W3-{rep}")
        for i in range(files):
            graph = graphs.fan(f"dag_{i:03d}", width=8)
            graph.write_dag_file(folder / "dags")
            write_plain_file(folder / "plain", graph.dag_id, graph.upstream)
        cold.append(run_cli(folder, "dags", "list"))
        warm.append(run_cli(folder, "dags", "list"))
        sync_s.append(time_unchanged_sync(folder))
        m, seconds = run_floor(folder, "parse", str(folder / "plain"), str(folder / "floor.db"))
        floors.append(m)
        inner.append(seconds)
    result = throughput(files, cold, floors, inner)
    warm_s = spread([m.seconds for m in warm])
    sync = spread(sync_s)
    result.update(
        title=f"dags list, {files} files x 10 tasks",
        unit="file",
        command="dagrun dags list",
        cold_s=result["wall_s"],
        unchanged_s=warm_s,
        unchanged_sync_s=sync,
        unchanged_memory=memory(warm),
        targets=[
            target("cold dags list, end to end (s)", result["wall_s"]["median"], 1.0, at_most=True),
            target(
                "cold dags list (s), issue 18's bar", result["wall_s"]["median"], 0.5, at_most=True
            ),
            target("sync_dags when unchanged (s)", sync["median"], 0.1, at_most=True),
            target("cold files/s >= 0.3 of floor (issue 29)", result["ratio"], 0.3, at_most=False),
        ],
    )
    return result


def w3a(ctx: Context) -> dict:
    """W3's folder written twice, natively and as Airflow files: cold ``dags list`` of
    each, alternated in the same repetition, and their ratio (Airflow / native)."""
    files = 10 if ctx.tiny else 100
    native, airflow = [], []
    for rep in range(ctx.repeat):
        folders = ctx.folder(f"W3A-native-{rep}"), ctx.folder(f"W3A-airflow-{rep}")
        for i in range(files):
            graph = graphs.fan(f"dag_{i:03d}", width=8)
            graph.write_dag_file(folders[0] / "dags")
            graph.write_dag_file(folders[1] / "dags", graphs.AIRFLOW_TEMPLATE)
        native.append(run_cli(folders[0], "dags", "list"))
        airflow.append(run_cli(folders[1], "dags", "list"))
    native_s = spread([m.seconds for m in native])
    airflow_s = spread([m.seconds for m in airflow])
    ratio = airflow_s["median"] / native_s["median"]
    pairs = [a.seconds / n.seconds for a, n in zip(airflow, native, strict=True)]
    return {
        "title": f"dags list, {files} Airflow-style files x 10 tasks vs the same DAGs native",
        "unit": "file",
        "units": files,
        "command": "dagrun dags list",
        "wall_s": airflow_s,
        "native_s": native_s,
        "rate": files / airflow_s["median"],
        "ratio_to_native": ratio,
        "pair_ratios": pairs,
        "memory": memory(airflow),
        "targets": [target("Airflow-style parse / native parse", ratio, 1.25, at_most=True)],
    }


def time_unchanged_sync(folder: Path, tries: int = 3) -> float:
    """In-process ``sync_dags`` on a folder parsed before: the parse work a tick pays."""
    from dagrun.runtime.dag_sync import sync_dags
    from dagrun.store import Store

    store = Store(f"sqlite:///{folder / 'home' / 'dagrun.db'}")
    try:
        times = []
        for _ in range(tries):
            started = time.perf_counter()
            report = sync_dags(store, str(folder / "dags"))
            times.append(time.perf_counter() - started)
            if report.parsed:
                raise RuntimeError(f"W3: unchanged folder re-parsed {len(report.parsed)} file(s)")
        return statistics.median(times)
    finally:
        store.dispose()


# ---------------------------------------------------------------- W6: a mapped fan-out

MAPPED_DAG = '''"""Generated by bench.workloads: one task mapped over {width} elements."""

from dagrun import DAG, task

with DAG("mapped", schedule="@daily", start_date={start!r}, catchup=False):
    @task
    def elements():
        return list(range({width}))

    @task
    def noop(x):
        return None

    noop.expand(x=elements())
'''


def w6(ctx: Context) -> dict:
    """``dagrun run`` of one run whose task is mapped over N elements (N + 1 task instances)
    against the floor running the same N no-op calls with one commit each."""
    width = 100 if ctx.tiny else 1000
    floor_graph = graphs.independent("mapped_floor", width=width)
    single = graphs.chain("single", length=1)
    runs, floors, inner, singles = [], [], [], []
    for rep in range(ctx.repeat):
        singles.append(one_run(ctx, f"W6-single-{rep}", single))
        folder = ctx.folder(f"W6-{rep}")
        (folder / "dags").mkdir()
        dag_file = MAPPED_DAG.format(width=width, start=str(floor_graph.start))
        (folder / "dags" / "mapped.py").write_text(dag_file)
        runs.append(run_cli(folder, "run", "mapped", "--date", str(floor_graph.start)))
        done = count_successes(folder)
        if done != width + 1:
            raise RuntimeError(f"W6: {done} of {width + 1} task instances succeeded")
        m, seconds = graph_floor(folder, floor_graph, 1)
        floors.append(m)
        inner.append(seconds)
    result = throughput(width, runs, floors, inner)
    fixed = spread([m.seconds for m in singles])
    result.update(
        title=f"run of one task mapped over {width} elements",
        unit="task",
        command=f"dagrun run mapped --date {floor_graph.start}",
        # A run's fixed cost (start-up, parse) is measured beside it, as W2 does: what is
        # left, per instance, is the mapped instances' own cost, to set beside W1L's.
        single_task_run_s=fixed,
        marginal_per_task_ms=1000 * (result["wall_s"]["median"] - fixed["median"]) / width,
    )
    return result


def compare_mapping(results: dict[str, dict]) -> None:
    """W6's target, when W1L ran beside it: a mapped instance costs what a W1L task does
    (within 1.25x), each counted past its command's fixed cost."""
    w1l, w6 = results.get("W1L", {}), results.get("W6", {})
    if w1l.get("status") != "ok" or w6.get("status") != "ok":
        return
    per_task = 1000 * w1l["wall_s"]["median"] / w1l["units"]
    ratio = w6["marginal_per_task_ms"] / per_task
    w6["targets"] = [target("ms per mapped instance / W1L ms per task", ratio, 1.25, at_most=True)]


# ---------------------------------------------------------------- W7: waiting sensors

SENSORS_DAG = '''"""Generated by bench.workloads: {count} sensors whose condition never holds."""

from dagrun import DAG, task


def never():
    return False


with DAG("sensors", schedule=None):
    for i in range({count}):
        task.sensor(task_id=f"s{{i:05d}}", poke_interval={poke_interval}, timeout=86400)(never)()
'''


#: How many waiting sensors W7 sets beside W1L: the target is for the first; the second
#: asks for more pokes a second than two cores can make, and shows what that costs.
W7_SENSORS = (1_000, 10_000)
#: Sensors that poked once and wait an hour (holding nothing) beside W1L.
W7_WAITING = 10_000
#: Seconds of the sensors alone, counting their pokes, before W1L starts beside them.
STEADY_SECONDS = 4.0


def w7(ctx: Context) -> dict:
    """W1L's backfill alone, then beside N sensors that a ``dagrun run`` of their DAG pokes
    every second in the same home and store: the ratio W1L keeps, and the pokes per second
    the store sustained meanwhile (their rescheduled attempts during the backfill). Both
    backfills of a repetition are set against one floor, measured with no sensor running:
    the floor (an fsync per task) swings more from one minute to the next than the sensors
    move W1L, and it stands for the machine, not for the load on it."""
    days = 20 if ctx.tiny else 365
    counts = (100,) if ctx.tiny else W7_SENSORS
    alone: list[Measurement] = []
    floors: list[Measurement] = []
    inner: list[float] = []
    beside: dict[int, list[tuple[Measurement, float, float]]] = {n: [] for n in counts}
    waiting_count = 100 if ctx.tiny else W7_WAITING
    waiting: list[Measurement] = []
    for rep in range(ctx.repeat):
        m, floor, seconds = backfill_once(ctx.folder(f"W7-{rep}"), "W7", days, W1L_OPTIONS)
        alone.append(m)
        floors.append(floor)
        inner.append(seconds)
        for n in counts:
            beside[n].append(beside_sensors(ctx.folder(f"W7-{n}-{rep}"), n, days))
        folder = ctx.folder(f"W7-waiting-{rep}")
        waiting.append(beside_waiting_sensors(folder, waiting_count, days))
    tasks = graphs.fan().size * days
    result = throughput(tasks, alone, floors, inner)
    result.update(
        title=f"W1L ({days} days x 11 tasks) alone, then beside waiting sensors",
        unit="task",
        command="dagrun " + " ".join(backfill_args(days, W1L_OPTIONS)),
        beside_sensors={},
    )
    for n, found in beside.items():
        with_sensors = throughput(tasks, [m for m, _, _ in found], floors, inner)
        kept = with_sensors["ratio"] / result["ratio"]
        with_sensors.update(
            pokes_per_s=spread([rate for _, rate, _ in found]),
            pokes_per_s_alone=spread([rate for _, _, rate in found]),
            kept=kept,
            unit="task",
            command=f"dagrun run sensors ({n} sensors, poke_interval=1) beside the backfill",
        )
        result["beside_sensors"][str(n)] = with_sensors
    quiet = throughput(tasks, waiting, floors, inner)
    quiet.update(
        kept=quiet["ratio"] / result["ratio"],
        unit="task",
        command=f"dagrun run sensors ({waiting_count} sensors waiting an hour) beside it",
    )
    result["beside_waiting_sensors"] = quiet
    first = result["beside_sensors"][str(counts[0])]["kept"]
    result["targets"] = [
        target(f"W1L ratio beside {counts[0]} poking sensors / alone", first, 0.8, at_most=False),
        target(
            f"W1L ratio beside {waiting_count} sensors between pokes / alone",
            quiet["kept"],
            0.8,
            at_most=False,
        ),
    ]
    return result


def beside_waiting_sensors(folder: Path, count: int, days: int) -> Measurement:
    """W1L's backfill beside ``count`` sensors that have poked once and now wait an hour in
    ``up_for_reschedule``: what waiting sensors cost the claim and the sweeps (they hold no
    process, slot or lease, so nothing but their rows)."""
    (folder / "dags").mkdir()
    dag_file = SENSORS_DAG.format(count=count, poke_interval=3600)
    (folder / "dags" / "sensors.py").write_text(dag_file)
    poker = start_poking(folder, count)
    try:
        m = backfill_run(folder, "W7", days, W1L_OPTIONS)
        if poker.poll() is not None:
            raise RuntimeError(f"W7: the sensors' run exited {poker.returncode} meanwhile")
    finally:
        stop_poking(poker)
    return m


def beside_sensors(folder: Path, count: int, days: int) -> tuple[Measurement, float, float]:
    """W1L's backfill in ``folder`` while ``count`` sensors are poked there: its measurement,
    the pokes per second during it, and over a few seconds before it (the sensors alone).

    Sensors started together poke together: a poke is due at the first sweep of the queue
    (once a second) after its interval, so a thousand of them poke in a burst every two
    seconds, which a backfill of about a second could fall between. The backfill starts as
    a burst does, so it always runs beside one."""
    (folder / "dags").mkdir()
    (folder / "dags" / "sensors.py").write_text(SENSORS_DAG.format(count=count, poke_interval=1))
    poker = start_poking(folder, count)
    try:
        before = pokes(folder)
        time.sleep(STEADY_SECONDS)
        alone = (pokes(folder) - before) / STEADY_SECONDS
        before = next_burst(folder, poker)
        m = backfill_run(folder, "W7", days, W1L_OPTIONS)
        after = pokes(folder)
        if poker.poll() is not None:
            raise RuntimeError(f"W7: the sensors' run exited {poker.returncode} meanwhile")
    finally:
        stop_poking(poker)
    return m, (after - before) / m.seconds, alone


def start_poking(folder: Path, count: int) -> subprocess.Popen:
    """``dagrun run sensors`` in the background, once every sensor has poked (it runs its
    own run's tasks only, so none of W1L's). Raises if the sensors never poke."""
    log = folder / "sensors.log"
    with open(log, "wb") as out:
        poker = subprocess.Popen(
            [*dagrun_command(), "run", "sensors", "--workers", "2"],
            env=cli_env(folder / "home", folder / "dags"),
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60 + count / 100
    while pokes(folder) < count:
        if poker.poll() is not None or time.monotonic() > deadline:
            stop_poking(poker)
            raise RuntimeError(
                f"W7: {pokes(folder)} of {count} sensors poked (exit {poker.returncode}):\n"
                + log.read_text(errors="replace")[-2000:]
            )
        time.sleep(0.2)
    return poker


def next_burst(folder: Path, poker: subprocess.Popen) -> int:
    """Wait until the sensors poke again; the pokes so far, the first of them included."""
    seen = pokes(folder)
    deadline = time.monotonic() + 30
    while (now := pokes(folder)) == seen:
        if poker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"W7: the sensors stopped poking (exit {poker.returncode})")
        time.sleep(0.01)
    return now


def stop_poking(poker: subprocess.Popen) -> None:
    if poker.poll() is None:
        poker.terminate()
        try:
            poker.wait(60)
        except subprocess.TimeoutExpired:
            poker.kill()
            poker.wait(10)


def pokes(folder: Path) -> int:
    """Sensors' pokes so far: their rescheduled attempts (none while the store is made)."""
    db = folder / "home" / "dagrun.db"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute(
                "SELECT count(*) FROM task_attempt WHERE outcome = 'rescheduled'"
            ).fetchone()[0]
    except sqlite3.OperationalError:  # no table yet
        return 0


# ---------------------------------------------------------------- W5: the web grid


def w5(ctx: Context) -> dict:
    """The web grid benchmark lives in bench/web_grid.py (another engineer's); call it if there."""
    if importlib.util.find_spec("bench.web_grid") is None:
        return {"title": "web grid", "status": "not available"}
    web_grid = importlib.import_module("bench.web_grid")
    argv = ["--tiny"] if ctx.tiny else []
    try:
        found = web_grid.main(argv)
    except SystemExit as exc:
        return {"title": "web grid", "status": f"exited {exc.code} with argv {argv}"}
    return {"title": "web grid", "status": "ok", **(found or {})}
