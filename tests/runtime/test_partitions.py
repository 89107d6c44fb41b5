"""Date partitions: layout, atomic replacement, deterministic bytes, fenced and recorded writes.

The fenced tests hold a real claimed task instance in a store (SQLite and PostgreSQL) and
lose it the two ways a worker can: the task is reaped after its lease expired, or it is
released and claimed again by another worker.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select, update

from dagrun import DAG, BashTask, partition
from dagrun.errors import LeaseLost, NonRetryableError
from dagrun.parsing.loader import build_spec
from dagrun.runtime import partitions as partitions_module
from dagrun.runtime.context import make_context
from dagrun.runtime.current import set_current
from dagrun.runtime.partitions import InvalidPartition, PartitionNotFound
from dagrun.states import RunType
from dagrun.store import attempts, engine, registry, runs, upkeep
from dagrun.store.attempts import Claim
from dagrun.store.schema import partition_write, task_instance

DS = "2026-01-05"
OLD = pd.DataFrame({"order_id": ["a", "b", "c"], "amount": [1.5, 2.25, 3.0]})
NEW = pd.DataFrame({"order_id": ["d", "e"], "amount": [4.0, 0.1 + 0.2]})


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "data"
    monkeypatch.setenv("DAGRUN_DATA", str(root))
    return root


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


# ---------------------------------------------------------------- files


def test_layout_round_trip_and_unrecorded_outside_a_worker(data_dir):
    part = partition("clean_sales", DS)
    assert part.path == data_dir / "clean_sales" / f"ds={DS}" / "part.csv"
    assert not part.exists()
    result = part.write(OLD)
    assert part.exists()
    assert (result.rows, result.unchanged, result.recorded) == (3, False, False)
    assert result.sha256 == sha256(part.path)
    pd.testing.assert_frame_equal(part.read(), OLD)
    assert partition("clean_sales", date(2026, 1, 5)).path == part.path


def test_csv_bytes_are_fixed_columns_no_index_fixed_floats_and_newlines():
    part = partition("sales", DS)
    part.write(NEW)
    assert part.path.read_bytes() == b"order_id,amount\nd,4\ne,0.3\n"


def test_rewrite_replaces_the_whole_partition_and_never_appends():
    part = partition("sales", DS)
    part.write(OLD)
    part.write(NEW)
    pd.testing.assert_frame_equal(
        part.read(), pd.DataFrame({"order_id": ["d", "e"], "amount": [4.0, 0.3]})
    )
    first = part.write(OLD)
    second = part.write(OLD)
    assert (first.unchanged, second.unchanged) == (False, True)
    assert len(part.read()) == 3
    assert folder_listing(part.path) == ["part.csv"]


def test_failure_mid_write_keeps_the_old_partition_and_no_temporary_file(monkeypatch):
    part = partition("sales", DS)
    part.write(OLD)
    before = part.path.read_bytes()

    def write_half_then_fail(handle, data):
        handle.write(data[: len(data) // 2])
        handle.flush()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(partitions_module, "_write_durably", write_half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        part.write(NEW)
    assert part.path.read_bytes() == before
    assert folder_listing(part.path) == ["part.csv"]


def _write_and_die_before_rename(root: str) -> None:
    """In a child: write NEW, but the process dies (as if killed) before the rename."""
    os.environ["DAGRUN_DATA"] = root

    def die(fd: int) -> None:
        os._exit(7)

    os.fsync = die
    partition("sales", DS).write(NEW)


def test_writer_killed_mid_write_keeps_old_partition_and_next_write_sweeps_debris(data_dir):
    part = partition("sales", DS)
    part.write(OLD)
    before = part.path.read_bytes()
    child = multiprocessing.get_context("fork").Process(
        target=_write_and_die_before_rename, args=(str(data_dir),)
    )
    child.start()
    child.join(30)
    assert child.exitcode == 7
    assert part.path.read_bytes() == before
    debris = [name for name in folder_listing(part.path) if name != "part.csv"]
    assert len(debris) == 1 and debris[0].startswith(".tmp.")

    part.write(NEW)
    assert folder_listing(part.path) == ["part.csv"]
    assert len(part.read()) == 2


DETERMINISM_SCRIPT = """
import hashlib, sys
import pandas as pd
from dagrun import partition
frame = pd.DataFrame({"id": [3, 1, 2], "name": ["c", None, "a"], "price": [0.1 + 0.2, 1e-7, 2.5],
                      "at": pd.to_datetime(["2026-01-05 10:00", None, "2026-01-05 23:59"])})
