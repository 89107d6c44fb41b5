"""Wall time and peak memory of a command and every process it starts.

The CLI forks worker children and parser children, so the memory that matters is the sum
over the whole process tree at its worst moment. A thread samples ``/proc`` every ~20 ms:
it finds the descendants of the root by parent pid (this kernel has no ``children`` files),
and sums ``VmRSS`` (the number the target is stated in; it counts pages shared after fork
once per process) and ``Pss`` (shared pages split between sharers, the honest total). The
kernel's own ``ru_maxrss`` from ``wait4`` is kept as a cross-check: the largest single
process, which the sampled sum must never be below.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: RSS (cheap to read) is sampled this often; PSS (the kernel walks every page table to
#: answer) only every ``PSS_EVERY``-th time. At 20 ms with PSS each time the sampler took a
#: sizeable share of a core from the two the measured commands have.
SAMPLE_SECONDS = 0.05
PSS_EVERY = 5


@dataclass
class Measurement:
    """One command: how long, how it ended, and its process tree's peak memory in MB."""

    seconds: float
    returncode: int
    cpu_s: float
    peak_rss_mb: float
    peak_pss_mb: float
    maxrss_mb: float
    processes: int
    stdout: str = ""
    stderr: str = ""

    def check(self, what: str) -> Measurement:
        """Raise with the command's own output when it failed: a failed run is no number."""
        if self.returncode != 0:
            raise RuntimeError(
                f"{what} exited {self.returncode}\n--- stdout\n{self.stdout[-2000:]}\n"
                f"--- stderr\n{self.stderr[-4000:]}"
            )
        return self


def _read_parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    return int(data[data.rindex(b")") + 2 :].split(b" ", 2)[1])


def _read_kb(path: str, field_name: bytes) -> int:
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if line.startswith(field_name):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class TreeSampler:
    """Samples the memory of the process trees under ``roots`` until stopped."""

    def __init__(self, roots: list[int], interval: float = SAMPLE_SECONDS):
        self.roots = set(roots)
        self.interval = interval
        self.peak_rss_kb = 0
        self.peak_pss_kb = 0
        self.seen: set[int] = set()
        self._samples = 0
        self._parents: dict[int, int | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()

    def add_root(self, pid: int) -> None:
        self.roots.add(pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def tree(self) -> set[int]:
        """The roots and all their live descendants (parent pids cached per pid)."""
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        for pid in pids:
            if pid not in self._parents:
                self._parents[pid] = _read_parent(pid)
        members = set(self.roots)
        grew = True
        while grew:
            added = {p for p in pids if p not in members and self._parents.get(p) in members}
            members |= added
            grew = bool(added)
        return members & set(pids)

    def sample(self) -> None:
        members = self.tree()
        self.seen |= members
        rss = sum(_read_kb(f"/proc/{pid}/status", b"VmRSS:") for pid in members)
        self.peak_rss_kb = max(self.peak_rss_kb, rss)
        if self._samples % PSS_EVERY == 0:
            pss = sum(_read_kb(f"/proc/{pid}/smaps_rollup", b"Pss:") for pid in members)
            self.peak_pss_kb = max(self.peak_pss_kb, pss)
        self._samples += 1


def reap(pid: int, deadline: float | None = None) -> tuple[int, float, int] | None:
    """Reap ``pid`` with ``wait4``: exit code, CPU seconds (user + system, including every
    descendant it waited for: pool and parse children) and ru_maxrss in KB. With a deadline,
    None when the process is still running at the deadline."""
    while True:
        flags = 0 if deadline is None else os.WNOHANG
        found, status, usage = os.wait4(pid, flags)
        if found:
            cpu = usage.ru_utime + usage.ru_stime
            return os.waitstatus_to_exitcode(status), cpu, usage.ru_maxrss
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat; diff two readings."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def run_command(
    cmd: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 1800.0
) -> Measurement:
    """Run ``cmd`` to its end; wall seconds, exit code, peak memory of its process tree."""
    out_path, err_path = cwd / ".bench-stdout", cwd / ".bench-stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err)
        with TreeSampler([proc.pid]) as sampler:
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                code, cpu, maxrss_kb = reap(proc.pid)
                proc.returncode = code
            finally:
                timer.cancel()
            seconds = time.perf_counter() - started
    return Measurement(
        seconds=seconds,
        returncode=code,
        cpu_s=cpu,
        peak_rss_mb=sampler.peak_rss_kb / 1024,
        peak_pss_mb=sampler.peak_pss_kb / 1024,
        maxrss_mb=maxrss_kb / 1024,
        processes=len(sampler.seen),
        stdout=out_path.read_text(errors="replace"),
        stderr=err_path.read_text(errors="replace"),
    )


def spread(values: list[float]) -> dict:
    """Median, min and max of repeated runs (the median is what ratios are built on)."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }
