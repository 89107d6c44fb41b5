"""Half a minute of faults mixed at random (fixed seed) while runs keep coming: workers
SIGKILLed and restarted, paused past their lease, children dying, the database cut off, a
DAG file that hangs at import. Afterwards every run has ended, nothing ran twice without a
record of why, and no process is left behind."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from dagrun.store import Store
from tests.faults.invariants import check_effects, leftovers, runs_ended, token_env
from tests.faults.proxy import CuttableProxy
from tests.helpers import queue_run, start_cli, stop_process, wait_until, write_dag

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SEED = 20261201
FAULT_SECONDS = 30

# Each attempt draws its fate from (run, task, try): some children die on a first try,
# some tasks take a while; every attempt that gets to its end writes its effect.
SOAK = """
import os, random, time
from dagrun import DAG, BashTask, task

with DAG("soak", schedule=None, max_active_runs=6,
         default_args={{"retries": 3, "retry_delay": 0.05}}):
    @task
    def step(ctx, try_number):
        fate = random.Random(f"{seed}/{{ctx.run_id}}/{{ctx.task_id}}/{{try_number}}").random()
        if try_number == 1 and fate < 0.1:
            os._exit(3)
        time.sleep(fate * 1.5)
        with open({effects!r}, "a") as handle:
            handle.write(f"{{ctx.run_id}}/{{ctx.task_id}}\\n")

    shell = BashTask("shell", command="sleep 0.5; echo $RUN_ID/$TASK_ID >> {effects}")
    first = step()
    first >> [step(), step(), shell] >> step()
"""


class Soak:
    """The processes under test and the faults applied to them."""

    def __init__(self, env: dict[str, str], tmp_path: Path, proxy: CuttableProxy) -> None:
        self.env = env
        self.tmp_path = tmp_path
        self.proxy = proxy
        self.rng = random.Random(SEED)
        self.scheduler = start_cli(
            "scheduler", "--workers", "2", "--poll", "0.5", env=env, log=tmp_path / "s.log"
        )
        self.worker = self._start_worker()
        self.plan: list[str] = []
        self.applied: list[str] = []

    def _start_worker(self):
        log = self.tmp_path / f"w{len(list(self.tmp_path.glob('w*.log')))}.log"
        return start_cli("worker", "-c", "2", "--poll", "0.5", env=self.env, log=log)

    def fault(self, dags_dir: Path) -> None:
        if not self.plan:  # every kind of fault once per round, in a seeded order
            self.plan = ["kill_worker", "pause_worker", "cut", "kill_child", "hang"]
            self.rng.shuffle(self.plan)
        kind = self.plan.pop()
        self.applied.append(kind)
        getattr(self, kind)(dags_dir)

    def kill_worker(self, _dags_dir: Path) -> None:
        os.kill(self.worker.pid, signal.SIGKILL)
        self.worker.wait(10)
        self.worker = self._start_worker()

    def pause_worker(self, _dags_dir: Path) -> None:
        os.kill(self.worker.pid, signal.SIGSTOP)
        time.sleep(4)  # longer than the 3 s lease: the fault itself
        os.kill(self.worker.pid, signal.SIGCONT)

    def cut(self, _dags_dir: Path) -> None:
        self.proxy.cut()
        time.sleep(self.rng.uniform(2, 4))  # the outage itself
        self.proxy.restore()

    def kill_child(self, _dags_dir: Path) -> None:
        children = _children_of(self.scheduler.pid)
        if children:
            os.kill(self.rng.choice(children), signal.SIGKILL)

    def hang(self, dags_dir: Path) -> None:
        path = write_dag(dags_dir, "hangs.py", "import time\ntime.sleep(6)\n")
        time.sleep(7)  # a parse that hangs for longer than a lease
        path.unlink()

    def stop(self) -> None:
        for process in (self.worker, self.scheduler):
            stop_process(process)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def test_half_a_minute_of_mixed_faults_loses_nothing(pg_url, dags_dir, tmp_path):
    effects = tmp_path / "effects.log"
    write_dag(dags_dir, "soak.py", SOAK.format(seed=SEED, effects=str(effects)))
    store = Store(pg_url)
    proxy = CuttableProxy()
    env = {
        "DAGRUN_DB_URL": proxy.url(pg_url),
        "DAGRUN_HOME": str(tmp_path / "home"),
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
        "DAGRUN_LEASE_SECONDS": "3",
        "DAGRUN_PARSE_TIMEOUT": "10",
        **token_env(),
    }
    soak = Soak(env, tmp_path, proxy)
    queued = 0
    try:
        ends = time.monotonic() + FAULT_SECONDS
        while time.monotonic() < ends:
            queue_run(store, dags_dir, "soak", run_id=f"soak-{queued}")
            queued += 1
            soak.fault(dags_dir)
        wait_until(lambda: sum(runs_ended(store).values()) == queued, 5, what="the runs")
        wait_until(
            lambda: set(runs_ended(store)) <= {"success", "failed"}, 180, what="every run to end"
        )
        assert soak.scheduler.poll() is None, (tmp_path / "s.log").read_text()
    finally:
        soak.stop()
        proxy.close()
    assert queued >= 8 and len(set(soak.applied)) == 5, soak.applied
    ended = runs_ended(store)
    assert ended.get("success", 0) >= queued - 1, ended  # a run may spend its budgets
    check_effects(store, effects)
    wait_until(lambda: not leftovers(env), 20, what="every process of the soak to end")
    store.dispose()
