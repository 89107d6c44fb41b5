"""A real full disk under the store: the SQLite file on a small tmpfs that fills while a
backfill runs. The backfill ends with one line naming the full disk, every run committed
before is still there, and the same command completes the backfill once space is freed."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.faults.invariants import leftovers, token_env
from tests.helpers import run_cli, start_cli, stop_process, wait_until, write_dag

pytestmark = pytest.mark.slow

DAILY = """
import time
from dagrun import DAG, task

with DAG("daily", schedule="@daily", start_date="2026-01-01", catchup=False):

    @task
    def extract(ds):
        time.sleep(0.05)
        return ds * 200

    @task
    def load(value):
        return len(value)

    load(extract())
"""
COMMAND = ("backfill", "daily", "--start", "2026-01-01", "--end", "2026-05-31")


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 16 MiB tmpfs, unmounted afterwards; the test is skipped where mounting is not
    allowed."""
    where = tmp_path / "disk"
    where.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write to ``disk`` until it has no byte left."""
    filler = disk / "filler"
    try:
        with filler.open("wb", buffering=0) as handle:
            while True:
                handle.write(b"\0" * 4096)
    except OSError:
        pass
    return filler


def succeeded(path: Path) -> set[str]:
    """The runs that succeeded (none while the store is still being made)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r for (r,) in db.execute("SELECT run_id FROM dag_run WHERE state = 'success'")}
    except sqlite3.OperationalError:
        return set()
    finally:
        db.close()


def test_a_backfill_on_a_full_disk_ends_with_one_line_and_resumes(small_disk, dags_dir, tmp_path):
    write_dag(dags_dir, "daily.py", DAILY)
    path = small_disk / "dagrun.db"
    env = {
        "DAGRUN_HOME": str(tmp_path / "home"),  # logs elsewhere: only the store's disk fills
        "DAGRUN_DAGS_FOLDER": str(dags_dir),
        "DAGRUN_DB_URL": f"sqlite:///{path}",
        "DAGRUN_DB_OUTAGE_SECONDS": "2",
        **token_env(),
    }
    log = tmp_path / "backfill.log"
    backfill = start_cli(*COMMAND, env=env, log=log)
    try:
        wait_until(lambda: path.exists() and len(succeeded(path)) >= 5, 60, what="five runs")
        before = succeeded(path)
        filler = fill(small_disk)
        assert backfill.wait(60) == 1, log.read_text()
    finally:
        stop_process(backfill)
    said = log.read_text()
    assert "Traceback" not in said, said
    last = said.strip().splitlines()[-1]
    assert last.startswith(f"error: the disk under the database {path} is full"), said
    assert "free space there and run the same command again" in last
    assert said.count("the disk under the database") == 2, said  # the outage, then the end
    assert before <= succeeded(path)  # nothing committed is lost
    assert len(succeeded(path)) < 151, "the backfill ended before the disk filled"

    filler.unlink()
    again = run_cli(*COMMAND, env=env, timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(succeeded(path)) == 151
    wait_until(lambda: not leftovers(env), 15, what="every process of the test to end")
