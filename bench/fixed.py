"""F1 to F4: what a command pays before it works, and what a chained task costs (issue 29).

F1 to F3 time a whole command against an interpreter floor, ``python -c "import sqlite3,
click, json"`` (starting Python and importing what any dagrun command needs at the least),
run right before it in the same repetition, so that a machine slowing down slows both:
floor, command, floor, command... Their number is times the floor, the median command over
the median floor (lower is better; 1.0 would be a command that costs no more than that).
Both run with ``PYTHONDONTWRITEBYTECODE`` unset (``workloads.user_environ``).

F4 counts database commits instead of seconds: the commits of a ``dagrun run`` of a chain
of 100 tasks less those of a run of one task, over the 99 tasks between, so the run's fixed
commits (creating the run, the worker's heartbeat, ending the run) fall out. Commits are
counted in every process of the command's tree by ``bench.commits`` (a trace of each SQLite
connection, installed as ``sitecustomize``), from outside dagrun.

Every command runs on a store that already served the same command once, so what is timed
is the cost of every use, not the first use's (creating the database and its schema,
registering the DAG files).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from bench import commits, graphs
from bench.measure import Measurement, run_command, spread
from bench.workloads import (
    Context,
    cli_env,
    count_successes,
    dagrun_command,
    memory,
    run_cli,
    target,
    user_environ,
)

FLOOR_CODE = "import sqlite3, click, json"


def interpreter_floor(folder: Path) -> Measurement:
    """The floor: the interpreter starting and importing the modules every command needs."""
    cmd = [sys.executable, "-c", FLOOR_CODE]
    return run_command(cmd, env=user_environ(), cwd=folder).check("floor " + FLOOR_CODE)


def against_floor(ctx: Context, folder: Path, command: Callable[[], Measurement]) -> dict:
    """``command`` and the floor, alternated ``ctx.repeat`` times; their medians' ratio."""
    floors, runs = [], []
    for _ in range(ctx.repeat):
        floors.append(interpreter_floor(folder))
        runs.append(command())
    wall = spread([m.seconds for m in runs])
    floor = spread([m.seconds for m in floors])
    return {
        "kind": "fixed",
        "wall_s": wall,
        "floor_s": floor,
        "floor_command": f'python -c "{FLOOR_CODE}"',
        "times_floor": wall["median"] / floor["median"],
        "pair_ratios": [m.seconds / f.seconds for m, f in zip(runs, floors, strict=True)],
        **memory(runs),
    }


def f1(ctx: Context) -> dict:
    """``dagrun --help``: what the CLI costs before it does anything."""
    folder = ctx.folder("F1")
    result = against_floor(ctx, folder, lambda: run_cli(folder, "--help"))
    result.update(title="dagrun --help", command="dagrun --help")
    result["targets"] = [
        target("dagrun --help, times the floor", result["times_floor"], 2.5, at_most=True)
    ]
    return result


def f2(ctx: Context) -> dict:
    """``dagrun run`` of a one-task DAG with no schedule, end to end, on a store that ran it
    once already: each repetition is a new manual run."""
    folder = ctx.folder("F2")
    graphs.chain("one_task", length=1, schedule=None).write_dag_file(folder / "dags")
    run_cli(folder, "run", "one_task")
    result = against_floor(ctx, folder, lambda: run_cli(folder, "run", "one_task"))
    done = count_successes(folder)
    if done != ctx.repeat + 1:
        raise RuntimeError(f"F2: {done} of {ctx.repeat + 1} one-task runs succeeded")
    result.update(title="a 1-task run, end to end", command="dagrun run one_task")
    result["targets"] = [
        target("1-task run, end to end, times the floor", result["times_floor"], 3.5, at_most=True)
    ]
    return result


def f3(ctx: Context) -> dict:
    """``dags list`` of W3's folder with nothing changed since a listing that parsed it."""
    files = 10 if ctx.tiny else 100
    folder = ctx.folder("F3")
    for i in range(files):
        graphs.fan(f"dag_{i:03d}", width=8).write_dag_file(folder / "dags")
    run_cli(folder, "dags", "list")
    result = against_floor(ctx, folder, lambda: run_cli(folder, "dags", "list"))
    result.update(
        title=f"dags list of {files} files, nothing changed",
        command="dagrun dags list",
        files=files,
    )
    result["targets"] = [
        target(
            "dags list, nothing changed, times the floor",
            result["times_floor"],
            3.0,
            at_most=True,
        )
    ]
    return result


def f4(ctx: Context) -> dict:
    """Commits per task of a chain past the run's fixed commits: a chain's run and a 1-task
    run, each counted on a store that ran the same DAG once before."""
    length = 20 if ctx.tiny else 100
    site = commits.site_folder(ctx.scratch / "F4-site")
    chain = graphs.chain("chain", length=length, schedule=None)
    single = graphs.chain("one_task", length=1, schedule=None)
    folders = {g.dag_id: ctx.folder(f"F4-{g.dag_id}") for g in (chain, single)}
    for graph in (chain, single):
        graph.write_dag_file(folders[graph.dag_id] / "dags")
        run_cli(folders[graph.dag_id], "run", graph.dag_id)
    per_task, chain_counts, single_counts = [], [], []
    for rep in range(ctx.repeat):
        chain_counts.append(counted_run(folders["chain"], "chain", site, rep))
        single_counts.append(counted_run(folders["one_task"], "one_task", site, rep))
        in_chain, alone = sum(chain_counts[-1].values()), sum(single_counts[-1].values())
        per_task.append((in_chain - alone) / (length - 1))
    for graph in (chain, single):
        done = count_successes(folders[graph.dag_id])
        if done != graph.size * (ctx.repeat + 1):
            raise RuntimeError(f"F4: {done} of {graph.size * (ctx.repeat + 1)} tasks succeeded")
    value = statistics.median(per_task)
    return {
        "kind": "fixed",
        "title": f"commits per task of a {length}-task chain, past the run's fixed commits",
        "command": "dagrun run chain; dagrun run one_task",
        "chain_length": length,
        "commits_per_task": value,
        "per_task_runs": per_task,
        "chain_commits": spread([sum(c.values()) for c in chain_counts]),
        "single_commits": spread([sum(c.values()) for c in single_counts]),
        "committing_processes": max(len(c) for c in chain_counts),
        "method": "SQLite trace of every connection in the process tree (bench/commits.py)",
        "targets": [target("commits per chained task", value, 2.0, at_most=True)],
    }


def counted_run(folder: Path, dag_id: str, site: Path, rep: int) -> dict[int, int]:
    """``dagrun run DAG_ID`` in ``folder`` with its commits counted: commits per process."""
    log = folder / f"commits-{rep}.log"
    env = cli_env(folder / "home", folder / "dags")
    path = [str(site), *filter(None, [env.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(path), **{commits.LOG_VARIABLE: str(log)})
    cmd = [*dagrun_command(), "run", dag_id]
    run_command(cmd, env=env, cwd=folder).check(f"dagrun run {dag_id} (commits counted)")
    found = commits.commits_by_process(log)
    if not found:
        raise RuntimeError(f"F4: no commit seen in dagrun run {dag_id}: is SQLite traced?")
    return found
