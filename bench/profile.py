"""Where the time goes: one workload's CLI command under cProfile, with SQL counted, or py-spy.

``python -m bench.profile W1L`` prepares the workload's folder as the benchmark does, runs
the ``dagrun`` command in this process under cProfile (the parent loop: worker children are
forked and not profiled) while counting every SQL statement the parent sends, and prints the
top functions by cumulative and own time and the statements by total time, each also per
task. ``--py-spy`` instead samples the whole process tree (children included) with py-spy
and prints the hottest functions per process; ``W4`` always uses py-spy on one worker.
Both write their raw output to ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench import graphs
from bench.workloads import cli_env, dagrun_command


def py_spy_record(raw: Path) -> list[str]:
    """The py-spy command that samples a command and all its subprocesses into ``raw``."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return [
        spy,
        "record",
        "--subprocesses",
        "--rate",
        "200",
        "--format",
        "raw",
        "--nonblocking",
        "-o",
        str(raw),
        "--",
    ]


def prepare(workload: str, folder: Path, tiny: bool) -> tuple[list[str], int]:
    """Write the workload's DAG files into ``folder/dags``; the CLI argv and the task count."""
    dags = folder / "dags"
    if workload in ("W1", "W1L"):
        days = {"W1": 5 if tiny else 30, "W1L": 20 if tiny else 365}[workload]
        graph = graphs.fan()
        graph.write_dag_file(dags)
        first, last = graph.dates(days)[0], graph.dates(days)[-1]
        extra = ["--max-active-runs", "16", "--workers", "2"] if workload == "W1L" else []
        argv = ["backfill", "fan", "--start", str(first), "--end", str(last), *extra]
        return argv, graph.size * days
    if workload == "W2":
        graph = graphs.chain(length=20 if tiny else 100)
        graph.write_dag_file(dags)
        return ["run", graph.dag_id, "--date", str(graph.start)], graph.size
    if workload == "W3":
        files = 10 if tiny else 100
        for i in range(files):
            graphs.fan(f"dag_{i:03d}", width=8).write_dag_file(dags)
        return ["dags", "list"], files * 10
    raise SystemExit(f"no profile recipe for {workload}; choose W1, W1L, W2 or W3")


