"""Entry point: ``python -m bench`` or ``python bench/run.py``.

Runs the chosen workloads, prints a table (ratios to the floor first, absolute numbers as
context for this machine) and the targets of issues 7, 18 and 29, and writes every number to
a JSON file. A workload that fails is reported as an error and the exit code is 1; the others
still run, so one broken path does not hide the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fixed, herd, report, scale, web_grid, worker_scale, workloads

WORKLOADS = {
    "W1": workloads.w1,
    "W1L": workloads.w1l,
    "W2": workloads.w2,
    "W3": workloads.w3,
    "W3A": workloads.w3a,
    "W4": worker_scale.w4,
    "W5": workloads.w5,
    "W6": workloads.w6,
    "W7": workloads.w7,
    # The scale workloads (issue 18): each sets its per-unit cost beside its small
    # counterpart's (W1L, W3, W5, W4), reused when that ran earlier in the same invocation.
    "W1XL": scale.w1xl,
    "W3XL": scale.w3xl,
    "W5XL": web_grid.w5xl,
    "W4H": herd.w4h,
    # The fixed costs (issue 29): F1 to F3 in times an interpreter floor measured beside
    # them, F4 in commits per chained task.
    "F1": fixed.f1,
    "F2": fixed.f2,
    "F3": fixed.f3,
    "F4": fixed.f4,
}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "latest.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="Seconds-long sizes (for CI).")
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help="Comma-separated workloads (default: all)."
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="Repetitions per workload; the median is reported (default 3).",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file.")
    parser.add_argument("--keep", action="store_true", help="Keep the scratch folders.")
    args = parser.parse_args(argv)
    args.only = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in args.only if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def machine() -> dict:
    """What the numbers were measured on: they only mean something next to this (and next
    to the load other processes put on the machine meanwhile)."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "commit_ms": commit_probe(),
        "dagrun_cli": " ".join(workloads.dagrun_command()),
        "git": git_state(),
    }


def commit_probe(commits: int = 50) -> dict:
    """Latency of one durable SQLite commit here and now: the unit the floor is made of."""
    from bench.floor import TASK_TABLE, connect
    from bench.measure import spread

    with tempfile.TemporaryDirectory(prefix="dagrun-bench-probe-") as folder:
        conn = connect(str(Path(folder) / "probe.db"))
        conn.execute(TASK_TABLE)
        times = []
        for i in range(commits):
            started = time.perf_counter()
            conn.execute("BEGIN")
            conn.execute("INSERT INTO task_instance VALUES ('p', ?, 'success', 1, 0, 0)", (i,))
            conn.execute("COMMIT")
            times.append(1000 * (time.perf_counter() - started))
        conn.close()
    found = spread(times)
    del found["runs"]
    return found


def git_state() -> str:
    """The commit measured, marked dirty when dagrun/ has uncommitted changes."""
    repo = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "dagrun")
    except OSError:
        return "unknown"
    return f"{head}{' + uncommitted dagrun/ changes' if dirty else ''}" if head else "unknown"


def run_one(name: str, ctx: workloads.Context) -> dict:
    """One workload, timed as a whole; a failure becomes an error entry, not a crash."""
    print(f"running {name}...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        result = WORKLOADS[name](ctx)
    except Exception as exc:
        traceback.print_exc()
        result = {"status": f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}"}
    result.setdefault("status", "ok")
    result["bench_seconds"] = time.perf_counter() - started
    result["load_average_after"] = os.getloadavg()
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="dagrun-bench-"))
    ctx = workloads.Context(tiny=args.tiny, repeat=args.repeat, scratch=scratch)
    document = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "tiny": args.tiny,
        "repeat": args.repeat,
        "machine": machine(),
        "workloads": {},
    }
    try:
        for name in args.only:
            document["workloads"][name] = ctx.results[name] = run_one(name, ctx)
        workloads.compare_mapping(document["workloads"])
    finally:
        if args.keep:
            print(f"scratch kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2, default=str))
    print(report.render(document))
    print(f"\nresults written to {args.out}")
    failed = [n for n, r in document["workloads"].items() if r["status"].startswith("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