part = partition("det", "2026-01-05", format=sys.argv[1])
print(part.write(frame).sha256)
"""


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_bytes_are_identical_across_processes_and_hash_seeds(tmp_path, fmt):
    """The sha check is only meaningful if a rerun in a fresh process writes equal bytes."""
    hashes = set()
    for seed, root in (("1", "a"), ("2", "b")):
        env = {**os.environ, "PYTHONHASHSEED": seed, "DAGRUN_DATA": str(tmp_path / root)}
        out = subprocess.run(
            [sys.executable, "-c", DETERMINISM_SCRIPT, fmt],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        hashes.add(out.stdout.strip())
    assert len(hashes) == 1
    [digest] = hashes
    assert digest == sha256(tmp_path / "a" / "det" / "ds=2026-01-05" / f"part.{fmt}")


def test_parquet_round_trip_keeps_types_and_detects_unchanged():
    frame = NEW.assign(at=pd.to_datetime(["2026-01-05 10:00", "2026-01-05 11:00"]), n=[1, 2])
    part = partition("sales", DS, format="parquet")
    assert part.path.name == "part.parquet"
    first = part.write(frame)
    second = part.write(frame)
    assert (first.unchanged, second.unchanged) == (False, True)
    pd.testing.assert_frame_equal(part.read(), frame)


def test_parquet_without_pyarrow_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(InvalidPartition, match="pyarrow"):
        partition("sales", DS, format="parquet")


@pytest.mark.parametrize(
    ("dataset", "ds", "fmt", "message"),
    [
        ("../etc", DS, "csv", "dataset names"),
        ("a/b", DS, "csv", "dataset names"),
        (".hidden", DS, "csv", "dataset names"),
        ("sales", "2026-13-01", "csv", "YYYY-MM-DD"),
        ("sales", "2026-1-5", "csv", "YYYY-MM-DD"),
        ("sales", "2026-02-30", "csv", "YYYY-MM-DD"),
        ("sales", "20260105", "csv", "YYYY-MM-DD"),
        ("sales", "2026-W02-1", "csv", "YYYY-MM-DD"),
        ("sales", datetime(2026, 1, 5, tzinfo=UTC), "csv", "not a datetime"),
        ("sales", DS, "xlsx", "format must be"),
    ],
)
def test_bad_input_is_refused_without_retry_and_names_the_input(dataset, ds, fmt, message):
    with pytest.raises(InvalidPartition, match=message) as caught:
        partition(dataset, ds, format=fmt)
    assert (caught.value.dataset, caught.value.ds) == (dataset, ds)
    assert isinstance(caught.value, NonRetryableError)
    assert isinstance(caught.value, ValueError)


def test_writing_something_else_than_a_dataframe_is_refused():
    with pytest.raises(InvalidPartition, match="not list"):
        partition("sales", DS).write([1, 2])


def test_reading_a_missing_partition_says_which():
    with pytest.raises(PartitionNotFound, match=f"sales/ds={DS}") as caught:
        partition("sales", DS).read()
    assert isinstance(caught.value, LookupError)


# ---------------------------------------------------------------- fenced, recorded writes


def claim_task(store) -> Claim:
    """A real task instance of a one-task DAG, claimed by worker w1 (fence token 1)."""
    with DAG("parts", schedule="@daily", start_date=DS) as dag:
        BashTask("write_sales", command="true")
    spec = build_spec(dag, "parts.py")
    logical = datetime.fromisoformat(DS).replace(tzinfo=UTC)
    interval = spec.timetable.next_interval(None)
    assert interval.start == logical
    with store.write() as conn:
        now = store.now(conn)
        registry.save_dag(conn, spec, now)
        runs.create_runs(conn, spec, [interval], RunType.BACKFILL, now)
        runs.admit_runs(conn, spec, 1, now)
        runs.start_runs(conn, spec, now)
        [claim] = attempts.claim(conn, "w1", 1, 30, now)
    return claim


@pytest.fixture
def attempt(store):
    """The claimed task instance, with its attempt's context current as in a worker child."""
    claim = claim_task(store)
    set_current(
        make_context(
            dag_id=claim.dag_id,
            task_id=claim.task_id,
            run_id=claim.run_id,
            timezone="UTC",
            logical_date=claim.logical_date,
            data_interval_start=claim.data_interval_start,
            data_interval_end=claim.data_interval_end,
            try_number=claim.try_number,
            fence_token=claim.fence_token,
            ti_id=claim.ti_id,
            db_url=store.url,
        )
    )
    yield claim
    set_current(None)
    cached = engine._SHARED.pop(store.url, None)
    if cached is not None:
        cached.dispose()