class SqlCounter:
    """Counts and times every statement the parent process sends, by normalised text."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def install(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        from dagrun.store import sql

        event.listen(Engine, "before_cursor_execute", self._before)
        event.listen(Engine, "after_cursor_execute", self._after)
        # dagrun's statements run on the driver's cursor, out of SQLAlchemy's events
        # Kept on self: the rest of the profiled process is inside this block.
        self._watch = sql.observed(lambda statement, _p, seconds: self._record(statement, seconds))
        self._watch.__enter__()
        self._time_commits()

    def _time_commits(self) -> None:
        """COMMIT is the DBAPI's ``commit()``, not a cursor statement: time it separately,
        because with ``synchronous=FULL`` it is where the fsync is paid."""
        from sqlalchemy.engine.default import DefaultDialect

        original = DefaultDialect.do_commit

        def do_commit(dialect, dbapi_connection) -> None:
            started = time.perf_counter()
            try:
                original(dialect, dbapi_connection)
            finally:
                self.count["COMMIT"] += 1
                self.seconds["COMMIT"] += time.perf_counter() - started

        DefaultDialect.do_commit = do_commit

    def _before(self, conn, _cursor, _statement, _params, context, _many) -> None:
        conn.info.setdefault("bench_started", []).append(time.perf_counter())

    def _after(self, conn, _cursor, statement, _params, _context, _many) -> None:
        self._record(statement, time.perf_counter() - conn.info["bench_started"].pop())

    def _record(self, statement: str, seconds: float) -> None:
        key = normalise(statement)
        self.count[key] += 1
        self.seconds[key] += seconds


def normalise(statement: str) -> str:
    """One line, parameter lists collapsed, so the same statement groups under one key."""
    text = " ".join(statement.split())
    text = re.sub(
        r"\((?:\?|%\([^)]*\)s|__\[POSTCOMPILE_[^\]]*\])(?:, ?(?:\?|%\([^)]*\)s))*\)", "(...)", text
    )
    return text[:150]


def profile_in_process(argv: list[str], folder: Path, out: Path, tasks: int, top: int) -> None:
    """Run the command here under cProfile (import included) and print the hot spots."""
    env = cli_env(folder / "home", folder / "dags")
    os.environ.clear()
    os.environ.update(env)
    os.chdir(folder)
    sql = SqlCounter()
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    try:
        import dagrun.cli

        sql.install()
        dagrun.cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    finally:
        profiler.disable()
    wall = time.perf_counter() - started
    profiler.dump_stats(out / "parent.prof")
    print(
        f"dagrun {' '.join(argv)}: exit {code}, {wall:.3f} s in-process "
        f"({1000 * wall / tasks:.2f} ms per task, {tasks} tasks); profile in {out}"
    )
    print_stats(out / "parent.prof", "cumulative", top, tasks)
    print_stats(out / "parent.prof", "tottime", top, tasks)
    print_sql(sql, tasks, top)


def print_stats(path: Path, order: str, top: int, tasks: int) -> None:
    stream = io.StringIO()
    stats = pstats.Stats(str(path), stream=stream)
    stats.sort_stats(order).print_stats(top)
    print(f"\n--- top {top} by {order} (divide by {tasks} for per task)")
    body = stream.getvalue()
    print(body[body.index("   ncalls") :] if "   ncalls" in body else body)


def print_sql(sql: SqlCounter, tasks: int, top: int) -> None:
    total = sum(sql.seconds.values())
    print(
        f"--- SQL in the parent: {sum(sql.count.values())} statements and commits, "
        f"{total:.3f} s ({1000 * total / tasks:.2f} ms per task)"
    )
    print(f"{'calls':>7} {'total s':>8} {'ms/task':>8}  statement")
    for key, seconds in sorted(sql.seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{sql.count[key]:>7} {seconds:>8.3f} {1000 * seconds / tasks:>8.3f}  {key}")


def profile_py_spy(argv: list[str], folder: Path, out: Path, tasks: int, top: int) -> None:
    """Sample every process of the command with py-spy; hottest functions per process."""
    raw = out / "py-spy.txt"
    cmd = [
        *py_spy_record(raw),
        *dagrun_command(),
        *argv,
    ]
    started = time.perf_counter()
    subprocess.run(
        cmd,
        env=cli_env(folder / "home", folder / "dags"),
        cwd=folder,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    print(f"dagrun {' '.join(argv)} under py-spy: {wall:.3f} s, {tasks} tasks; raw in {raw}")
    print_py_spy(raw, top)


def print_py_spy(raw: Path, top: int) -> None:
    """Inclusive samples per function (each counted once per stack), by process role.

    py-spy nests a forked child's stack under its parent's (one ``process N:`` frame per
    generation), so the innermost process frame names the process and the stack says its
    role: a worker child runs ``child_main``, a parse child ``parser._child``.
    """
    per_role: dict[str, Counter[str]] = defaultdict(Counter)
    totals: Counter[str] = Counter()
    pids: dict[str, set[str]] = defaultdict(set)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        role = _role(frames)
        pids[role].add(processes[-1].split(":")[0] if processes else "?")
        totals[role] += int(count)
        for frame in {_short(f) for f in _own_frames(frames, role)}:
            per_role[role][frame] += int(count)
    everything = sum(totals.values())
    for role, total in totals.most_common():
        print(
            f"\n--- {role} ({len(pids[role])} process(es)): {total} samples, "
            f"{100 * total / everything:.0f}% of all; inclusive % of the role, top {top}"
        )
        for frame, n in per_role[role].most_common(top):
            print(f"{100 * n / total:6.1f}%  {frame}")


#: The path of the parse children's entry point, as py-spy names its frame.
PARSE_CHILD = "_child (dagrun/parsing/parser.py"
ANCHORS = {"worker child": "child_main (", "parse child": PARSE_CHILD}


def _own_frames(frames: list[str], role: str) -> list[str]:
    """A forked child's frames from its entry point on (the rest is its parent's past)."""
    anchor = ANCHORS.get(role)
    start = next((i for i, f in enumerate(frames) if anchor and f.startswith(anchor)), 0)
    return [f for f in frames[start:] if not f.startswith("process ")]


def _role(frames: list[str]) -> str:
    text = ";".join(frames)
    if "child_main (" in text:
        return "worker child"
    if PARSE_CHILD in text:
        return "parse child"
    return "parent"


def _short(frame: str) -> str:
    """``function (path:line)`` to ``path:function`` with site-packages trimmed."""
    match = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    function, path = match.groups()
    path = re.sub(r".*/site-packages/", "", path)
    path = re.sub(r".*/(dagrun|bench)/", r"\1/", path)
    return f"{path}:{function}"


def profile_worker(folder: Path, out: Path, tiny: bool, top: int) -> None:
    """W4's path: one ``dagrun worker --concurrency 2`` on PostgreSQL under py-spy, draining
    a queue filled in-process, stopped with SIGTERM once the queue is empty."""
    from bench import worker_scale
    from bench.measure import TreeSampler

    runs = 50 if tiny else 300
    graph = graphs.independent(
        "wide",
        worker_scale.WIDTH,
        start=worker_scale.START,
        max_active_runs=runs,
        effect_file=str(folder / "effects.log"),
    )
    graph.write_dag_file(folder / "dags")
    raw = out / "py-spy.txt"
    with worker_scale.pg_schema(worker_scale.pg_base_url()) as url:
        tasks = worker_scale.fill_queue(url, folder / "dags", graph.dag_id, runs)
        cmd = [*py_spy_record(raw), *worker_scale.worker_command(url, folder / "dags")]
        started = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            env=cli_env(folder / "home", folder / "dags"),
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        drained = worker_scale.wait_drained(url, [proc], started + 600)
        worker = min(TreeSampler([proc.pid]).tree() - {proc.pid})
        os.kill(worker, signal.SIGTERM)
        proc.wait(120)
    print(
        f"one worker drained {tasks} tasks in {drained - started:.2f} s "
        f"({tasks / (drained - started):.0f}/s) under py-spy; raw in {raw}"
    )
    print_py_spy(raw, top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("workload", choices=["W1", "W1L", "W2", "W3", "W4"])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--py-spy", action="store_true", help="Sample the whole process tree.")
    parser.add_argument("--out", type=Path, default=None, help="Folder for raw output.")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix=f"dagrun-profile-{args.workload}-"))
    out = args.out or folder / "out"
    out.mkdir(parents=True, exist_ok=True)
    if args.workload == "W4":
        profile_worker(folder, out.resolve(), args.tiny, args.top)
        return 0
    cli_argv, tasks = prepare(args.workload, folder, args.tiny)
    if args.py_spy:
        profile_py_spy(cli_argv, folder, out.resolve(), tasks, args.top)
    else:
        profile_in_process(cli_argv, folder, out.resolve(), tasks, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