def recorded_writes(store) -> list[dict]:
    with store.read() as conn:
        rows = conn.execute(select(partition_write).order_by(partition_write.c.id))
        return [dict(r) for r in rows.mappings()]


def test_write_in_an_attempt_is_recorded_with_sha_rows_and_fence(store, attempt):
    part = partition("sales", DS)
    results = [part.write(OLD), part.write(OLD), part.write(NEW)]
    assert [r.recorded for r in results] == [True, True, True]
    rows = recorded_writes(store)
    assert [(r["rows"], r["unchanged"]) for r in rows] == [(3, False), (3, True), (2, False)]
    assert [r["sha256"] for r in rows] == [r.sha256 for r in results]
    assert rows[-1]["sha256"] == sha256(part.path)
    assert rows[0] | {"id": None, "written_at": None} == {
        "id": None,
        "dataset": "sales",
        "partition_key": DS,
        "path": str(part.path),
        "rows": 3,
        "sha256": results[0].sha256,
        "unchanged": False,
        "ti_id": attempt.ti_id,
        "dag_id": "parts",
        "task_id": "write_sales",
        "run_pk": attempt.run_pk,
        "try_number": 1,
        "fence_token": attempt.fence_token,
        "written_at": None,
    }


def lose_by_reclaim(store, claim: Claim) -> None:
    """w1 gives the task back (shutdown) and w2 claims it: a new fence token."""
    with store.write() as conn:
        now = store.now(conn)
        attempts.release(conn, "w1", [(claim.ti_id, claim.fence_token)], now, "test")
        [again] = attempts.claim(conn, "w2", 1, 30, now)
    assert again.fence_token == claim.fence_token + 1


def lose_by_reaping(store, claim: Claim) -> None:
    """w1 stalls past its lease; the reaper queues the task as a new attempt."""
    with store.write() as conn:
        later = store.now(conn) + timedelta(seconds=31)
        reaped = upkeep.reap_expired(conn, registry.SpecCache().bound(conn), later)
    assert [r.ti_id for r in reaped] == [claim.ti_id]


def lose_by_expiry(store, claim: Claim) -> None:
    """w1 stalls past its lease and nobody has reaped the task yet: it is still w1's row,
    fence and all, but the lease has run out."""
    with store.write() as conn:
        conn.execute(
            update(task_instance)
            .where(task_instance.c.id == claim.ti_id)
            .values(lease_until=store.now(conn) - timedelta(seconds=1))
        )


@pytest.mark.parametrize("lose", [lose_by_reclaim, lose_by_reaping, lose_by_expiry])
def test_write_after_the_lease_is_lost_is_refused_and_keeps_the_old_partition(store, attempt, lose):
    part = partition("sales", DS)
    part.write(OLD)
    before = part.path.read_bytes()
    lose(store, attempt)
    with pytest.raises(LeaseLost) as caught:
        part.write(NEW)
    assert (caught.value.ti_id, caught.value.fence_token) == (attempt.ti_id, attempt.fence_token)
    assert part.path.read_bytes() == before
    assert folder_listing(part.path) == ["part.csv"]
    assert [r["rows"] for r in recorded_writes(store)] == [3]


def test_identical_rewrite_after_the_lease_is_lost_is_refused_too(store, attempt):
    part = partition("sales", DS)
    part.write(OLD)
    lose_by_reclaim(store, attempt)
    with pytest.raises(LeaseLost):
        part.write(OLD)
    assert len(recorded_writes(store)) == 1
